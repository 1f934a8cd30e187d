// Runs a whole cluster of one node in this process: shards with their
// ssd_flush actors, cache tiers, the dense actor, workers, and the
// coordinator that drives training (async or pass mode), reports progress
// and stops gracefully (drain in-flight pushes, write back caches, flush
// every dirty row, sync LMDB). Then evaluates the held-out data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/config.hpp"
#include "actors/protocol.hpp"
#include "actors/training_protocol.hpp"
#include "common/error.hpp"

namespace strata::actors {

struct training_progress {
  uint64_t examples = 0;
  uint64_t batches = 0;
  double recent_loss = 0;  // mean logloss over the last reports
  double examples_per_s = 0;
  double seconds = 0;
};

struct training_report {
  uint64_t examples = 0;
  uint64_t batches = 0;
  double seconds = 0;
  double examples_per_s = 0;
  double train_loss = 0;  // mean over the last 10% of batches
  double heldout_auc = 0;
  double heldout_logloss = 0;
  uint64_t heldout_examples = 0;
  uint64_t bad_lines = 0;
  std::vector<tier_stats> tiers;  // every shard and cache tier, after the evaluation
  uint64_t stored_keys = 0;       // distinct keys with a row (DRAM + LMDB, after drain)
  uint64_t checkpoints = 0;       // checkpoints completed during the run
  std::string last_checkpoint;    // directory of the last one ("" if none)
  bool stopped = false;           // a stop request ended training before the data did
};

using progress_callback = std::function<void(const training_progress&)>;

struct training_cluster;

// Multi-node clusters (deploy/multi_node.hpp): which actors of the cluster
// this node hosts. A set function returns a proxy of an actor hosted by
// another node (transport/remote_actors.hpp), or nullopt for one spawned
// here; unset functions spawn everything here. Every node spawns the same
// cluster_config, so actor i is the same actor on every node.
struct cluster_placement {
  std::function<std::optional<shard_actor>(uint32_t index)> remote_shard;
  std::function<std::optional<cache_tier_actor>(uint32_t index)> remote_cache;
  std::function<std::optional<worker_actor>(uint32_t index)> remote_worker;
  std::optional<dense_actor> remote_dense;
  // False on member nodes: the coordinator runs on the first node only.
  bool coordinator = true;
  // Non-empty: scaling is refused with this reason.
  std::string refuse_scaling;
  // Set (multi-node, deploy/node_spawner.hpp): a scale's new shard `index`
  // is spawned on `node` (empty: spread) and retired there, instead of
  // here. Unset: in this process.
  std::function<expected<shard_actor>(uint32_t index, const std::string& node)> spawn_shard;
  std::function<void(uint32_t index)> retire_shard;
  // Draining a node (multi-node): a successor of shard `index` on `node`,
  // then the old one (keep) or the successor retired on its node.
  std::function<expected<shard_actor>(uint32_t index, const std::string& node)> spawn_successor;
  std::function<void(uint32_t index, bool keep)> end_rehome;
  // A relocated cache tier's successor, spawned here (the coordinator's
  // node) at `index`: made reachable by workers on other nodes.
  std::function<void(uint32_t index, const cache_tier_actor& cache)> publish_cache;
};

// Seams for the composition root (e.g. the metrics exporter): `started`
// runs once every actor is spawned; `finished` runs with the final report
// while the actors are still alive (a node keeps serving /metrics for a
// linger period there), before they stop.
//
// Multi-node (deploy/multi_node.hpp): `place` builds this node's placement
// once the actor system exists (proxies are actors); `join` runs after
// `started` and before training: it exports this node's actors and waits
// until every node has; an error stops the node. A member node (placement
// without the coordinator) trains nothing itself: it serves its actors
// until `serve_until_done` returns (the coordinator's node has finished
// with it), then reports its own tiers. `shutdown` runs at the very end,
// whatever the outcome.
struct cluster_hooks {
  std::function<void(caf::actor_system&, const training_cluster&)> started;
  std::function<void(const training_report&)> finished;
  std::function<expected<cluster_placement>(caf::actor_system&)> place;
  std::function<status(const training_cluster&)> join;
  std::function<status()> serve_until_done;
  // Last, while the actor system still exists (e.g. stop the transport,
  // whose relays are actors of this system); `ok`: the run succeeded.
  std::function<void(bool ok)> shutdown;
  // The progress callback is called at most this often (seconds); 0: on
  // every report (tests that act at a given batch, whatever the speed).
  double progress_interval_s = 1.0;
};

// Trains per `config` and returns the report; errors name what failed
// (data file, LMDB path, ...).
expected<training_report> run_local_cluster(const cluster_config& config,
                                            const progress_callback& progress = {},
                                            const cluster_hooks& hooks = {});

}  // namespace strata::actors
