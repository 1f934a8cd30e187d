// Internals of the cache tier actor shared by its source files: the state,
// the fill/insert/write-back helpers (cache_tier_actor.cpp) and the push
// paths (cache_push.cpp).
#pragma once

#include <caf/all.hpp>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "actors/cache_tier_actor.hpp"
#include "actors/error.hpp"
#include "actors/row_batch_util.hpp"
#include "actors/vector_pool.hpp"
#include "common/flat_map.hpp"
#include "common/latency_histogram.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::actors::cache_detail {

// A lookup or prefetch waiting for rows from the shards.
// Fills are reused (cache_state::fills): a fill's vectors and maps keep
// their capacity from one lookup to the next.
struct pending_fill {
  std::vector<uint64_t> keys;
  row_batch rows;  // one record per position
  // Missing key -> its first position; next_position[pos] chains the
  // others (no_position ends the chain).
  flat_map<uint32_t> positions;
  std::vector<uint32_t> next_position;
  static constexpr uint32_t no_position = ~uint32_t{0};
  size_t outstanding = 0;
  caf::typed_response_promise<lookup_reply> promise;
  bool reply = false;
  // A prefetch's fill: its pulls go as (pull_atom, prefetch_atom), so the
  // shards count the rows as read ahead, not as a lookup's wait.
  bool ahead = false;
  std::function<void()> then;             // runs once every row is in (push in pass mode)
  std::function<void(caf::error&)> fail;  // a shard refused a pull
  flat_map<uint8_t> not_admitted;         // keys the shards flagged
  double started = 0;                     // when the lookup arrived (latency metrics)
  // Scratch of fill_rows and its pull replies.
  std::vector<uint32_t> misses;
  std::vector<uint64_t> wanted;
  std::vector<std::byte> resident;
  std::vector<uint32_t> absent;
  std::vector<uint64_t> admitted_keys;
  std::vector<std::byte> admitted_rows;

  // Calls fn(position) for every position of a missing key.
  template <class Fn>
  void for_each_position(uint64_t key, Fn&& fn) const {
    const uint32_t* first = positions.find(key);
    for (uint32_t pos = first ? *first : no_position; pos != no_position; pos = next_position[pos])
      fn(pos);
  }
};


// An async-mode push forwarded to the owning shards, waiting for their
// replies. Reused (cache_state::pushes) like the fills.
struct pending_push {
  std::vector<uint64_t> keys;
  push_ack ack;
  size_t outstanding = 0;
  bool failed = false;
  double started = 0;
  caf::typed_response_promise<push_ack> promise;
};

struct cache_state {
  cache_config config;
  training_mode mode = training_mode::async;
  std::vector<shard_actor> shards;
  partition_map map;
  std::unique_ptr<cache_backend> cache;
  size_t record_bytes = 0;
  // Evicted dirty rows not yet acknowledged by their shard: still served.
  std::unordered_map<uint64_t, std::vector<std::byte>> evicted;
  // Pass mode: keys of pushes waiting for their rows (key -> pushes). An
  // evicted row of a pinned key outlives its acknowledgement (the acked
  // version is kept in acked_pinned) until the last such push has run, so
  // that the push sees every version written since its rows were served.
  std::unordered_map<uint64_t, uint32_t> pinned;
  std::unordered_map<uint64_t, uint64_t> acked_pinned;
  size_t write_backs_in_flight = 0;
  // Set when a write-back failed every attempt (fail_stop): rows are lost,
  // so every later request, pass_end and drain included, gets this error.
  caf::error fatal;
  std::vector<caf::typed_response_promise<ok_atom>> flush_waiters;
  uint64_t clock = 0;  // lookups served (async staleness)
  // Fills in use or free (use_count 1: only this list holds it).
  std::vector<std::shared_ptr<pending_fill>> fills;
  std::vector<std::shared_ptr<pending_push>> pushes;  // the same for pushes
  vector_pool<uint64_t> keys_pool;
  vector_pool<uint8_t> bytes_pool;
  vector_pool<float> floats_pool;
  // Scratch of one handler run (insert, push replies).
  std::vector<uint64_t> ev_keys;
  std::vector<std::byte> ev_rows;
  flat_map<uint64_t> push_versions;
  // Keys grouped by owning shard (group_keys), one set per caller so that
  // none overwrites another's while it is read.
  std::vector<std::vector<uint32_t>> fill_groups, push_groups, write_back_groups;
  tier_stats stats;    // counters; gauges and latencies are added on request
  latency_histogram lookup_latency, pull_latency, push_latency;
  double now() const { return config.clock->now_seconds(); }
  static inline const char* name = "cache_tier";
};

using cache_pointer = cache_tier_actor::stateful_pointer<cache_state>;
using push_done = std::function<void(push_ack)>;
using push_failed = std::function<void(caf::error&)>;

// Runs one backend call and waits for its completion: at once for the CPU
// backend; for the CUDA one (gpu/staged_cache.hpp) the actor's thread
// blocks for the call's tens of microseconds on the device.
// Positions of `keys` by owning shard, like partition_map::group, into
// `out` (its vectors keep their capacity from call to call).
inline const std::vector<std::vector<uint32_t>>& group_keys(const partition_map& map,
                                                            const std::vector<uint64_t>& keys,
                                                            std::vector<std::vector<uint32_t>>& out) {
  out.resize(map.shards());
  for (auto& g : out) g.clear();
  for (uint32_t i = 0; i < keys.size(); ++i) out[map.shard_of(keys[i])].push_back(i);
  return out;
}

// A fill ready for use: a free one from st.fills (its capacity kept), else
// a new one.
std::shared_ptr<pending_fill> acquire_fill(cache_state& st);

// The waiter lives on this stack frame: the completion notifies while it
// holds the mutex, so run_sync cannot return before the notifier is done
// with it. Nothing is allocated for a backend that completes at once.
template <class Call>
void run_sync(const char* what, Call&& call) {
  struct waiter {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    status result;
  } w;
  call(cache_completion([&w](status s) {
    std::lock_guard lock(w.mutex);
    w.result = std::move(s);
    w.done = true;
    w.cv.notify_one();
  }));
  std::unique_lock lock(w.mutex);
  w.cv.wait(lock, [&] { return w.done; });
  if (!w.result) {
    std::string msg = std::string(what) + ": " + w.result.err().to_string();
    STRATA_ASSERT(false, msg.c_str());
  }
}

void check_flush_waiters(cache_pointer self);
void pin(cache_pointer self, const std::vector<uint64_t>& keys);
void unpin(cache_pointer self, const std::vector<uint64_t>& keys);
void write_back(cache_pointer self, const std::vector<uint64_t>& keys,
                const std::vector<std::byte>& records);
// Attempts of one write-back batch to its shard before the tier fail-stops.
inline constexpr int write_back_attempts = 4;
// Sends one write-back batch (attempt 1..write_back_attempts); a failure is
// re-sent, the last one fail-stops the tier.
void send_write_back(cache_pointer self, shard_actor shard, std::shared_ptr<row_batch> sent,
                     int attempt);
// The error names the tier and the cause; every flush waiter gets it now.
void fail_stop(cache_pointer self, const caf::error& cause, size_t rows);
void insert(cache_pointer self, const std::vector<uint64_t>& keys, std::byte* records, bool dirty);
void finish_fill(cache_pointer self, const std::shared_ptr<pending_fill>& fill);
void fill_rows(cache_pointer self, std::shared_ptr<pending_fill> fill, bool count_stats);

// --- pushes (cache_push.cpp) ---------------------------------------------------

void apply_in_cache(cache_pointer self, const push_request& req, push_done done, push_failed fail);
// Async mode: answers `promise` once every shard has applied its part.
void push_to_shards(cache_pointer self, push_request& req,
                    caf::typed_response_promise<push_ack> promise, double started);

}  // namespace strata::actors::cache_detail
