// Internals of the shard actor shared by its source files: the state, and
// the flush/drain/cut pipeline (shard_flush.cpp) and the scaling helpers
// (shard_migration.cpp) the behaviour (shard_actor.cpp) calls.
#pragma once

#include <caf/all.hpp>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "actors/error.hpp"
#include "actors/push_ids.hpp"
#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
#include "actors/shard_reader.hpp"
#include "actors/ssd_flush_actor.hpp"
#include "common/hash.hpp"
#include "common/latency_histogram.hpp"

namespace strata::actors::shard_detail {

// Times the LMDB tier's lookups inside the chain (tier 2), and counts them
// (a pull whose count moved waited on an LMDB read).
class lmdb_read_timer final : public tier_observer {
 public:
  lmdb_read_timer(const clock_source* clock, latency_histogram* histogram)
      : clock_(clock), histogram_(histogram) {}
  void before_lookup(size_t tier) override {
    if (tier != lmdb_tier_index) return;
    ++reads_;
    start_ = clock_->now_seconds();
  }
  void after_lookup(size_t tier, size_t keys) override {
    if (tier != lmdb_tier_index) return;
    histogram_->observe(clock_->now_seconds() - start_);
    rows_ += keys;
  }
  static constexpr size_t lmdb_tier_index = 2;
  uint64_t reads() const { return reads_; }
  uint64_t rows() const { return rows_; }

 private:
  uint64_t reads_ = 0;  // LMDB tier lookups (one read transaction each)
  uint64_t rows_ = 0;   // keys they asked LMDB for
  const clock_source* clock_;
  latency_histogram* histogram_;
  double start_ = 0;
};

// Metrics of the shard's own work (the tiers count theirs).
struct shard_metrics {
  latency_histogram pull, push, flush, lmdb_read, lmdb_write;
  uint64_t pushes = 0, push_rows = 0, write_back_rows = 0;
  uint64_t duplicate_pushes = 0;  // pushes whose id was applied before: answered, not applied
  uint64_t prefetch_requests = 0, prefetch_rows = 0;
  // Pull requests served here, and those whose reply waited on an LMDB read
  // (the chain read LMDB for at least one key: nothing had brought it up).
  uint64_t pulls = 0, lmdb_waits = 0;
  // Key positions in pulls, those read from LMDB while their pull waited,
  // and rows prefetches read from LMDB ahead of use (nobody waiting). A
  // cache tier's prefetch fill (pull_atom, prefetch_atom) is a pull whose
  // rows count as prefetched: prefetch_requests, prefetch_rows and
  // prefetch_ssd_rows, never lookup_rows.
  uint64_t lookup_rows = 0, lookup_ssd_wait_rows = 0, prefetch_ssd_rows = 0;
  // DRAM hits of parked pulls on rows their read installed (counted at the
  // install already; the stats leave them out).
  uint64_t installed_rows_served = 0;
  uint64_t migrated_in_rows = 0;
  uint64_t flush_batches = 0, flush_bytes = 0;
  // Back-pressure on the write-behind (write_behind_full): times the shard
  // began holding requests, and the seconds it held them.
  uint64_t write_behind_stalls = 0;
  double write_behind_stall_seconds = 0;
  std::optional<double> stalled_since;
  uint64_t write_behind_peak_rows = 0;       // the most rows it held at once
  std::map<uint64_t, double> flush_started;  // seq -> time sent
};

// A checkpoint's copy, from the cut until ssd_flush answers.
struct checkpoint_copy {
  bool done = false;
  uint64_t rows = 0;
  caf::error failure;
  std::vector<caf::typed_response_promise<uint64_t>> waiters;
};

// A cut waiting for the flushes before it.
struct pending_cut {
  uint64_t epoch = 0;
  std::string dir;
  caf::typed_response_promise<ok_atom> promise;
};

// Partitions leaving this shard (source side of a migration).
struct outgoing_migration {
  migration_order order;
  std::unordered_map<uint32_t, caf::actor> destination;  // partition -> new owner
  // Keys of the moving partitions resident above LMDB when the copy began,
  // or touched since: their newest rows are sent again at the fence.
  std::unordered_set<uint64_t> touched;
  size_t next = 0;       // next partition of order.partitions to copy
  size_t in_flight = 0;  // copied batches not yet acknowledged
  migration_stats copied;
  std::optional<caf::typed_response_promise<migration_stats>> copy_promise;
  bool fenced = false;  // from the fence on, requests for them are forwarded
  // Copy rate limit (shard_config::migration_rows_per_s): a scanned batch
  // waits here, on a timer, until the copy's start + its rows / limit.
  std::optional<caf::actor_clock::time_point> copy_start;
  std::optional<std::pair<caf::actor, row_batch>> paced;
};

// A pull whose keys were not all above LMDB: the rows that were are copied
// at arrival (the state the pull saw), the others once the reader has read
// them (shard_read.cpp).
struct parked_pull {
  pull_reply reply;
  std::vector<uint32_t> cold;  // positions of reply still to fill
  std::vector<uint64_t> cold_keys;
  uint64_t read = 0;  // the last read it waits for
  double started = 0;
  caf::strong_actor_ptr client;  // who sent it: its later writes answer it first
  caf::typed_response_promise<pull_reply> promise;
};

// A read sent to the reader and not yet answered.
struct read_in_flight {
  uint64_t id = 0;
  uint64_t flush_gen = 0;  // flushes landed when it was sent
};

// Copy batches of a migration kept in flight per source shard.
constexpr size_t migration_window = 4;

struct shard_state {
  shard_config config;
  shard_metrics metrics;
  std::unique_ptr<lmdb_read_timer> read_timer;
  std::unique_ptr<tier_chain> chain;
  ssd_flush_actor flusher;
  // seq -> keys of a flush batch sent to ssd_flush (which retries it
  // itself; the write-behind keeps the rows readable until it confirms).
  std::map<uint64_t, std::vector<uint64_t>> in_flight;
  // Reads off the shard's thread (shard_read.cpp): on with
  // STRATA_SHARD_ASYNC_READS=1 in the environment (or a test's read gate);
  // off, every read runs on the shard's thread as before.
  bool async_reads = false;
  shard_reader_actor reader;
  uint64_t next_read = 1;            // id of the next read sent
  std::deque<read_in_flight> reads;  // sent, not answered (the reader answers in order)
  flat_map<uint64_t> pending_reads;  // key -> the read that fetches it
  std::deque<parked_pull> parked;    // in arrival order
  flat_map<uint32_t> parked_cold;    // key -> parked pulls that wait for it
  uint64_t flush_gen = 0;            // flush batches landed (and erases)
  // key -> flush_gen of the last landed flush of it, while reads are out:
  // a read sent before that flush may hold an older copy.
  flat_map<uint64_t> flushed_at;
  uint64_t erased_at = 0;  // flush_gen of the last erase of partitions
  std::vector<uint32_t> warm_at, cold_at, probe_misses;  // scratch of a pull
  std::vector<uint64_t> probe_keys;
  row_buffer probe;
  std::vector<caf::typed_response_promise<ok_atom>> drain_waiters;
  bool draining = false;
  // Set when the shard fail-stopped (a flush failed every attempt): every
  // later request is answered with it (shard_flush.cpp, fail_stop).
  caf::error fatal;
  uint64_t max_push_epoch = 0;                 // highest checkpoint epoch a push carried
  push_ids applied_pushes;                     // ids of pushes applied (idempotent retries)
  std::optional<pending_cut> cut;              // at most one cut at a time
  std::map<uint64_t, checkpoint_copy> copies;  // by epoch
  // Scaling (docs/scaling.md).
  std::optional<outgoing_migration> out;
  std::optional<routing_table> routing;    // the last committed map (none: owns all it is asked)
  std::vector<uint32_t> erase_partitions;  // not owned: removed from LMDB once flushed
  bool erase_pending = false;
  std::vector<caf::typed_response_promise<ok_atom>> commit_waiters;
  // Shards that sent migrate_in since the last commit (split_keys).
  std::vector<caf::actor_addr> migrating_in;
  std::vector<uint64_t> push_unique;  // push_local's distinct keys
  static inline const char* name = "shard";
};

using shard_pointer = shard_actor::stateful_pointer<shard_state>;

// The sender of the message being handled (null when anonymous).
inline caf::actor_addr sender_of(shard_pointer self) {
  return caf::actor_cast<caf::actor_addr>(self->current_sender());
}

// Positions of a request's keys served here, and per other shard.
struct key_split {
  std::vector<uint32_t> local;
  std::vector<std::pair<caf::actor, std::vector<uint32_t>>> remote;
};

// --- flush, drain, cut (shard_flush.cpp) ---------------------------------------

// Writes the admission sketch's counters (if any) and the TTL clock into the
// shard's checkpoint directory. Errors name the file.
caf::error write_cut_state(shard_state& st, const std::string& dir);
void take_cut(shard_pointer self);
void erase_foreign(shard_pointer self);
void send_flush(shard_pointer self, uint64_t seq, row_batch batch);
// Fail-stop (docs/architecture.md, Durability): a write the flusher could
// not make after its retries leaves a hole the shard must not serve past.
// The error, naming the shard, its LMDB path and the cause, goes to every
// waiter now and answers every later request; it is logged at once.
void fail_stop(shard_pointer self, const caf::error& cause);
// The text of a strata error carried as caf::error (actors/error.hpp).
std::string message_of(const caf::error& err);
// Sends write-behind batches to ssd_flush: when enough rows are queued (or
// while draining), and while fewer than max_flushes_in_flight are out.
void maybe_flush(shard_pointer self);
// Back-pressure: true while max_queued_flush_batches batches' rows wait
// behind the flushes in flight. A request that can spill DRAM into the
// write-behind then returns caf::skip: it stays in the mailbox, in order,
// and CAF offers it again after each message the shard handles, so it runs
// once a flush has landed (maybe_flush ends the stall).
bool write_behind_full(shard_pointer self);
// Seconds held at the bound so far, the current stall included; end_stall
// adds the current one to the total and ends it.
double stall_seconds(const shard_state& st);
void end_stall(shard_state& st);

// --- reads off the shard's thread (shard_read.cpp) ---------------------------

// A pull of local keys: answered now if every key is above LMDB, else
// parked until the reader has read the others.
caf::result<pull_reply> pull_async(shard_pointer self, std::vector<uint64_t> owned,
                                   bool ahead);
// A pull's rows in the metrics: a lookup's, or (ahead) a prefetch fill's;
// `ssd_rows` of them were read from LMDB while the pull waited.
void count_pull(shard_state& st, size_t rows, uint64_t ssd_rows, bool ahead);
// Prefetch of local keys: reads the cold ones off the thread and installs
// them (nobody waits).
void prefetch_async(shard_pointer self, const std::vector<uint64_t>& keys);
// A push or write-back arrives: the parked pulls of the same client, and
// every parked pull if one waits for any of `keys`, are answered first
// (their cold keys read on the shard's thread): a client gets a pull's
// reply before the answer to its later write, and no pull sees a change
// of its cold rows made after it arrived (shard_read.cpp says why).
void settle_parked(shard_pointer self, std::span<const uint64_t> keys);
// The same for every parked pull (migration, drain, cut).
void settle_all_parked(shard_pointer self);
// A flush batch (or an erase) landed in LMDB: reads sent before it may
// hold older copies of its keys.
// keys == null: an erase of partitions (every read sent before is stale).
// Staged rows of the keys are dropped.
void note_landed(shard_state& st, const std::vector<uint64_t>* keys);

// --- scaling (shard_migration.cpp) ---------------------------------------------

caf::actor owner_elsewhere(const shard_state& st, uint64_t key);
// `from`: the request's sender. A key whose owner elsewhere is the sender
// itself, a shard that migrates partitions to this one (migrating_in), is
// served here, never sent back: the sender forwards it because it fenced
// it toward this shard (or committed a map that says so), and its rows
// came here first (per-pair FIFO). Without this, between a fence and the
// commit that reaches this shard, such a request went back and forth
// between the two shards for as long as the commit took, and with two of
// these on CAF's two scheduler threads (work stealing runs the actor a
// job just woke before any other) nothing else ran: the coordinator never
// sent the commit, and the cluster hung with memory growing.
key_split split_keys(const shard_state& st, const std::vector<uint64_t>& keys,
                     const caf::actor_addr& from = {});
// Every key is this shard's (no committed map, no fence): the handlers
// skip split_keys and its index vectors.
inline bool all_keys_local(const shard_state& st) {
  return !st.routing && !(st.out && st.out->fenced);
}
std::vector<uint64_t> pick(const std::vector<uint64_t>& keys, const std::vector<uint32_t>& at);
void touch(shard_state& st, const std::vector<uint64_t>& keys);
void copy_next(shard_pointer self);
expected<row_buffer> newest_rows(tier_chain& chain, const std::vector<uint64_t>& keys);
// The newest copy of every row of `partition` the shard holds (resend_atom).
expected<row_batch> partition_rows(shard_state& st, uint32_t partition);

}  // namespace strata::actors::shard_detail
