// The worker actor: one data stream and a model replica.
//
// Per batch i it looks up the rows of batch.keys() (duplicates kept) from
// the cache tier that serves each key, computes gradients, pushes the row
// gradients back the same way and the dense gradient to the dense actor;
// while batch i waits or computes, batches i+1..i+prefetch_depth are
// already read and prefetched. Routing: async mode sends everything to the
// worker's own cache tier (caches[0] of its list); pass mode sends each key
// to its owner for the pass, pass_owner_of(key, caches.size()), one lookup
// and one push per owner. Dense weights are pulled before the first batch
// and every pull_dense_every steps. At most max_in_flight batches have
// pushes not yet acknowledged; the worker never blocks: it reacts to
// replies and keeps its pipeline in its state.
//
// Two seams keep the actor independent of where batches and gradients come
// from: a batch_source (the reader over the worker's shard of the file, or
// a test's synthetic stream) and a gradient_source (the CTR model, or a
// test's integer increments for the exact-sum test). Both are owned by the
// worker and called from its thread only.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "actors/config.hpp"
#include "actors/protocol.hpp"
#include "actors/training_protocol.hpp"
#include "common/error.hpp"
#include "model/ctr_model.hpp"
#include "model/example.hpp"

namespace strata::actors {

// Where a worker's batches come from.
class batch_source {
 public:
  virtual ~batch_source() = default;
  // Up to n examples; an empty batch at the end of the stream.
  virtual expected<model::batch> next(size_t n) = 0;
  // Input lines skipped so far.
  virtual uint64_t bad_lines() const = 0;
};

// What a worker computes on a batch.
class gradient_source {
 public:
  virtual ~gradient_source() = default;
  // rows: row_dim floats per key occurrence (batch.keys() order); dense:
  // the current dense weights. Fills row_grads (row_dim floats per
  // occurrence), dense_grads (dense size) and loss; predictions optional.
  virtual model::batch_result compute(const model::batch& batch, std::span<const float> rows,
                                      std::span<const float> dense) = 0;
  // The same into `out`, whose vectors a source may reuse (the worker keeps
  // one batch_result across batches: no allocation per batch in the model).
  virtual void compute_into(const model::batch& batch, std::span<const float> rows,
                            std::span<const float> dense, model::batch_result& out) {
    out = compute(batch, rows, dense);
  }
};

// Reads the worker's data (config.data: its shard of the file) through
// model::reader, config.epochs times over, reopening the file per epoch.
// Opening errors name the file. (max_batches is enforced by the worker.)
expected<std::unique_ptr<batch_source>> open_reader_source(const worker_config& config);

// Gradients of the CTR model (model::ctr_model::forward_backward).
std::unique_ptr<gradient_source> make_model_gradients(const model::model_config& config);

// The count objective (gradient_kind::count): -1 per sighting on every
// element of the key's row of dim `dim`.
std::unique_ptr<gradient_source> make_count_gradients(uint32_t dim);

// What a worker talks to.
struct worker_peers {
  training_mode mode = training_mode::async;
  // Async mode: one entry, the worker's own cache tier. Pass mode: every
  // cache tier of the cluster, in index order (pass owners).
  std::vector<cache_tier_actor> caches;
  dense_actor dense;
};

// Spawns a worker. `layout` is the table's row layout (records in lookup
// replies), whose dim must be the model's row_dim.
worker_actor spawn_worker(caf::actor_system& system, const worker_config& config,
                          const row_layout& layout, worker_peers peers,
                          std::shared_ptr<batch_source> batches,
                          std::shared_ptr<gradient_source> gradients);

}  // namespace strata::actors
