// Typed configuration of the actors, filled by the composition root
// (deploy/) from the manifest. Actors never parse YAML (docs/architecture.md, Layout).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actors/push_gate.hpp"
#include "common/clock.hpp"
#include "model/ctr_model.hpp"
#include "model/reader.hpp"
#include "tiers/cache_backend.hpp"
#include "tiers/dram_tier.hpp"
#include "tiers/lmdb_tier.hpp"
#include "tiers/table.hpp"
#include "tiers/tier_chain.hpp"

namespace strata::actors {

enum class training_mode : uint8_t {
  async,  // pushes go to the owning shard; caches serve copies <= staleness batches old
  pass,   // AIBox: each key owned by one cache tier for a pass; write-back at pass end
};

// Told of the rows a shard updated (a push in async mode, a write-back in
// pass mode): the seam online updates to serving use (serving/
// update_stream.hpp). Called on the shard's thread; must not block.
class row_update_sink {
 public:
  virtual ~row_update_sink() = default;
  virtual void rows_updated(const row_layout& layout, std::span<const uint64_t> keys,
                            const_rows_span rows) = 0;
};

struct shard_config {
  uint32_t index = 0;
  table_config table;
  dram_tier_config dram;
  tier_chain_config chain;
  lmdb_tier_config lmdb;  // directory, partitions, map size, sync
  // A write-behind batch is sent to ssd_flush once this many rows are
  // queued (and always on drain).
  size_t flush_batch_rows = 4096;
  // Back-pressure: at most this many flush batches in flight; further
  // evicted rows wait (readable) in the write-behind buffer.
  uint32_t max_flushes_in_flight = 4;
  // Bound on the write-behind: once this many batches' rows
  // (max_queued_flush_batches x flush_batch_rows) are queued behind the
  // flushes in flight, the requests that can spill DRAM into it (pulls,
  // pushes, write-backs, prefetches, migration batches) wait in the
  // shard's mailbox until a flush lands. A slow disk then slows training
  // instead of growing memory without limit.
  uint32_t max_queued_flush_batches = 4;
  // Run ssd_flush on a thread of its own (LMDB commits block); off in
  // deterministic tests, where every actor runs on the test scheduler.
  bool flush_on_own_thread = true;
  // Copy rate limit of a migration this shard is the source of (manifest
  // shards.migration_rows_per_s; 0: unlimited): its migrate_in batches are
  // paced on the actor clock so a scale leaves transport and disk to training.
  uint64_t migration_rows_per_s = 0;
  // Latency metrics only; nothing in the shard's behaviour reads it.
  const clock_source* clock = &steady_clock_source::instance();
  // Restored from a checkpoint (empty / 0 on a fresh start): the admission
  // sketch's counters (used when their size matches the sketch) and the
  // TTL clock.
  std::vector<uint16_t> restored_sketch;
  uint32_t restored_tick = 0;
  // Online updates: told of every updated row (null: nobody listens).
  std::shared_ptr<row_update_sink> updates;
  // The cluster's checkpoint root (manifest checkpoint.dir; empty: no
  // checkpoints). A cut of epoch e is written to
  // shard_checkpoint_dir(root / checkpoint_name(e), index): the directory
  // comes from this node's own configuration, never from a message.
  std::filesystem::path checkpoint_root;
};

// Builds a cache tier's backend; the composition root picks the CUDA one
// (gpu/staged_cache.hpp) for `caches.backend: gpu`.
using cache_backend_factory = std::function<expected<std::unique_ptr<cache_backend>>(
    const row_layout& layout, const cache_geometry& geometry)>;

struct cache_config {
  uint32_t index = 0;
  table_config table;
  cache_geometry geometry;
  cache_backend_factory make_backend;  // empty: cpu_cache
  // Async mode: a copy fetched more than `staleness` batches ago (on the
  // reader's batch clock) is refreshed from its shard.
  uint32_t staleness = 8;
  // Latency metrics only.
  const clock_source* clock = &steady_clock_source::instance();
};

struct worker_config {
  uint32_t index = 0;
  model::reader_config data;
  uint32_t batch_size = 512;
  uint32_t prefetch_depth = 2;    // prefetch batch i + k while batch i computes
  uint32_t max_in_flight = 2;     // batches pushed but not yet acknowledged
  uint32_t pull_dense_every = 1;  // pull fresh dense weights every N steps
  uint64_t max_batches = 0;       // 0: until the data ends (counts skipped batches too)
  uint32_t epochs = 1;
  // Resumed from a checkpoint: batches of the stream already trained (the
  // worker's recorded data position); they are read and skipped.
  uint64_t skip_batches = 0;
};

struct dense_config {
  float learning_rate = 0.001f;  // Adam on the MLP weights
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
};

// What workers compute (manifest model.objective).
enum class gradient_kind : uint8_t {
  ctr,    // the CTR model (model/ctr_model.hpp)
  count,  // diagnostic: each sighting of a key pushes -1 to every element of
          // its row; with SGD, learning rate 1 and zeros every weight counts
          // its key's sightings (the exact-sum check through the real CLI)
};

// Checkpoints (docs/checkpoints.md). No directory: no checkpoints.
struct checkpoint_settings {
  std::filesystem::path directory;  // checkpoints go to directory/ckpt-<epoch>
  uint64_t interval_batches = 0;    // per worker between checkpoints (0: not by batches)
  uint32_t interval_seconds = 0;    // wall time between checkpoints (0: not by time)
  uint32_t keep = 3;                // complete checkpoints kept
  bool at_stop = true;              // a final checkpoint at a graceful stop / the end
  // Async mode: workers train in rounds of at most this many batches; a
  // round's end is where a cut can happen (a checkpoint, a stop). Smaller
  // rounds make stops and on-demand checkpoints prompter and cost a
  // pipeline drain each.
  uint64_t round_batches = 64;
  bool enabled() const { return !directory.empty(); }
};

struct cluster_config {
  std::string name = "local";
  table_config table;  // one table, dim = model.row_dim()
  model::model_config model;
  training_mode mode = training_mode::async;
  uint32_t partitions = 4096;
  std::vector<shard_config> shards;
  std::vector<cache_config> caches;
  std::vector<worker_config> workers;
  dense_config dense;
  uint64_t pass_batches = 64;     // pass mode: batches per worker per pass
  model::reader_config heldout;   // evaluated after training
  uint64_t heldout_examples = 0;  // 0: the whole held-out window
  uint32_t threads = 0;           // CAF scheduler threads; 0: hardware concurrency
  gradient_kind gradients = gradient_kind::ctr;
  checkpoint_settings checkpoint;
  // The gate of clients' pushes through the gateway (actors/push_gate.hpp),
  // shared by the gateway and the coordinator; null: no gateway.
  std::shared_ptr<push_gate> client_pushes;
  // Filled by restore_checkpoint (actors/checkpoint.hpp); defaults for a
  // fresh start.
  uint16_t incarnation = 0;             // rows created get (incarnation, 0) versions
  uint64_t first_epoch = 1;             // epoch of the next checkpoint
  std::vector<uint8_t> restored_dense;  // the dense actor's record (empty: initial weights)
  std::string restored_dense_from;      // its file (errors name it)
  uint64_t restored_passes = 0;
  uint64_t restored_batches = 0;
  uint64_t restored_examples = 0;
};

}  // namespace strata::actors
