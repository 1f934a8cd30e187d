// The coordinator's side of relocating workers and cache tiers
// (docs/multi-node.md "Draining a node"): a node that hosts them is
// drained. At a cut nothing is in flight: every worker's pushes are
// acknowledged (pass mode: the caches are written back), so
//   1. the leaving cache tiers write their dirty rows back to the shards;
//   2. each gets a successor at the same index (pass mode routes keys by
//      the number of cache tiers: an index is never dropped);
//   3. each leaving worker that has data left gets a successor that
//      resumes its stream at its position (the batches it trained), so no
//      example is skipped or trained twice;
//   4. the coordinator's handles are swapped, the successors published
//      (multi-node: exported under their index);
//   5. the staying workers whose cache tiers changed are told (rebind);
//   6. the old actors are retired.
// A failure up to the swap (a write-back, a spawn) abandons the move: the
// successors go, the request gets the error, training goes on with the old
// actors. After the swap a failure is the run's (the crash policy).
#include <algorithm>
#include <caf/all.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "actors/coordinator_internal.hpp"
#include "actors/error.hpp"

namespace strata::actors::coordinator_impl {
namespace {

void exit_all(const std::vector<caf::actor>& actors) {
  for (const auto& a : actors)
    if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// Answers the relocation under way (ok, or `err`) and forgets it.
void end_relocation(coordinator_pointer self, std::optional<caf::error> err) {
  auto& s = self->state;
  if (!s.relocation) return;
  if (err)
    s.relocation->promise.deliver(std::move(*err));
  else
    s.relocation->promise.deliver(ok_atom::value);
  s.relocation.reset();
}

// Before the swap: the move is abandoned, training goes on where it was.
void abandon(coordinator_pointer self, const std::string& why, const std::function<void()>& next) {
  auto& s = self->state;
  end_relocation(self, caf::make_error(caf::sec::runtime_error,
                                       s.relocation->what + why +
                                           " (the move is abandoned; training goes on where "
                                           "it was)"));
  next();
}

// Steps 2 to 6, once the leaving cache tiers are written back.
void swap_in_successors(coordinator_pointer self, std::function<void()> next) {
  auto& s = self->state;
  const auto job = *s.relocation;
  const auto& factory = s.peers.relocations;
  std::vector<caf::actor> spawned;
  auto give_up = [&](const std::string& why) {
    exit_all(spawned);
    abandon(self, why, next);
  };
  std::vector<cache_tier_actor> caches = s.peers.caches;
  for (uint32_t c : job.caches) {
    auto successor = factory.spawn_cache(c, s.peers.shards, s.plan.map);
    if (!successor)
      return give_up("spawning the successor of cache tier " + std::to_string(c) +
                     " failed: " + successor.err().to_string());
    spawned.push_back(caf::actor_cast<caf::actor>(*successor));
    caches[c] = *successor;
  }
  const bool async = s.mode == training_mode::async;
  auto caches_of = [async, caches](uint32_t w) {
    return async ? std::vector<cache_tier_actor>{caches[w % caches.size()]} : caches;
  };
  std::vector<worker_actor> workers = s.peers.workers;
  std::vector<uint32_t> moved_workers;
  for (uint32_t w : job.workers) {
    if (s.finished[w]) continue;  // its stream has ended: nothing to resume
    auto successor = factory.spawn_worker(w, s.positions[w], caches_of(w));
    if (!successor)
      return give_up("spawning the successor of worker " + std::to_string(w) + " (at batch " +
                     std::to_string(s.positions[w]) +
                     " of its stream) failed: " + successor.err().to_string());
    spawned.push_back(caf::actor_cast<caf::actor>(*successor));
    workers[w] = *successor;
    moved_workers.push_back(w);
  }

  // The swap: from here on a failure is the run's.
  std::vector<caf::actor> old;
  for (uint32_t c : job.caches) old.push_back(caf::actor_cast<caf::actor>(s.peers.caches[c]));
  for (uint32_t w : moved_workers) old.push_back(caf::actor_cast<caf::actor>(s.peers.workers[w]));
  for (const auto& a : spawned) self->link_to(a);  // they stop with the cluster
  s.peers.caches = caches;
  s.peers.workers = workers;
  auto record = [](std::vector<uint32_t>& into, const std::vector<uint32_t>& moved) {
    into.insert(into.end(), moved.begin(), moved.end());
    std::sort(into.begin(), into.end());
    into.erase(std::unique(into.begin(), into.end()), into.end());
  };
  record(s.relocated_caches, job.caches);
  record(s.relocated_workers, moved_workers);
  if (factory.published)
    for (uint32_t c : job.caches) factory.published(c, caches[c]);

  const std::set<uint32_t> moved_caches(job.caches.begin(), job.caches.end());
  std::vector<uint32_t> rebound;
  for (uint32_t w = 0; w < workers.size(); ++w) {
    if (moved_caches.empty() || s.finished[w]) continue;
    if (std::find(moved_workers.begin(), moved_workers.end(), w) != moved_workers.end()) continue;
    if (async && !moved_caches.count(w % static_cast<uint32_t>(caches.size()))) continue;
    rebound.push_back(w);
  }
  auto done = [self, old, next] {
    // A successor of an earlier move is linked: its exit must not take the
    // coordinator with it.
    for (const auto& a : old) self->unlink_from(a);
    exit_all(old);
    end_relocation(self, std::nullopt);
    next();
  };
  if (rebound.empty()) {
    done();
    return;
  }
  auto missing = std::make_shared<size_t>(rebound.size());
  for (uint32_t w : rebound)
    self->request(workers[w], caf::infinite, rebind_atom::value, caches_of(w))
        .then(
            [self, missing, done](ok_atom) {
              if (self->state.failed) return;
              if (--*missing == 0) done();
            },
            [self, w](caf::error& err) {
              // fail() answers the relocation with this error (once).
              fail(self, caf::make_error(caf::sec::runtime_error,
                                         "telling worker " + std::to_string(w) +
                                             " its relocated cache tiers failed: " +
                                             describe(self->system(), err)));
            });
}

}  // namespace

caf::typed_response_promise<ok_atom> start_relocation(coordinator_pointer self,
                                                      const std::vector<uint32_t>& workers,
                                                      const std::vector<uint32_t>& caches) {
  auto& s = self->state;
  auto promise = self->make_response_promise<ok_atom>();
  const std::string what = "cannot relocate workers [" + index_list(workers) +
                           "] and cache tiers [" + index_list(caches) + "] of cluster '" +
                           s.plan.cluster + "': ";
  auto refuse = [&](std::string why) {
    promise.deliver(caf::make_error(caf::sec::invalid_argument, what + why));
    return promise;
  };
  if (s.failed) return refuse("training has failed");
  if (s.ended || !s.run) return refuse("training is not running");
  if (s.ending) return refuse("training is ending (no cut comes any more)");
  if (!s.peers.relocations.spawn_cache || !s.peers.relocations.spawn_worker)
    return refuse("this cluster cannot spawn successors of workers and cache tiers");
  if (s.relocation)
    return refuse(s.relocation->started ? "another relocation is under way"
                                        : "another relocation is waiting for the next cut");
  if (s.scaling)
    return refuse("a scale to " + std::to_string(s.scaling->next.shards()) +
                  " shards is in progress");
  if (s.mode == training_mode::async && round_grant(s) == 0 && !s.peers.workers.empty())
    return refuse(
        "async rounds run to the end of the data (checkpoint.round_batches: 0), so no cut comes "
        "to move them at");
  auto check = [&](const std::vector<uint32_t>& indices, size_t count,
                   const std::string& kind) -> std::string {
    for (uint32_t i : indices) {
      if (i >= count)
        return "no " + kind + " " + std::to_string(i) + " (the cluster has " +
               std::to_string(count) + ")";
      if (std::count(indices.begin(), indices.end(), i) != 1)
        return kind + " " + std::to_string(i) + " named twice";
    }
    return {};
  };
  if (auto why = check(workers, s.peers.workers.size(), "worker"); !why.empty()) return refuse(why);
  if (auto why = check(caches, s.peers.caches.size(), "cache tier"); !why.empty())
    return refuse(why);
  if (workers.empty() && caches.empty()) {
    promise.deliver(ok_atom::value);
    return promise;
  }
  s.relocation = coordinator_state::relocation_job{workers, caches, promise, what};
  return promise;
}

void relocate_at_cut(coordinator_pointer self, std::function<void()> next, bool final) {
  auto& s = self->state;
  if (!s.relocation) {
    next();
    return;
  }
  if (final) {
    end_relocation(
        self, caf::make_error(caf::sec::invalid_argument,
                              s.relocation->what +
                                  "training ended before the next cut (nothing moved; the end of "
                                  "training writes every cache tier back)"));
    next();
    return;
  }
  if (s.scaling) {  // a scale started meanwhile: the relocation waits for a later cut
    next();
    return;
  }
  s.relocation->started = true;
  // Step 1: the leaving cache tiers write their dirty rows back.
  const auto leaving = s.relocation->caches;
  auto missing = std::make_shared<size_t>(leaving.size());
  auto failure = std::make_shared<std::string>();
  auto written_back = [self, failure, next] {
    if (self->state.failed) return;  // fail() answered the relocation
    if (!failure->empty()) {
      abandon(self, *failure, next);
      return;
    }
    swap_in_successors(self, next);
  };
  if (leaving.empty()) {
    written_back();
    return;
  }
  for (uint32_t c : leaving)
    self->request(s.peers.caches[c], caf::infinite, drain_atom::value)
        .then(
            [missing, written_back](ok_atom) {
              if (--*missing == 0) written_back();
            },
            [self, missing, failure, written_back, c](caf::error& err) {
              if (failure->empty())
                *failure = "writing back cache tier " + std::to_string(c) +
                           " failed: " + describe(self->system(), err);
              if (--*missing == 0) written_back();
            });
}

}  // namespace strata::actors::coordinator_impl
