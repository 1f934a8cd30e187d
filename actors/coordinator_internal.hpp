// Internals of the coordinator actor shared by its source files:
// coordinator_actor.cpp (behavior, failure), coordinator_training.cpp
// (rounds, passes, checkpoints, progress, the drain) and
// coordinator_scale.cpp (scaling: copy, fence, commit).
#pragma once

#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator_actor.hpp"
#include "actors/loss_history.hpp"

namespace strata::actors::coordinator_impl {

// How many of the most recent batches the progress sink's loss averages.
constexpr size_t recent_loss_batches = 64;

// The shards' TTL clock counts the cluster's trained batches (all workers,
// across restores: the checkpoint's batch total); it is sent to every shard
// each time it has moved this many batches (docs/architecture.md,
// Semantics: Admission and TTL).
constexpr uint64_t ttl_clock_step = 8;

struct coordinator_state {
  static inline const char* name = "strata.coordinator";

  training_mode mode = training_mode::async;
  uint64_t pass_batches = 0;
  coordinator_peers peers;
  progress_sink sink;

  std::optional<caf::typed_response_promise<training_summary>> run;
  std::vector<bool> finished;       // per worker
  std::vector<uint64_t> bad_lines;  // per worker, its running total
  uint64_t pass = 0;
  training_summary summary;
  loss_history history{recent_loss_batches};  // bounded: the tail window and recent reports
  uint64_t ttl_clock_sent = 0;  // the shards' TTL clock as last sent (cluster batches)
  training_progress progress;
  bool failed = false;

  // Checkpoints.
  checkpoint_plan plan;
  uint64_t epoch = 1;               // of the next checkpoint (pushes carry it)
  std::vector<uint64_t> positions;  // per worker, absolute, as of the last round
  std::vector<uint64_t> last_cut;   // per worker, position at the last checkpoint
  bool due = false;                 // the timer fired or someone asked
  bool stop_requested = false;
  bool writing = false;                 // a checkpoint's copies are being completed
  std::function<void()> after_writing;  // runs once the checkpoint being written is complete
  // On-demand requests waiting for the next cut, and those the checkpoint
  // being written was taken for (a request is answered with a checkpoint
  // cut after it arrived).
  std::vector<caf::typed_response_promise<std::string>> on_demand;
  std::vector<caf::typed_response_promise<std::string>> on_demand_writing;

  // Scaling (docs/scaling.md): at most one scale at a time.
  struct scaling_job {
    partition_map next;
    std::vector<shard_actor> shards;  // old and new: max(current, target)
    std::vector<uint32_t> sources;    // shards that send partitions
    size_t copies_missing = 0;
    bool copied = false;
    bool committing = false;
    std::function<void()> resume;  // a final cut waiting for the commit
    scale_result result;
    caf::typed_response_promise<scale_result> promise;
    std::string copy_failure;  // a source's copy failed: abandoned once all answered
    // A drain: the shards it replaces (old[i] set for each rehomed index i;
    // they fence and get the commit, then are retired), and what to say.
    std::vector<uint32_t> rehomed;
    std::vector<shard_actor> old;
    std::string what;  // "drain node n2 (shards 1)"
  };
  std::optional<scaling_job> scaling;
  // Abandoned scales whose new shards' files are not removed yet (counted
  // down on the exiting shards' threads).
  std::shared_ptr<std::atomic<uint32_t>> removals_pending =
      std::make_shared<std::atomic<uint32_t>>(0);
  bool ended = false;  // the run answered (or failed)

  // Relocating workers and cache tiers (relocate_atom): one at a time,
  // carried out at the next cut without a scale in progress. Kept here
  // until answered (fail() answers one that is waiting or running).
  struct relocation_job {
    std::vector<uint32_t> workers, caches;
    caf::typed_response_promise<ok_atom> promise;
    std::string what;  // "cannot relocate workers [2] and cache tiers [1] of cluster 'c': "
    bool started = false;
  };
  std::optional<relocation_job> relocation;
  // Training is ending (the final cut was reached): no cut comes any more.
  bool ending = false;
  // What relocations replaced so far (cluster_status: where they live).
  std::vector<uint32_t> relocated_workers, relocated_caches;
};

using coordinator_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

void fail(coordinator_pointer self, caf::error err);

caf::error io_failure(const error& e);

// Sends `message...` to every target and calls `next` once all answered ok.
template <class Handle, class... Ts>
void on_all_ok(coordinator_pointer self, const std::vector<Handle>& targets,
               std::function<void()> next, Ts... message) {
  if (targets.empty()) {
    next();
    return;
  }
  auto missing = std::make_shared<size_t>(targets.size());
  for (const auto& target : targets)
    self->request(target, caf::infinite, message...)
        .then(
            [self, missing, next](ok_atom) {
              if (self->state.failed) return;
              if (--*missing == 0) next();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
}

// "1, 3, 4": indices for messages.
inline std::string index_list(const std::vector<uint32_t>& indices) {
  std::string out;
  for (uint32_t i : indices) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

// coordinator_training.cpp
void async_round(coordinator_pointer self);
// Batches per worker per round (0: async rounds run to the end of the data).
uint64_t round_grant(const coordinator_state& st);
void start_pass(coordinator_pointer self);
void on_progress(coordinator_pointer self, const progress_report& report);

// coordinator_scale.cpp
// A cut (every push acknowledged; pass mode: caches written back): a
// scale whose copy is done fences and commits here. `final` (training
// ends) waits for a copy still running.
void at_cut(coordinator_pointer self, std::function<void()> next, bool final);
routing_table routing_of(const partition_map& map, const std::vector<shard_actor>& shards);
void fence_and_commit(coordinator_pointer self, std::function<void()> next);
void copies_done(coordinator_pointer self);
// Sends each of the running job's sources (from[src]) its migration order;
// copies_done runs once every one has answered (at once if there are none).
void start_copies(coordinator_pointer self, const std::vector<shard_actor>& from,
                  const std::vector<migration_order>& orders);
void retire_new_shards(coordinator_pointer self, const std::vector<shard_actor>& shards,
                       uint32_t first, uint32_t end);
// Runs `spawn` (a shard factory call) and then `done` in the coordinator
// with the shard, or a null handle and why not. A spawn that `waits` (on
// another node, for up to node_spawner's 120 s) runs on a thread of its
// own, never the coordinator's: training, status and stops go on meanwhile
// (checkpoints wait for the scale, as during its copy). Otherwise both run
// at once, inline.
void run_spawn(coordinator_pointer self, bool waits, std::function<expected<shard_actor>()> spawn,
               std::function<void(shard_actor, std::string)> done);
void spawn_new_shard(coordinator_pointer self, uint32_t current, uint32_t i,
                     std::vector<std::string> placement);
bool training_running(const coordinator_state& s);

// coordinator_relocate.cpp
caf::typed_response_promise<ok_atom> start_relocation(coordinator_pointer self,
                                                      const std::vector<uint32_t>& workers,
                                                      const std::vector<uint32_t>& caches);
// At a cut: a relocation waiting runs here (unless a scale is in progress:
// then at a later cut), then `next`. `final` (training ends): a waiting
// relocation is refused instead, nothing moved.
void relocate_at_cut(coordinator_pointer self, std::function<void()> next, bool final);

// coordinator_drain.cpp
caf::typed_response_promise<scale_result> start_drain(coordinator_pointer self,
                                                      const std::vector<uint32_t>& indices,
                                                      const std::vector<std::string>& destinations);
void abandon_drain(coordinator_pointer self);
void spawn_successor(coordinator_pointer self, std::vector<uint32_t> indices,
                     std::vector<std::string> destinations, size_t k);
// Abandons the running scale or drain: commits the current map again at a
// new epoch to every shard and cache tier (every source forgets its
// migration), then fails the request with why(map, job) and resumes a cut
// waiting for it.
// Ends the running scale or drain: its request gets `why` (as `code`), and a
// final cut waiting for it resumes.
void end_scaling_job(coordinator_pointer self, caf::sec code, std::string why);
void recommit_and_fail(
    coordinator_pointer self,
    std::function<std::string(const partition_map&, const coordinator_state::scaling_job&)> why);

caf::typed_response_promise<scale_result> start_scale(
    coordinator_pointer self, uint32_t target, const std::vector<std::string>& placement = {});

}  // namespace strata::actors::coordinator_impl
