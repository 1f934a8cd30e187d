// The training side of strata's protocol: the typed interfaces of the worker
// and coordinator actors and the messages only they exchange. The storage
// actors (shard, ssd_flush, cache tier) and the dense actor are declared in
// actors/protocol.hpp; this header adds what drives training on top of
// them. Every struct has an inspect() and is registered by
// add_training_message_types() so it can cross processes later.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <string>

#include "actors/protocol.hpp"

namespace strata::actors {

// A worker's answer to run: what it did since the run began, and whether its
// data is exhausted. Sent only once every push of those batches has been
// acknowledged by its owner, so the coordinator may end a pass or drain.
struct worker_result {
  uint32_t worker = 0;
  uint64_t batches = 0;    // batches trained during this run
  uint64_t examples = 0;   // examples trained during this run
  double loss_sum = 0;     // sum of per-example logloss during this run
  uint64_t bad_lines = 0;  // skipped input lines so far (whole stream)
  bool finished = false;   // no more data (or max_batches reached)
  uint64_t position = 0;   // data position: batches of the stream trained, whole stream
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_result& x) {
  return f(caf::meta::type_name("worker_result"), x.worker, x.batches, x.examples, x.loss_sum,
           x.bad_lines, x.finished, x.position);
}

// The coordinator's answer to run, sent after the graceful stop (pushes
// acknowledged, caches written back, shards drained and synced).
struct training_summary {
  uint64_t batches = 0;
  uint64_t examples = 0;
  double loss_sum = 0;   // sum of per-example logloss over the whole run
  double tail_loss = 0;  // mean per-example logloss over the last 10% of batches
  uint64_t bad_lines = 0;
  uint64_t passes = 0;          // pass mode: passes cut (0 in async mode)
  uint64_t checkpoints = 0;     // checkpoints completed during the run
  std::string last_checkpoint;  // directory of the last one ("" if none)
  bool stopped = false;         // a stop request ended the run before the data did
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, training_summary& x) {
  return f(caf::meta::type_name("training_summary"), x.batches, x.examples, x.loss_sum, x.tail_loss,
           x.bad_lines, x.passes, x.checkpoints, x.last_checkpoint, x.stopped);
}

// The coordinator's answer to scale: the committed map and what moved.
struct scale_result {
  uint64_t epoch = 0;  // of the committed partition map
  uint32_t shards = 0;
  uint32_t moved_partitions = 0;
  uint64_t copied_rows = 0;  // streamed while training went on
  uint64_t delta_rows = 0;   // sent again at the fence (touched during the copy)
  uint64_t bytes = 0;        // row bytes sent, copy and delta
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scale_result& x) {
  return f(caf::meta::type_name("scale_result"), x.epoch, x.shards, x.moved_partitions,
           x.copied_rows, x.delta_rows, x.bytes);
}

// What the coordinator knows of the cluster (admin status).
struct cluster_status {
  routing_table routing;  // the committed partition map and its shards
  std::string state;      // "idle", "training", "stopping", "finished", "failed"
  uint64_t batches = 0;   // reported by workers so far (this run)
  uint64_t examples = 0;
  double recent_loss = 0;
  uint64_t passes = 0;
  uint64_t checkpoints = 0;
  std::string last_checkpoint;
  uint32_t scaling_to = 0;  // target shard count of a scale in progress (0: none)
  uint32_t workers = 0;
  std::vector<caf::actor> caches;
  // Workers and cache tiers a relocation replaced (a drain moved them to
  // the coordinator's node), ascending.
  std::vector<uint32_t> relocated_workers, relocated_caches;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_status& x) {
  return f(caf::meta::type_name("cluster_status"), x.routing, x.state, x.batches, x.examples,
           x.recent_loss, x.passes, x.checkpoints, x.last_checkpoint, x.scaling_to, x.workers,
           x.caches, x.relocated_workers, x.relocated_caches);
}

// A worker: one data stream and a model replica.
using worker_actor = caf::typed_actor<
    // Train `batches` more batches (0: until the data ends), tagging their
    // pushes with checkpoint epoch `epoch`, then reply once their pushes
    // are acknowledged. Progress reports go to the sender of run, which
    // must be a coordinator_actor. One run at a time.
    caf::replies_to<run_atom, uint64_t, uint64_t>::with<worker_result>,
    // Between runs (at a cut: nothing in flight): talk to these cache tiers
    // from now on, as many as before (a cache tier relocated to another
    // node, docs/multi-node.md "Draining a node"). Refused during a run.
    caf::replies_to<rebind_atom, std::vector<cache_tier_actor>>::with<ok_atom>,
    // Mailbox depth, for metrics.
    caf::replies_to<stats_atom>::with<actor_stats>>;

// The coordinator: drives the workers (async mode: one run to the end; pass
// mode: one run per pass, caches ended and started in between), collects
// progress, and stops the cluster gracefully.
using coordinator_actor = caf::typed_actor<
    // Train to the end, stop gracefully, reply with the summary.
    caf::replies_to<run_atom>::with<training_summary>,
    // A worker's progress since its last report.
    caf::reacts_to<progress_atom, progress_report>,
    // On demand: take a checkpoint at the next cut (round or pass
    // boundary); answers its directory once complete (FILES written).
    // Errors if the cluster has no checkpoint directory.
    caf::replies_to<checkpoint_atom>::with<std::string>,
    // Graceful stop: end training at the next cut, take a final checkpoint
    // (if configured), drain; run then answers with stopped = true.
    caf::reacts_to<stop_atom>,
    // The periodic checkpoint timer (internal).
    caf::reacts_to<tick_atom>,
    // A cluster without workers (a store that clients push to through the
    // gateway) polls for a stop and due checkpoints with this (internal).
    caf::reacts_to<idle_atom>,
    // Scale to N shards (docs/scaling.md): spawn or retire shards, copy the
    // moving partitions while training goes on, fence and commit the new
    // map at the next cut (pass mode: a pass boundary); answers once every
    // router switched and retired shards are gone. One scale at a time.
    caf::replies_to<scale_atom, uint32_t>::with<scale_result>,
    // The same with a placement: the node of every shard index (as many
    // names as shards; the names of new indices are used: shards that exist
    // do not move). Empty: "spread". Multi-node clusters only pass it on.
    caf::replies_to<scale_atom, uint32_t, std::vector<std::string>>::with<scale_result>,
    // Drain (docs/multi-node.md "Draining a node"): shard indices[k] gets a
    // successor on node destinations[k]; every partition it owns moves
    // there with the same copy, fence and commit; the committed map keeps
    // its owners, its shards[index] is the successor; the old shards are
    // retired on their node. Refused while a scale or drain runs.
    caf::replies_to<drain_atom, std::vector<uint32_t>,
                    std::vector<std::string>>::with<scale_result>,
    // Relocate workers and cache tiers (a node that hosts them is drained,
    // docs/multi-node.md "Draining a node"): at the next cut the listed
    // cache tiers write their dirty rows back and get successors at the
    // same index, the listed workers get successors that resume their
    // streams at their positions (no example skipped or trained twice),
    // the other workers are told their new cache tiers, and the old actors
    // are retired. Answers once done. Refused during a scale, while another
    // relocation waits or runs, when no cut comes (async rounds that run to
    // the end) and once training ends.
    caf::replies_to<relocate_atom, std::vector<uint32_t>, std::vector<uint32_t>>::with<ok_atom>,
    // The cluster's state for the admin API.
    caf::replies_to<map_atom>::with<cluster_status>,
    // Mailbox depth, for metrics.
    caf::replies_to<stats_atom>::with<actor_stats>>;

// Registers every message type above (and the ones of protocol.hpp it uses)
// with a CAF config. Call it next to add_message_types().
void add_training_message_types(caf::actor_system_config& config);

}  // namespace strata::actors
