// The coordinator's scaling (docs/scaling.md): spawn the new shards, copy
// the moving partitions, fence and commit the new map at a cut.
#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <memory>
#include <string>

#include "actors/coordinator_internal.hpp"
#include "actors/shard_actor.hpp"

namespace strata::actors::coordinator_impl {

// --- scaling ------------------------------------------------------------------------

bool training_running(const coordinator_state& s) { return s.run.has_value(); }

routing_table routing_of(const partition_map& map, const std::vector<shard_actor>& shards) {
  routing_table t;
  t.epoch = map.epoch();
  t.owners = map.owners();
  for (const auto& s : shards) t.shards.push_back(caf::actor_cast<caf::actor>(s));
  return t;
}

// Fence (every source sends its touched rows and forwards from then on),
// then commit the new map to every shard and cache tier; retired shards
// exit and their files go; then `next` (training resumes).
void fence_and_commit(coordinator_pointer self, std::function<void()> next) {
  auto& job = *self->state.scaling;
  job.committing = true;
  const uint64_t epoch = job.next.epoch();
  auto missing = std::make_shared<size_t>(job.sources.size());
  auto commit = [self, next] {
    auto& job = *self->state.scaling;
    const uint32_t target = job.next.shards();
    std::vector<shard_actor> kept(job.shards.begin(), job.shards.begin() + target);
    const routing_table table = routing_of(job.next, kept);
    auto done = [self, next, kept] {
      auto& s = self->state;
      auto& job = *s.scaling;
      const uint32_t target = job.next.shards();
      // A drain: the old shards own nothing now; they go on their node.
      for (uint32_t i : job.rehomed) {
        self->unlink_from(job.old[i]);
        if (s.peers.factory.end_rehome) s.peers.factory.end_rehome(i, true);
      }
      for (size_t i = target; i < job.shards.size(); ++i) {
        self->unlink_from(job.shards[i]);
        caf::anon_send_exit(job.shards[i], caf::exit_reason::user_shutdown);
        if (s.peers.factory.remove_files) s.peers.factory.remove_files(static_cast<uint32_t>(i));
      }
      s.plan.map = job.next;
      s.peers.shards = kept;
      job.result.epoch = job.next.epoch();
      job.result.shards = target;
      auto answer = [self, next] {
        auto& s = self->state;
        if (!s.scaling) return;
        s.scaling->promise.deliver(s.scaling->result);
        s.scaling.reset();
        if (next) next();
      };
      // No training (before the run or after its drain): the moved rows
      // are made durable now, as a graceful stop would.
      if (!training_running(s))
        on_all_ok(self, kept, answer, drain_atom::value);
      else
        answer();
    };
    // A drain's old shards get the commit too: they forward from then on.
    std::vector<shard_actor> routers = job.shards;
    for (uint32_t i : job.rehomed) routers.push_back(job.old[i]);
    auto acks = std::make_shared<size_t>(routers.size() + self->state.peers.caches.size());
    auto ack = [self, acks, done]() {
      if (self->state.failed) return;
      if (--*acks == 0) done();
    };
    for (const auto& shard : routers)
      self->request(shard, caf::infinite, commit_atom::value, table)
          .then([ack](ok_atom) { ack(); }, [self](caf::error& err) { fail(self, std::move(err)); });
    for (const auto& cache : self->state.peers.caches)
      self->request(cache, caf::infinite, map_atom::value, table)
          .then([ack](ok_atom) { ack(); }, [self](caf::error& err) { fail(self, std::move(err)); });
  };
  if (*missing == 0) {
    commit();
    return;
  }
  for (uint32_t src : job.sources)
    self->request(job.rehomed.empty() ? job.shards[src] : job.old[src], caf::infinite,
                  fence_atom::value, epoch)
        .then(
            [self, missing, commit](const migration_stats& delta) {
              auto& s = self->state;
              if (s.failed || !s.scaling) return;
              s.scaling->result.delta_rows += delta.rows;
              s.scaling->result.bytes += delta.bytes;
              if (--*missing == 0) commit();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
}

// A cut (every push acknowledged; pass mode: caches written back): a
// scale whose copy is done fences and commits here. `final` (training
// ends) waits for a copy still running.
void at_cut(coordinator_pointer self, std::function<void()> next, bool final) {
  auto& s = self->state;
  if (!s.scaling || s.scaling->committing || (s.writing && !final) ||
      (!s.scaling->copied && !final)) {
    next();
    return;
  }
  if (!s.scaling->copied) {
    s.scaling->resume = std::move(next);
    return;
  }
  fence_and_commit(self, std::move(next));
}

// The new shards [first, end) of a scale that is abandoned: unlinked (their
// exit must not take the coordinator with them) and told to exit; their
// directories (up to end - 1: a spawn that failed half way) are removed
// once every one has exited and closed its environment (a spawn that failed
// for want of file descriptors leaves none to remove them with before
// that). Until then a new scale is refused: it would reuse the names.
void retire_new_shards(coordinator_pointer self, const std::vector<shard_actor>& shards,
                       uint32_t first, uint32_t end) {
  auto& s = self->state;
  auto remove = s.peers.factory.remove_files;
  auto pending = s.removals_pending;
  ++*pending;
  const uint32_t spawned = std::min<uint32_t>(end, static_cast<uint32_t>(shards.size()));
  auto left = std::make_shared<std::atomic<uint32_t>>(spawned > first ? spawned - first : 0);
  auto remove_all = [remove, pending, first, end] {
    if (remove)
      for (uint32_t j = first; j < end; ++j) remove(j);
    --*pending;
  };
  if (*left == 0) {
    remove_all();
    return;
  }
  for (uint32_t j = first; j < spawned; ++j) {
    self->unlink_from(shards[j]);
    caf::actor_cast<caf::actor>(shards[j])->attach_functor([left, remove_all] {
      if (--*left == 0) remove_all();
    });
    caf::anon_send_exit(shards[j], caf::exit_reason::user_shutdown);
  }
}

// A copy failed (before the fence; every source has answered): the scale
// is abandoned. The old map is committed at a new epoch, so every source
// forgets its migration and a destination drops what it was sent of
// partitions it does not own; the new shards go; the request gets the
// error and training goes on (a final cut waiting for the scale resumes).
void abandon_scale(coordinator_pointer self) {
  auto& s = self->state;
  auto& job = *s.scaling;
  job.committing = true;  // no fence for this one
  const uint32_t current = static_cast<uint32_t>(s.peers.shards.size());
  retire_new_shards(self, job.shards, current, static_cast<uint32_t>(job.shards.size()));
  recommit_and_fail(self,
                    [self](const partition_map& same, const coordinator_state::scaling_job& job) {
                      return "cannot scale cluster '" + self->state.plan.cluster + "' to " +
                             std::to_string(job.next.shards()) +
                             " shards: copying partitions failed (the scale is abandoned; " +
                             std::to_string(same.shards()) + " shards keep training at map epoch " +
                             std::to_string(same.epoch()) + "): " + job.copy_failure;
                    });
}

void end_scaling_job(coordinator_pointer self, caf::sec code, std::string why) {
  auto& s = self->state;
  auto job = std::move(*s.scaling);
  s.scaling.reset();
  job.promise.deliver(caf::make_error(code, std::move(why)));
  if (job.resume) job.resume();
}

void recommit_and_fail(
    coordinator_pointer self,
    std::function<std::string(const partition_map&, const coordinator_state::scaling_job&)> why) {
  auto& s = self->state;
  const partition_map same(s.plan.map.epoch() + 1, s.plan.map.owners(),
                           static_cast<uint32_t>(s.peers.shards.size()));
  const routing_table table = routing_of(same, s.peers.shards);
  auto acks = std::make_shared<size_t>(s.peers.shards.size() + s.peers.caches.size());
  auto done = [self, same, why] {
    auto& s = self->state;
    if (!s.scaling) return;
    s.plan.map = same;
    end_scaling_job(self, caf::sec::runtime_error, why(same, *s.scaling));
  };
  auto ack = [self, acks, done] {
    if (self->state.failed) return;
    if (--*acks == 0) done();
  };
  if (*acks == 0) {
    done();
    return;
  }
  for (const auto& shard : s.peers.shards)
    self->request(shard, caf::infinite, commit_atom::value, table)
        .then([ack](ok_atom) { ack(); }, [self](caf::error& err) { fail(self, std::move(err)); });
  for (const auto& cache : s.peers.caches)
    self->request(cache, caf::infinite, map_atom::value, table)
        .then([ack](ok_atom) { ack(); }, [self](caf::error& err) { fail(self, std::move(err)); });
}

// The copies of every source are acknowledged: commit now if no training
// is running (or a final cut waits), else at the next cut.
void copies_done(coordinator_pointer self) {
  auto& s = self->state;
  auto& job = *s.scaling;
  if (!job.copy_failure.empty()) {
    if (!job.rehomed.empty())
      abandon_drain(self);
    else
      abandon_scale(self);
    return;
  }
  job.copied = true;
  if (job.resume) {
    auto next = std::move(job.resume);
    job.resume = nullptr;
    fence_and_commit(self, std::move(next));
  } else if (!training_running(s)) {
    fence_and_commit(self, nullptr);
  }
}

caf::typed_response_promise<scale_result> start_scale(coordinator_pointer self, uint32_t target,
                                                      const std::vector<std::string>& placement) {
  auto& s = self->state;
  auto promise = self->make_response_promise<scale_result>();
  const uint32_t current = static_cast<uint32_t>(s.peers.shards.size());
  const uint32_t partitions = s.plan.map.partitions();
  auto refuse = [&](std::string why) {
    promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                    "cannot scale cluster '" + s.plan.cluster + "' to " +
                                        std::to_string(target) + " shards: " + why));
    return promise;
  };
  if (s.failed) return refuse("training has failed");
  if (s.scaling)
    return refuse("a scale to " + std::to_string(s.scaling->next.shards()) +
                  " shards is in progress");
  if (*s.removals_pending != 0)
    return refuse("the shards of an abandoned scale are still being removed; try again");
  if (target == 0) return refuse("at least one shard is needed");
  if (target > partitions)
    return refuse("only " + std::to_string(partitions) + " partitions to spread");
  if (!s.peers.factory.refuse_scaling.empty()) return refuse(s.peers.factory.refuse_scaling);
  if (target > current && !s.peers.factory.spawn) return refuse("this cluster cannot spawn shards");
  if (target == current) {
    promise.deliver(scale_result{s.plan.map.epoch(), current, 0, 0, 0, 0});
    return promise;
  }
  coordinator_state::scaling_job job;
  job.next = s.plan.map.rebalanced(target);
  job.shards = s.peers.shards;
  job.promise = promise;
  s.scaling = std::move(job);
  spawn_new_shard(self, current, current, placement);
  return promise;
}

void run_spawn(coordinator_pointer self, bool waits, std::function<expected<shard_actor>()> spawn,
               std::function<void(shard_actor, std::string)> done) {
  if (!waits) {
    auto spawned = spawn();
    if (spawned)
      done(*spawned, std::string());
    else
      done(shard_actor(), spawned.err().message());
    return;
  }
  auto helper =
      self->home_system().spawn<caf::detached>([spawn](caf::event_based_actor* h) -> caf::behavior {
        return {[h, spawn](scale_atom) {
          auto reply = h->make_response_promise();
          auto spawned = spawn();
          if (spawned)
            reply.deliver(caf::actor_cast<caf::actor>(*spawned), std::string());
          else
            reply.deliver(caf::actor(), spawned.err().message());
          h->quit();
        }};
      });
  self->request(helper, caf::infinite, scale_atom::value)
      .then(
          [done](caf::actor spawned, std::string why) {
            done(caf::actor_cast<shard_actor>(spawned), std::move(why));
          },
          [self, done](caf::error& err) { done(shard_actor(), self->system().render(err)); });
}

// Shard i of the running scale (current <= i < target), then the next one;
// after the last (at once for a scale down), the copies start. A failure
// abandons the scale before anything moved: the new shards go with their
// files, the half-made one's too; the map stays and training goes on.
void spawn_new_shard(coordinator_pointer self, uint32_t current, uint32_t i,
                     std::vector<std::string> placement) {
  auto& s = self->state;
  const uint32_t target = s.scaling->next.shards();
  if (i >= target) {
    auto& job = *s.scaling;
    const uint32_t partitions = s.plan.map.partitions();
    std::vector<migration_order> orders(job.shards.size());
    for (uint32_t p = 0; p < partitions; ++p) {
      const uint32_t from = s.plan.map.owner(p), to = job.next.owner(p);
      if (from == to) continue;
      orders[from].epoch = job.next.epoch();
      orders[from].partitions.push_back(p);
      orders[from].destinations.push_back(caf::actor_cast<caf::actor>(job.shards[to]));
      ++job.result.moved_partitions;
    }
    for (uint32_t k = 0; k < orders.size(); ++k)
      if (!orders[k].partitions.empty()) job.sources.push_back(k);
    start_copies(self, job.shards, orders);
    return;
  }
  const std::string node = i < placement.size() ? placement[i] : std::string();
  auto spawn = [spawn = s.peers.factory.spawn, i, node] { return spawn(i, node); };
  run_spawn(self, s.peers.factory.spawn_waits, spawn,
            [self, current, i, placement](shard_actor shard, std::string why) {
              auto& s = self->state;
              if (s.failed || !s.scaling) {
                // The run failed meanwhile (its scale with it): this shard goes too.
                if (shard) {
                  std::vector<shard_actor> orphan(i + 1);
                  orphan[i] = shard;
                  retire_new_shards(self, orphan, i, i + 1);
                }
                return;
              }
              auto& job = *s.scaling;
              if (!shard) {
                retire_new_shards(self, job.shards, current, i + 1);
                end_scaling_job(self, caf::sec::invalid_argument,
                                "cannot scale cluster '" + s.plan.cluster + "' to " +
                                    std::to_string(job.next.shards()) + " shards: spawning shard " +
                                    std::to_string(i) + " failed (the scale is abandoned; " +
                                    std::to_string(current) + " shards keep training): " + why);
                return;
              }
              self->link_to(shard);  // it stops with the cluster
              job.shards.push_back(shard);
              spawn_new_shard(self, current, i + 1, placement);
            });
}

void start_copies(coordinator_pointer self, const std::vector<shard_actor>& from,
                  const std::vector<migration_order>& orders) {
  auto& job = *self->state.scaling;
  job.copies_missing = job.sources.size();
  if (job.sources.empty()) {
    copies_done(self);
    return;
  }
  for (uint32_t src : job.sources)
    self->request(from[src], caf::infinite, migrate_atom::value, orders[src])
        .then(
            [self](const migration_stats& copied) {
              auto& s = self->state;
              if (s.failed || !s.scaling) return;
              s.scaling->result.copied_rows += copied.rows;
              s.scaling->result.bytes += copied.bytes;
              if (--s.scaling->copies_missing == 0) copies_done(self);
            },
            [self](caf::error& err) {
              // Before the fence nothing has moved for good: once every
              // source has answered, the scale (or drain) is abandoned.
              auto& s = self->state;
              if (s.failed || !s.scaling) return;
              if (s.scaling->copy_failure.empty())
                s.scaling->copy_failure = self->system().render(err);
              if (--s.scaling->copies_missing == 0) copies_done(self);
            });
}

}  // namespace strata::actors::coordinator_impl
