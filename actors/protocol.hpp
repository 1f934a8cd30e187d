// Every message between strata's actors, declared once (message
// protocols are types). Each actor's interface is a CAF 0.17 typed actor;
// every struct carried in a message has an inspect() and is registered by
// add_message_types() so it crosses processes over the transport.
//
// Rows travel as row_batch: keys plus packed records of the table's layout
// (tiers/row.hpp), as bytes.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "common/latency_histogram.hpp"

namespace strata::actors {

// --- atoms (CAF 0.17: at most 10 characters) ----------------------------------
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using push_atom = caf::atom_constant<caf::atom("push")>;
using write_back_atom = caf::atom_constant<caf::atom("writeback")>;
using prefetch_atom = caf::atom_constant<caf::atom("prefetch")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using pass_start_atom = caf::atom_constant<caf::atom("passstart")>;
using pass_end_atom = caf::atom_constant<caf::atom("passend")>;
using push_dense_atom = caf::atom_constant<caf::atom("pushdense")>;
using pull_dense_atom = caf::atom_constant<caf::atom("pulldense")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using ok_atom = caf::atom_constant<caf::atom("ok")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpoint")>;
using copied_atom = caf::atom_constant<caf::atom("copied")>;
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;
using migrate_in_atom = caf::atom_constant<caf::atom("migratein")>;
using fence_atom = caf::atom_constant<caf::atom("fence")>;
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using erase_atom = caf::atom_constant<caf::atom("erase")>;
using map_atom = caf::atom_constant<caf::atom("map")>;
using scale_atom = caf::atom_constant<caf::atom("scale")>;
using idle_atom = caf::atom_constant<caf::atom("idle")>;
using resend_atom = caf::atom_constant<caf::atom("resend")>;
using rebind_atom = caf::atom_constant<caf::atom("rebind")>;
using relocate_atom = caf::atom_constant<caf::atom("relocate")>;

// --- message types ----------------------------------------------------------
struct row_batch {
  std::vector<uint64_t> keys;
  std::vector<uint8_t> records;  // keys.size() records of the table's record_bytes()
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, row_batch& x) {
  return f(caf::meta::type_name("row_batch"), x.keys, x.records);
}

// Reply to pull: one record per requested key (duplicates repeated), and
// per key whether it is admitted (0: initializer row, caches must not
// update it).
struct pull_reply {
  row_batch rows;
  std::vector<uint8_t> admitted;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pull_reply& x) {
  return f(caf::meta::type_name("pull_reply"), x.rows, x.admitted);
}

// A gradient push: per position a key and dim floats. `epoch` is the
// checkpoint epoch of the batch the gradients came from. `id` (0: none) is
// a client's push id: a shard applies a push of the same id and keys once
// (actors/push_ids.hpp), so a retry of a push that timed out is safe.
//
// Returned buffers (push_request::spare_records, push_reply::grads,
// push_ack::grads and spare_keys): empty vectors whose capacity goes back to
// the actor that allocated it, so that the training path allocates nothing
// per batch in steady state (issue 17). They are left out of inspect(), so
// they never cross the wire (a remote peer gets none and allocates as
// before); within a process a message moves them for free.
struct push_request {
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  uint64_t epoch = 0;
  uint64_t id = 0;
  std::vector<uint8_t> spare_records;  // a worker's used lookup_reply records (not serialized)
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_request& x) {
  return f(caf::meta::type_name("push_request"), x.keys, x.grads, x.epoch, x.id);
}

// Shard's acknowledgement of an applied push (async mode): the updated rows
// of the distinct keys pushed, with their new versions inside the records.
struct push_reply {
  row_batch rows;
  std::vector<float> grads;  // the request's gradient vector, emptied (not serialized)
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_reply& x) {
  return f(caf::meta::type_name("push_reply"), x.rows);
}

// Cache tier's acknowledgement of a worker's push: per position, the new
// version of the key's row (0: dropped, key not admitted).
struct push_ack {
  std::vector<uint64_t> versions;
  std::vector<float> grads;            // the request's gradient vector, emptied (not serialized)
  std::vector<uint64_t> spare_keys;    // an emptied key vector, for prefetches (not serialized)
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, push_ack& x) {
  return f(caf::meta::type_name("push_ack"), x.versions);
}

// Reply to a cache tier lookup: one record per key position.
struct lookup_reply {
  row_batch rows;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lookup_reply& x) {
  return f(caf::meta::type_name("lookup_reply"), x.rows);
}

struct dense_weights {
  uint64_t step = 0;
  std::vector<float> weights;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dense_weights& x) {
  return f(caf::meta::type_name("dense_weights"), x.step, x.weights);
}

// A latency histogram's snapshot: non-cumulative counts per bucket of
// strata::latency_histogram::bounds (seconds), the last bucket +Inf.
struct latency_snapshot {
  std::string name;  // "pull", "push", "cache_lookup", "lmdb_read", "lmdb_write", "flush"
  std::vector<uint64_t> counts;
  double sum_seconds = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, latency_snapshot& x) {
  return f(caf::meta::type_name("latency_snapshot"), x.name, x.counts, x.sum_seconds);
}

inline latency_snapshot make_snapshot(std::string name, const latency_histogram& h) {
  latency_snapshot s;
  s.name = std::move(name);
  s.counts.assign(h.counts().begin(), h.counts().end());
  s.sum_seconds = h.sum();
  return s;
}

// Counters of one actor's tiers, for reports and metrics. All counters are
// totals since the actor started (they never decrease); gauges are "now".
struct tier_stats {
  std::string name;  // "shard 0", "cache 1"
  std::string kind;  // "shard" or "cache"
  uint32_t index = 0;
  // counters
  uint64_t lookups = 0;  // keys looked up (shard: through the chain; cache: lookups + prefetches)
  uint64_t hits = 0;     // shard: served by DRAM; cache: served by the cache
  uint64_t misses = 0;
  uint64_t inserts = 0;          // rows inserted (promotions, new rows, fills)
  uint64_t evictions = 0;        // rows evicted (DRAM tier / cache), clean or dirty
  uint64_t flushed_rows = 0;     // shard: rows written to LMDB; cache: dirty rows written back
  uint64_t flush_batches = 0;    // shard: LMDB write transactions of ssd_flush
  uint64_t flush_bytes = 0;      // shard: encoded bytes written to LMDB
  uint64_t write_back_rows = 0;  // shard: whole rows received from caches
  uint64_t prefetch_requests = 0;
  uint64_t prefetch_rows = 0;
  uint64_t admission_rejections = 0;  // lookups of not-admitted keys + dropped pushes
  uint64_t ttl_expirations = 0;
  uint64_t pushes = 0;     // push requests handled
  uint64_t push_rows = 0;  // key positions pushed
  // shard only: pushes answered without applying (their push id was
  // applied before), and push ids forgotten from the bounded window.
  uint64_t duplicate_pushes = 0;
  uint64_t push_id_evictions = 0;
  // shard only: pull requests served, and those whose reply waited on an
  // LMDB read (docs/metrics.md, strata_shard_lmdb_waits_total).
  uint64_t pulls = 0;
  uint64_t lmdb_waits = 0;
  // shard only: hits per chain tier (dram, write_behind, lmdb) and rows
  // served by the initializer.
  std::vector<uint64_t> chain_hits;
  uint64_t initialized = 0;
  // gauges
  uint64_t rows = 0;   // resident rows (shard: DRAM tier; cache: cache)
  uint64_t bytes = 0;  // bytes allocated for them
  uint64_t capacity_rows = 0;
  uint64_t capacity_bytes = 0;
  uint64_t lmdb_rows = 0;
  uint64_t flushes_in_flight = 0;  // shard: batches sent to ssd_flush, not yet confirmed
  uint64_t write_behind_rows = 0;  // shard: rows held until LMDB confirms them
  uint64_t mailbox_depth = 0;      // messages waiting in this actor's mailbox
  std::vector<latency_snapshot> latencies;
  // shard only (counters): key positions in pulls, those a pull had to
  // read from LMDB while it waited (no tier above held the row: nothing
  // had brought it up), and rows prefetches read from LMDB ahead of use
  // (docs/metrics.md, strata_shard_lookup_ssd_wait_rows_total).
  uint64_t lookup_rows = 0;
  uint64_t lookup_ssd_wait_rows = 0;
  uint64_t prefetch_ssd_rows = 0;
  // shard only: times the write-behind reached its bound and the shard held
  // requests that could spill into it, and the seconds it held them
  // (shard_config::max_queued_flush_batches).
  uint64_t write_behind_stalls = 0;
  double write_behind_stall_seconds = 0;
  uint64_t write_behind_peak_rows = 0;  // shard: the most rows the write-behind held at once
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tier_stats& x) {
  return f(caf::meta::type_name("tier_stats"), x.name, x.kind, x.index, x.lookups, x.hits, x.misses,
           x.inserts, x.evictions, x.flushed_rows, x.flush_batches, x.flush_bytes,
           x.write_back_rows, x.prefetch_requests, x.prefetch_rows, x.admission_rejections,
           x.ttl_expirations, x.pushes, x.push_rows, x.duplicate_pushes, x.push_id_evictions,
           x.pulls, x.lmdb_waits, x.chain_hits, x.initialized, x.rows, x.bytes, x.capacity_rows,
           x.capacity_bytes, x.lmdb_rows, x.flushes_in_flight, x.write_behind_rows, x.mailbox_depth,
           x.latencies, x.lookup_rows, x.lookup_ssd_wait_rows, x.prefetch_ssd_rows,
           x.write_behind_stalls, x.write_behind_stall_seconds, x.write_behind_peak_rows);
}

// What an actor without tiers (worker, dense, coordinator) reports to the
// metrics exporter.
struct actor_stats {
  std::string kind;  // "worker", "dense", "coordinator"
  uint32_t index = 0;
  uint64_t mailbox_depth = 0;  // messages waiting in its mailbox
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_stats& x) {
  return f(caf::meta::type_name("actor_stats"), x.kind, x.index, x.mailbox_depth);
}

// A worker's progress since its last report.
struct progress_report {
  uint32_t worker = 0;
  uint64_t batches = 0;
  uint64_t examples = 0;
  double loss_sum = 0;  // sum of per-example logloss
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, progress_report& x) {
  return f(caf::meta::type_name("progress_report"), x.worker, x.batches, x.examples, x.loss_sum);
}

// What moved in one step of a partition migration (docs/scaling.md): rows
// and their encoded bytes (records as sent).
struct migration_stats {
  uint64_t rows = 0;
  uint64_t bytes = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_stats& x) {
  return f(caf::meta::type_name("migration_stats"), x.rows, x.bytes);
}

// A partition map as a message: epoch, owner shard of each partition, and
// the shard actors by index (dynamically typed handles: the shard
// interface cannot name itself; receivers cast them to shard_actor).
struct routing_table {
  uint64_t epoch = 0;
  std::vector<uint32_t> owners;
  std::vector<caf::actor> shards;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, routing_table& x) {
  return f(caf::meta::type_name("routing_table"), x.epoch, x.owners, x.shards);
}

// Moving partitions out of a shard: partitions[i] goes to destinations[i].
struct migration_order {
  uint64_t epoch = 0;  // of the map being committed
  std::vector<uint32_t> partitions;
  std::vector<caf::actor> destinations;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_order& x) {
  return f(caf::meta::type_name("migration_order"), x.epoch, x.partitions, x.destinations);
}

// --- actor interfaces ---------------------------------------------------------

// Owns the tier chain of its partitions (DRAM -> write-behind -> LMDB ->
// initializer). Updates of one key are serialized here.
using shard_actor = caf::typed_actor<
    // Rows for keys (duplicates allowed), promoting and initializing.
    caf::replies_to<pull_atom, std::vector<uint64_t>>::with<pull_reply>,
    // The same, for a cache tier's prefetch fill (rows ahead of use: nobody
    // waits on them yet): counted as prefetched rows, not as lookups.
    caf::replies_to<pull_atom, prefetch_atom, std::vector<uint64_t>>::with<pull_reply>,
    // Async mode: apply gradients (reduced per key), reply with updated rows.
    caf::replies_to<push_atom, push_request>::with<push_reply>,
    // A cache tier's whole-row write-back (pass end, eviction); older
    // versions than the shard's are ignored.
    caf::replies_to<write_back_atom, row_batch>::with<ok_atom>,
    // Warm rows (SSD -> DRAM) ahead of use; no reply.
    caf::reacts_to<prefetch_atom, std::vector<uint64_t>>,
    // The batch clock for access ticks and TTL.
    caf::reacts_to<tick_atom, uint32_t>,
    // Graceful stop: every dirty row written down and LMDB synced.
    caf::replies_to<drain_atom>::with<ok_atom>, caf::replies_to<stats_atom>::with<tier_stats>,
    // Checkpoint cut (epoch): every dirty row is flushed, then ssd_flush is
    // told to copy the environment (compacted) into the shard's directory
    // in the checkpoint; the admission sketch and TTL clock are written
    // there. The directory is derived from the shard's own configuration
    // (shard_config::checkpoint_root, the epoch, its index), never taken
    // from the message: a peer cannot name a path. Answers once the copy is
    // queued behind the cut's last flush, so later writes cannot enter it:
    // training may go on. A push tagged with a later epoch seen before the
    // cut is an error.
    caf::replies_to<checkpoint_atom, uint64_t>::with<ok_atom>,
    // Waits for the copy of checkpoint `epoch`; answers its row count.
    caf::replies_to<copied_atom, uint64_t>::with<uint64_t>,
    // Migration, source side (docs/scaling.md). Copy phase: streams the
    // rows of the order's partitions (LMDB range scans, one partition per
    // message so training goes on) to their destinations and records every
    // key of them touched meanwhile; answers once every copied batch is
    // acknowledged. The shard stays their owner.
    caf::replies_to<migrate_atom, migration_order>::with<migration_stats>,
    // Fence (at a cut): sends the current rows of the touched keys, then
    // forwards every request for the moving partitions to their
    // destination; answers once the destinations hold those rows.
    caf::replies_to<fence_atom, uint64_t>::with<migration_stats>,
    // Migration, destination side: whole rows stored as they are (last
    // copy wins: the source sends them in order, newest last).
    caf::replies_to<migrate_in_atom, row_batch>::with<ok_atom>,
    // The new map is committed: requests for partitions this shard no
    // longer owns are forwarded to their owner; its copies of them are
    // removed (DRAM now, LMDB after the write-behind is flushed); answers
    // once they are gone.
    caf::replies_to<commit_atom, routing_table>::with<ok_atom>,
    // Online updates' resend (serving/update_stream.hpp): the newest copy
    // of every row of `partition` this shard holds (DRAM, write-behind,
    // LMDB; nothing promoted or initialized), for a serving node that was
    // away longer than the update publisher's window.
    caf::replies_to<resend_atom, uint32_t>::with<row_batch>>;

// Owns the write side of one LMDB environment: writes a batch in one
// transaction and answers with its sequence number once committed.
using ssd_flush_actor = caf::typed_actor<
    // Answers (seq, seconds the LMDB write transaction took).
    caf::replies_to<flush_atom, uint64_t, row_batch>::with<uint64_t, double>,
    caf::replies_to<drain_atom>::with<ok_atom>,
    // Syncs, then writes a compacted copy of the environment into the
    // (existing, empty) directory; answers the table's live row count.
    caf::replies_to<checkpoint_atom, std::string>::with<uint64_t>,
    // Removes every row of these partitions (range scans); answers the count.
    caf::replies_to<erase_atom, std::vector<uint32_t>>::with<uint64_t>>;

// One HBM cache (CPU backend here) in front of the shards.
using cache_tier_actor =
    caf::typed_actor<caf::replies_to<lookup_atom, std::vector<uint64_t>>::with<lookup_reply>,
                     caf::reacts_to<prefetch_atom, std::vector<uint64_t>>,
                     caf::replies_to<push_atom, push_request>::with<push_ack>,
                     // Pass mode: the pass's working set is in; updates now apply here.
                     caf::replies_to<pass_start_atom, uint64_t>::with<ok_atom>,
                     // Pass mode: write every dirty row back to its shard, then reply.
                     caf::replies_to<pass_end_atom, uint64_t>::with<ok_atom>,
                     caf::replies_to<drain_atom>::with<ok_atom>,
                     caf::replies_to<stats_atom>::with<tier_stats>,
                     // A committed partition map: later pulls, pushes and
                     // write-backs are routed by it.
                     caf::replies_to<map_atom, routing_table>::with<ok_atom>>;

// The dense (MLP) weights and their optimizer.
using dense_actor =
    caf::typed_actor<caf::replies_to<push_dense_atom, std::vector<float>>::with<uint64_t>,
                     caf::replies_to<pull_dense_atom>::with<dense_weights>,
                     caf::replies_to<stats_atom>::with<actor_stats>,
                     // The whole record (row format: weights, Adam m, v,
                     // step) as bytes, for checkpoints.
                     caf::replies_to<checkpoint_atom>::with<std::vector<uint8_t>>>;

// Registers every message type above with a CAF config.
void add_message_types(caf::actor_system_config& config);

}  // namespace strata::actors
