// The coordinator actor, and the composition of one node's training
// cluster around it.
//
// The coordinator drives training and stops it gracefully:
//   async mode: every worker runs to the end of its data;
//   pass mode:  pass_start(p) to every cache tier, then every worker runs
//               pass_batches batches; a worker answers once its pushes are
//               acknowledged, so when all have answered the pass's updates
//               are all in the caches; pass_end(p) to every cache tier
//               (each writes its dirty rows back to the shards), then the
//               next pass, until every worker's data has ended.
// Async mode trains in rounds (checkpoint_settings::round_batches per
// worker); the end of a round or a pass is a cut: every worker's pushes are
// acknowledged (pass mode: caches written back), so a checkpoint taken
// there holds exactly the batches before each worker's position. Pushes
// carry the epoch of the next checkpoint; a shard refuses a cut after a
// push of a later epoch. Checkpoints: every interval_batches per worker,
// every interval_seconds (a timer), on demand (checkpoint_atom), and at the
// end or a stop (stop_atom: the run ends at the next cut, stopped = true).
// A checkpoint's cut pauses training only for the flush of dirty rows; the
// copies and FILES complete while the next round runs.
// Then the graceful stop: drain every cache tier (write-back), then every
// shard (every dirty row written down, LMDB synced), then the summary is
// the reply to run. Workers report progress per batch; the coordinator
// hands a running total to a progress sink on its own thread. Any error
// (a worker's data, a tier's I/O) fails the run with that error; the
// cluster is then stopped by its owner without a drain.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "actors/config.hpp"
#include "actors/local_cluster.hpp"
#include "actors/partition_map.hpp"
#include "actors/protocol.hpp"
#include "actors/push_gate.hpp"
#include "actors/training_protocol.hpp"
#include "actors/worker_actor.hpp"
#include "common/error.hpp"

namespace strata::actors {

// Called by the coordinator (its thread, one call at a time) after every
// progress report with running totals; seconds and examples_per_s are left
// 0 (actors read no clock: the sink's owner adds time).
using progress_sink = std::function<void(const training_progress&)>;

// Spawns shard `index` (LMDB environment in a fresh directory, ssd_flush
// actor) for a scale up, and removes a retired shard's files once its
// actors are told to exit. `node`: where the scale's placement puts it
// (multi-node clusters, deploy/node_spawner.hpp; empty: the factory's
// choice, "spread"); a single process ignores it. Unset spawn: scaling up
// is refused.
struct shard_factory {
  std::function<expected<shard_actor>(uint32_t index, const std::string& node)> spawn;
  // spawn may wait on another node (multi-node): it then runs off the
  // coordinator's thread. In one process it returns at once and runs
  // inline, so a deterministic scheduler's run stays deterministic.
  bool spawn_waits = false;
  std::function<void(uint32_t index)> remove_files;
  // Draining a node (multi-node only; unset: drains are refused): a
  // successor of shard `index` on `node`; end_rehome retires the old shard
  // (keep) or the successor (the drain is abandoned) on its node.
  std::function<expected<shard_actor>(uint32_t index, const std::string& node)> spawn_successor;
  std::function<void(uint32_t index, bool keep)> end_rehome;
  // Non-empty: every scale is refused with this reason (e.g. a multi-node
  // cluster, whose shards live in other processes).
  std::string refuse_scaling;
};

// Successors of workers and cache tiers (relocate_atom: a drained node
// hosts them), spawned on the coordinator's node. spawn_cache: cache tier
// `index` routing by `map` onto `shards` (multi-node: exported there under
// `published` below, so workers on other nodes reach it). spawn_worker: worker
// `index` resuming its stream at `position` (batches of the stream trained)
// and talking to `caches`. Unset: relocations are refused.
struct relocation_factory {
  std::function<expected<cache_tier_actor>(uint32_t index, const std::vector<shard_actor>& shards,
                                           const partition_map& map)>
      spawn_cache;
  std::function<expected<worker_actor>(uint32_t index, uint64_t position,
                                       std::vector<cache_tier_actor> caches)>
      spawn_worker;
  // Called with each cache tier successor once it replaced the old one
  // (multi-node: exported under its index). Optional.
  std::function<void(uint32_t index, const cache_tier_actor& cache)> published;
};

struct coordinator_peers {
  std::vector<worker_actor> workers;
  std::vector<cache_tier_actor> caches;
  std::vector<shard_actor> shards;
  dense_actor dense;  // its record goes into checkpoints
  shard_factory factory;
  // Clients' pushes (the gateway): closed before the final cut, which waits
  // for the pushes inside (actors/push_gate.hpp). Null: none.
  std::shared_ptr<push_gate> client_pushes;
  relocation_factory relocations;
};

// What the coordinator needs to take checkpoints (docs/checkpoints.md).
struct checkpoint_plan {
  checkpoint_settings settings;  // no directory: no checkpoints
  std::string cluster;
  table_config table;
  partition_map map;
  uint16_t incarnation = 0;
  uint64_t first_epoch = 1;         // epoch of the next checkpoint
  std::vector<uint64_t> positions;  // per worker, where its stream starts (restored)
  uint64_t restored_passes = 0, restored_batches = 0, restored_examples = 0;
};

coordinator_actor spawn_coordinator(caf::actor_system& system, training_mode mode,
                                    uint64_t pass_batches, coordinator_peers peers,
                                    progress_sink sink = {}, checkpoint_plan plan = {});

// Where each worker's batches and gradients come from, and the dense
// actor's initial weights. Unset members take the defaults: the reader over
// worker_config.data, the CTR model of cluster_config.model, and
// ctr_model::initial_dense(). Tests set them (e.g. the exact-sum test's
// synthetic batches and integer increments).
struct worker_seams {
  std::function<expected<std::shared_ptr<batch_source>>(const worker_config&)> batches;
  std::function<std::shared_ptr<gradient_source>(const worker_config&)> gradients;
  std::optional<std::vector<float>> initial_dense;
};

// Every actor of one node's training cluster. The caller owns their
// lifetime: stop() sends every actor an exit (the actor system's
// destructor waits for them). `map` and `shards` are those at spawn time;
// after a scale, ask the coordinator (map_atom) for the current ones.
// Multi-node: the vectors hold proxies for actors hosted elsewhere (the
// *_here flags say which are local: a node's metrics export only its own),
// and a member node has no coordinator.
struct training_cluster {
  partition_map map;
  std::vector<shard_actor> shards;
  std::vector<cache_tier_actor> caches;
  dense_actor dense;
  std::vector<worker_actor> workers;
  coordinator_actor coordinator;
  std::vector<bool> shard_here, cache_here, worker_here;
  bool dense_here = true;
  // Spawns shard `index` here as a scale does (shard 0's settings, its own
  // index) with its LMDB environment in `dir` (empty: named like shard 0's
  // with the index at its end, which it clears first). A node's spawner
  // (deploy/node_spawner.hpp) uses it for shards a scale places there.
  std::function<expected<shard_actor>(uint32_t index, const std::filesystem::path& dir)>
      spawn_shard_at;
  // Told of every shard spawn_shard_at spawns, once set (the metrics
  // exporter sets it in cluster_hooks::started: a node exports the shards a
  // scale spawns on it). Shared by the copies of this struct.
  std::shared_ptr<std::function<void(const shard_actor&)>> spawned =
      std::make_shared<std::function<void(const shard_actor&)>>();
  // Told of every cache tier a drain relocates to this node (the
  // coordinator's), once it replaced the old one; like `spawned`.
  using relocated_fn = std::function<void(uint32_t index, const cache_tier_actor&)>;
  std::shared_ptr<relocated_fn> relocated_cache = std::make_shared<relocated_fn>();

  void stop();
};

// Spawns shards (config.shards), cache tiers (config.caches, over a
// partition map of config.partitions onto the shards), the dense actor,
// the workers and the coordinator. Async mode: worker w uses cache tier
// w % caches; pass mode: every worker talks to every cache tier. Errors
// (bad config, LMDB paths) stop whatever was already spawned.
expected<training_cluster> spawn_training_cluster(caf::actor_system& system,
                                                  const cluster_config& config,
                                                  const worker_seams& seams = {},
                                                  progress_sink sink = {},
                                                  const cluster_placement& placement = {});

}  // namespace strata::actors
