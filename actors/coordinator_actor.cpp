#include "actors/coordinator_actor.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <string>

#include "actors/cache_tier_actor.hpp"
#include "actors/checkpoint.hpp"
#include "actors/dense_actor.hpp"
#include "actors/shard_actor.hpp"
#include "common/file_manifest.hpp"

namespace strata::actors {

void add_training_message_types(caf::actor_system_config& config) {
  config.add_message_type<worker_result>("strata::worker_result");
  config.add_message_type<training_summary>("strata::training_summary");
  config.add_message_type<scale_result>("strata::scale_result");
  config.add_message_type<cluster_status>("strata::cluster_status");
}

namespace {

// How many of the most recent batches the progress sink's loss averages.
constexpr size_t recent_loss_batches = 64;

struct batch_loss {
  uint64_t examples = 0;
  double loss_sum = 0;
};

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
  std::vector<batch_loss> history;  // per reported batch, in arrival order
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
  };
  std::optional<scaling_job> scaling;
  bool ended = false;  // the run answered (or failed)
};

using coordinator_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

void fail(coordinator_pointer self, caf::error err) {
  auto& st = self->state;
  if (st.failed) return;
  st.failed = true;
  if (st.scaling) {
    st.scaling->promise.deliver(err);
    st.scaling.reset();
  }
  if (st.run) {
    st.run->deliver(err);
    st.run.reset();
  }
  for (auto& p : st.on_demand) p.deliver(err);
  for (auto& p : st.on_demand_writing) p.deliver(err);
  st.on_demand.clear();
  st.on_demand_writing.clear();
}

caf::error io_failure(const error& e) {
  return caf::make_error(caf::sec::runtime_error, e.to_string());
}

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

double tail_loss(const std::vector<batch_loss>& history) {
  if (history.empty()) return 0;
  const size_t tail = std::max<size_t>(1, (history.size() + 9) / 10);
  uint64_t examples = 0;
  double loss = 0;
  for (size_t i = history.size() - tail; i < history.size(); ++i) {
    examples += history[i].examples;
    loss += history[i].loss_sum;
  }
  return examples == 0 ? 0 : loss / static_cast<double>(examples);
}

void finish(coordinator_pointer self) {
  auto& st = self->state;
  // Pushes are acknowledged (every worker answered); now write the caches
  // back, then flush and sync the shards.
  on_all_ok(
      self, st.peers.caches,
      [self] {
        on_all_ok(
            self, self->state.peers.shards,
            [self] {
              auto& s = self->state;
              s.summary.tail_loss = tail_loss(s.history);
              s.summary.bad_lines = 0;
              for (uint64_t b : s.bad_lines) s.summary.bad_lines += b;
              if (s.run) {
                s.run->deliver(s.summary);
                s.run.reset();
              }
              s.ended = true;
            },
            drain_atom::value);
      },
      drain_atom::value);
}

bool all_finished(const coordinator_state& st) {
  return std::all_of(st.finished.begin(), st.finished.end(), [](bool f) { return f; });
}

// A cluster without workers checks for a stop or a due checkpoint this often.
constexpr auto idle_poll = std::chrono::milliseconds(100);

// --- checkpoints ------------------------------------------------------------------

bool checkpoint_due(const coordinator_state& st) {
  if (!st.plan.settings.enabled()) return false;
  // While partitions are being copied, a destination holds rows it does
  // not own yet: the checkpoint waits for the commit.
  if (st.scaling) return false;
  if (st.due || !st.on_demand.empty()) return true;
  const uint64_t every = st.plan.settings.interval_batches;
  if (every == 0) return false;
  for (size_t w = 0; w < st.positions.size(); ++w)
    if (st.positions[w] - st.last_cut[w] >= every) return true;
  return false;
}

// Phase 2: once every shard's copy is done, writes dense.bin and
// CHECKPOINT, syncs the directory, writes FILES last (the checkpoint is
// complete from then on), and prunes old ones.
void complete_checkpoint(coordinator_pointer self, checkpoint_meta meta, std::filesystem::path dir,
                         std::vector<uint8_t> dense) {
  auto& st = self->state;
  auto rows = std::make_shared<std::vector<uint64_t>>(st.peers.shards.size(), 0);
  auto missing = std::make_shared<size_t>(st.peers.shards.size());
  auto done = [self, meta, dir, dense, rows]() mutable {
    auto& s = self->state;
    meta.shard_rows = *rows;
    meta.dense_bytes = dense.size();
    expected<void> ok = write_file_synced(dir / checkpoint_dense_name, dense.data(), dense.size());
    if (ok) ok = write_checkpoint_meta(dir, meta);
    if (ok) ok = sync_tree(dir);
    if (ok) {
      auto listed = write_file_manifest(dir);
      if (!listed) ok = listed.err();
    }
    if (ok) ok = prune_checkpoints(s.plan.settings.directory, s.plan.settings.keep);
    if (!ok) {
      fail(self, io_failure(ok.err()));
      return;
    }
    ++s.summary.checkpoints;
    s.summary.last_checkpoint = dir.string();
    for (auto& p : s.on_demand_writing) p.deliver(dir.string());
    s.on_demand_writing.clear();
    s.writing = false;
    if (s.after_writing) {
      auto next = std::move(s.after_writing);
      s.after_writing = nullptr;
      next();
    }
  };
  if (*missing == 0) {
    done();
    return;
  }
  for (size_t i = 0; i < st.peers.shards.size(); ++i)
    self->request(st.peers.shards[i], caf::infinite, copied_atom::value, meta.epoch)
        .then(
            [self, i, rows, missing, done](uint64_t n) mutable {
              if (self->state.failed) return;
              (*rows)[i] = n;
              if (--*missing == 0) done();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
}

// Takes a checkpoint at this cut (every worker's pushes acknowledged, pass
// mode: caches written back). Phase 1 (the cut): every shard flushes its
// dirty rows and queues its LMDB copy; the dense record is read. Then
// `resume` runs (training goes on) while phase 2 completes the copies.
// Only one checkpoint is written at a time: a cut while one is still being
// written waits for it.
void take_checkpoint(coordinator_pointer self, std::function<void()> resume) {
  auto& st = self->state;
  if (st.writing) {
    st.after_writing = [self, resume] { take_checkpoint(self, resume); };
    return;
  }
  st.due = false;
  st.writing = true;
  st.on_demand_writing = std::move(st.on_demand);
  st.on_demand.clear();
  const uint64_t epoch = st.epoch++;
  const auto dir = st.plan.settings.directory / checkpoint_name(epoch);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // an interrupted attempt of this name
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    fail(self, caf::make_error(caf::sec::runtime_error, "cannot create checkpoint directory " +
                                                            dir.string() + ": " + ec.message()));
    return;
  }
  checkpoint_meta meta;
  meta.cluster = st.plan.cluster;
  meta.epoch = epoch;
  meta.incarnation = st.plan.incarnation;
  meta.mode = st.mode;
  meta.passes = st.plan.restored_passes + st.pass;
  meta.table = st.plan.table.name;
  meta.dim = st.plan.table.layout.dim;
  meta.optimizer = st.plan.table.layout.optimizer;
  meta.with_state = st.plan.table.layout.with_state;
  meta.partitions = st.plan.map.partitions();
  meta.map_epoch = st.plan.map.epoch();
  for (uint32_t p = 0; p < st.plan.map.partitions(); ++p)
    meta.owners.push_back(st.plan.map.owner(p));
  meta.positions = st.positions;
  meta.batches = st.plan.restored_batches + st.summary.batches;
  meta.examples = st.plan.restored_examples + st.summary.examples;
  st.last_cut = st.positions;

  auto missing = std::make_shared<size_t>(st.peers.shards.size());
  auto cut_done = [self, meta, dir, resume] {
    self->request(self->state.peers.dense, caf::infinite, checkpoint_atom::value)
        .then(
            [self, meta, dir, resume](std::vector<uint8_t>& dense) {
              if (self->state.failed) return;
              complete_checkpoint(self, meta, dir, std::move(dense));
              resume();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  };
  if (*missing == 0) {
    cut_done();
    return;
  }
  for (size_t i = 0; i < st.peers.shards.size(); ++i)
    self->request(st.peers.shards[i], caf::infinite, checkpoint_atom::value, epoch,
                  shard_checkpoint_dir(dir, static_cast<uint32_t>(i)).string())
        .then(
            [self, missing, cut_done](ok_atom) {
              if (self->state.failed) return;
              if (--*missing == 0) cut_done();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
}

// The end of training (data exhausted or a stop): a final checkpoint if
// configured, then the graceful stop. The final checkpoint is complete
// before the drain begins.
void at_cut(coordinator_pointer self, std::function<void()> next, bool final);

void end_training_now(coordinator_pointer self);

void end_training(coordinator_pointer self) {
  // A scale in progress commits first, so the final checkpoint and the
  // drain see the new map.
  at_cut(
      self, [self] { end_training_now(self); }, true);
}

void end_training_now(coordinator_pointer self) {
  auto& st = self->state;
  st.summary.stopped = !all_finished(st);
  if (!st.plan.settings.enabled() || !st.plan.settings.at_stop) {
    auto after = [self] { finish(self); };
    if (st.writing)
      st.after_writing = after;
    else
      after();
    return;
  }
  take_checkpoint(self, [self] {
    // Wait for this checkpoint's phase 2, then drain.
    self->state.after_writing = [self] { finish(self); };
  });
}

// --- rounds -------------------------------------------------------------------------

void start_pass(coordinator_pointer self);

uint64_t round_grant(const coordinator_state& st) {
  if (st.mode == training_mode::pass) return std::max<uint64_t>(st.pass_batches, 1);
  uint64_t grant = st.plan.settings.round_batches;
  if (st.plan.settings.interval_batches != 0)
    grant = grant == 0 ? st.plan.settings.interval_batches
                       : std::min(grant, st.plan.settings.interval_batches);
  return grant;
}

// One round: every worker not yet finished runs (pass mode: pass_batches
// batches; async mode: round_grant batches, 0 = to the end) and answers
// when its pushes are in.
void run_round(coordinator_pointer self, std::function<void()> next) {
  auto& st = self->state;
  const uint64_t grant = round_grant(st);
  auto missing = std::make_shared<size_t>(0);
  for (size_t w = 0; w < st.peers.workers.size(); ++w)
    if (!st.finished[w]) ++*missing;
  if (*missing == 0) {
    next();
    return;
  }
  for (size_t w = 0; w < st.peers.workers.size(); ++w) {
    if (st.finished[w]) continue;
    self->request(st.peers.workers[w], caf::infinite, run_atom::value, grant, st.epoch)
        .then(
            [self, w, missing, next](const worker_result& result) {
              auto& s = self->state;
              if (s.failed) return;
              s.summary.batches += result.batches;
              s.summary.examples += result.examples;
              s.summary.loss_sum += result.loss_sum;
              s.finished[w] = result.finished;
              s.bad_lines[w] = result.bad_lines;  // a running total per worker
              s.positions[w] = result.position;
              if (--*missing == 0) next();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  }
}

// Async mode: rounds until the data ends or a stop; a checkpoint at a
// round's end when one is due.
void async_round(coordinator_pointer self) {
  run_round(self, [self] {
    auto& s = self->state;
    if (s.peers.workers.empty() && !s.stop_requested) {
      // No workers: a store for clients' pushes (the gateway). Every moment
      // is a cut; wait for a stop, taking checkpoints when due.
      at_cut(
          self,
          [self] {
            auto& s = self->state;
            auto again = [self] { self->delayed_send(self, idle_poll, idle_atom::value); };
            if (checkpoint_due(s) && !s.writing)
              take_checkpoint(self, again);
            else
              again();
          },
          false);
      return;
    }
    if (all_finished(s) || s.stop_requested) {
      end_training(self);
      return;
    }
    at_cut(
        self,
        [self] {
          auto& s = self->state;
          if (checkpoint_due(s) && !s.writing) {
            take_checkpoint(self, [self] { async_round(self); });
            return;
          }
          async_round(self);
        },
        false);
  });
}

void start_pass(coordinator_pointer self) {
  on_all_ok(
      self, self->state.peers.caches,
      [self] {
        run_round(self, [self] {
          on_all_ok(
              self, self->state.peers.caches,
              [self] {
                auto& s = self->state;
                ++s.summary.passes;
                ++s.pass;
                // A pass boundary: every update is back in the shards.
                if (all_finished(s) || s.stop_requested) {
                  end_training(self);
                  return;
                }
                at_cut(
                    self,
                    [self] {
                      auto& s = self->state;
                      if (checkpoint_due(s) && !s.writing)
                        take_checkpoint(self, [self] { start_pass(self); });
                      else
                        start_pass(self);
                    },
                    false);
              },
              pass_end_atom::value, self->state.pass);
        });
      },
      pass_start_atom::value, self->state.pass);
}

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
    auto acks = std::make_shared<size_t>(job.shards.size() + self->state.peers.caches.size());
    auto ack = [self, acks, done]() {
      if (self->state.failed) return;
      if (--*acks == 0) done();
    };
    for (const auto& shard : job.shards)
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
    self->request(job.shards[src], caf::infinite, fence_atom::value, epoch)
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

// The copies of every source are acknowledged: commit now if no training
// is running (or a final cut waits), else at the next cut.
void copies_done(coordinator_pointer self) {
  auto& s = self->state;
  auto& job = *s.scaling;
  job.copied = true;
  if (job.resume) {
    auto next = std::move(job.resume);
    job.resume = nullptr;
    fence_and_commit(self, std::move(next));
  } else if (!training_running(s)) {
    fence_and_commit(self, nullptr);
  }
}

caf::typed_response_promise<scale_result> start_scale(coordinator_pointer self, uint32_t target) {
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
  for (uint32_t i = current; i < target; ++i) {
    auto spawned = s.peers.factory.spawn(i);
    if (!spawned) {
      for (uint32_t j = current; j < i; ++j) {
        caf::anon_send_exit(job.shards[j], caf::exit_reason::user_shutdown);
        if (s.peers.factory.remove_files) s.peers.factory.remove_files(j);
      }
      return refuse(spawned.err().to_string());
    }
    self->link_to(*spawned);  // they stop with the cluster
    job.shards.push_back(*spawned);
  }
  std::vector<migration_order> orders(job.shards.size());
  for (uint32_t p = 0; p < partitions; ++p) {
    const uint32_t from = s.plan.map.owner(p), to = job.next.owner(p);
    if (from == to) continue;
    orders[from].epoch = job.next.epoch();
    orders[from].partitions.push_back(p);
    orders[from].destinations.push_back(caf::actor_cast<caf::actor>(job.shards[to]));
    ++job.result.moved_partitions;
  }
  for (uint32_t i = 0; i < orders.size(); ++i)
    if (!orders[i].partitions.empty()) job.sources.push_back(i);
  job.copies_missing = job.sources.size();
  job.promise = promise;
  s.scaling = std::move(job);
  if (s.scaling->sources.empty()) {
    copies_done(self);
    return promise;
  }
  for (uint32_t src : s.scaling->sources)
    self->request(s.scaling->shards[src], caf::infinite, migrate_atom::value, orders[src])
        .then(
            [self](const migration_stats& copied) {
              auto& s = self->state;
              if (s.failed || !s.scaling) return;
              s.scaling->result.copied_rows += copied.rows;
              s.scaling->result.bytes += copied.bytes;
              if (--s.scaling->copies_missing == 0) copies_done(self);
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  return promise;
}

coordinator_actor::behavior_type coordinator_behavior(coordinator_pointer self, training_mode mode,
                                                      uint64_t pass_batches,
                                                      coordinator_peers peers, progress_sink sink,
                                                      checkpoint_plan plan) {
  auto& st = self->state;
  st.mode = mode;
  st.pass_batches = pass_batches;
  st.peers = std::move(peers);
  st.sink = std::move(sink);
  st.finished.assign(st.peers.workers.size(), false);
  st.bad_lines.assign(st.peers.workers.size(), 0);
  st.plan = std::move(plan);
  st.epoch = std::max<uint64_t>(st.plan.first_epoch, 1);
  st.positions = st.plan.positions;
  st.positions.resize(st.peers.workers.size(), 0);
  st.last_cut = st.positions;
  return {
      [self](checkpoint_atom) -> caf::typed_response_promise<std::string> {
        auto& s = self->state;
        auto promise = self->make_response_promise<std::string>();
        if (!s.plan.settings.enabled())
          promise.deliver(
              caf::make_error(caf::sec::invalid_argument,
                              "cluster '" + s.plan.cluster +
                                  "' has no checkpoint directory (manifest: checkpoint.dir)"));
        else if (s.failed)
          promise.deliver(caf::make_error(caf::sec::runtime_error, "training has failed"));
        else if (s.ended)
          promise.deliver(caf::make_error(caf::sec::invalid_argument,
                                          "training has ended: checkpoints are taken at cuts of "
                                          "a run (the final one at the stop)"));
        else
          s.on_demand.push_back(promise);  // taken at the next cut
        return promise;
      },
      [self](stop_atom) { self->state.stop_requested = true; },
      [self](idle_atom) { async_round(self); },
      [self](tick_atom) {
        auto& s = self->state;
        s.due = true;
        if (s.plan.settings.interval_seconds != 0)
          self->delayed_send(self, std::chrono::seconds(s.plan.settings.interval_seconds),
                             tick_atom::value);
      },
      [self](stats_atom) {
        return actor_stats{"coordinator", 0, static_cast<uint64_t>(self->mailbox().size())};
      },
      [self](scale_atom, uint32_t target) -> caf::typed_response_promise<scale_result> {
        return start_scale(self, target);
      },
      [self](map_atom) -> cluster_status {
        auto& s = self->state;
        cluster_status out;
        out.routing = routing_of(s.plan.map, s.peers.shards);
        out.state = s.failed           ? "failed"
                    : s.ended          ? "finished"
                    : !s.run           ? "idle"
                    : s.stop_requested ? "stopping"
                                       : "training";
        out.batches = s.progress.batches;
        out.examples = s.progress.examples;
        out.recent_loss = s.progress.recent_loss;
        out.passes = s.summary.passes;
        out.checkpoints = s.summary.checkpoints;
        out.last_checkpoint = s.summary.last_checkpoint;
        out.scaling_to = s.scaling ? s.scaling->next.shards() : 0;
        out.workers = static_cast<uint32_t>(s.peers.workers.size());
        for (const auto& c : s.peers.caches) out.caches.push_back(caf::actor_cast<caf::actor>(c));
        return out;
      },
      [self](run_atom) -> caf::typed_response_promise<training_summary> {
        auto& s = self->state;
        auto promise = self->make_response_promise<training_summary>();
        if (s.run || s.summary.batches != 0 || s.failed) {
          promise.deliver(
              caf::make_error(caf::sec::invalid_argument, "coordinator: training already ran"));
          return promise;
        }
        s.run = promise;
        if (s.plan.settings.enabled() && s.plan.settings.interval_seconds != 0)
          self->delayed_send(self, std::chrono::seconds(s.plan.settings.interval_seconds),
                             tick_atom::value);
        if (s.mode == training_mode::pass)
          start_pass(self);
        else
          async_round(self);
        return promise;
      },
      [self](progress_atom, const progress_report& report) {
        auto& s = self->state;
        s.history.push_back({report.examples, report.loss_sum});
        s.progress.examples += report.examples;
        s.progress.batches += report.batches;
        const size_t n = std::min(recent_loss_batches, s.history.size());
        uint64_t examples = 0;
        double loss = 0;
        for (size_t i = s.history.size() - n; i < s.history.size(); ++i) {
          examples += s.history[i].examples;
          loss += s.history[i].loss_sum;
        }
        s.progress.recent_loss = examples == 0 ? 0 : loss / static_cast<double>(examples);
        if (s.sink) s.sink(s.progress);
      },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, training_mode mode,
                                    uint64_t pass_batches, coordinator_peers peers,
                                    progress_sink sink, checkpoint_plan plan) {
  return system.spawn(coordinator_behavior, mode, pass_batches, std::move(peers), std::move(sink),
                      std::move(plan));
}

void training_cluster::stop() {
  // The coordinator and workers first (they hold requests to the others),
  // then the storage actors.
  auto exit = [](const auto& handle) {
    if (handle) caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
  };
  exit(coordinator);
  for (auto& w : workers) exit(w);
  exit(dense);
  for (auto& c : caches) exit(c);
  for (auto& s : shards) exit(s);
}

namespace {

// "root/shard0" -> "root/shard<index>", "state/shard-0" -> "state/shard-<index>":
// the trailing digits of the name replaced (appended if there are none).
std::filesystem::path numbered_sibling(const std::filesystem::path& dir, uint32_t index) {
  std::string name = dir.filename().string();
  while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back()))) name.pop_back();
  return dir.parent_path() / (name + std::to_string(index));
}

}  // namespace

expected<training_cluster> spawn_training_cluster(caf::actor_system& system,
                                                  const cluster_config& config,
                                                  const worker_seams& seams, progress_sink sink,
                                                  const cluster_placement& placement) {
  if (config.shards.empty() || config.caches.empty())
    return error(errc::invalid_argument,
                 "cluster '" + config.name + "': needs at least one shard and cache tier");
  if (config.workers.empty() && config.mode != training_mode::async)
    return error(errc::invalid_argument,
                 "cluster '" + config.name +
                     "': a cluster without workers (a store for clients' pushes) runs in async "
                     "mode");
  if (config.partitions == 0)
    return error(errc::invalid_argument, "cluster '" + config.name + "': partitions must be > 0");
  if (!seams.gradients && config.table.layout.dim != config.model.row_dim())
    return error(errc::invalid_argument, "cluster '" + config.name + "': table dim " +
                                             std::to_string(config.table.layout.dim) +
                                             " is not the model's row dim " +
                                             std::to_string(config.model.row_dim()));
  training_cluster cluster;
  auto stop_on_error = [&cluster](error err) -> expected<training_cluster> {
    cluster.stop();
    return err;
  };
  for (uint32_t i = 0; i < config.shards.size(); ++i) {
    if (placement.remote_shard) {
      if (auto proxy = placement.remote_shard(i)) {
        cluster.shards.push_back(*proxy);
        cluster.shard_here.push_back(false);
        continue;
      }
    }
    auto shard = config.shards[i];
    shard.chain.incarnation = config.incarnation;
    auto spawned = spawn_shard(system, shard);
    if (!spawned) return stop_on_error(spawned.err());
    cluster.shards.push_back(*spawned);
    cluster.shard_here.push_back(true);
  }
  cluster.map = partition_map(config.partitions, static_cast<uint32_t>(cluster.shards.size()));
  for (uint32_t i = 0; i < config.caches.size(); ++i) {
    if (placement.remote_cache) {
      if (auto proxy = placement.remote_cache(i)) {
        cluster.caches.push_back(*proxy);
        cluster.cache_here.push_back(false);
        continue;
      }
    }
    auto spawned =
        spawn_cache_tier(system, config.caches[i], config.mode, cluster.shards, cluster.map);
    if (!spawned) return stop_on_error(spawned.err());
    cluster.caches.push_back(*spawned);
    cluster.cache_here.push_back(true);
  }
  if (placement.remote_dense) {
    cluster.dense = *placement.remote_dense;
    cluster.dense_here = false;
  } else {
    cluster.dense = spawn_dense(
        system, config.dense,
        seams.initial_dense ? *seams.initial_dense : model::ctr_model(config.model).initial_dense(),
        config.restored_dense);
  }
  const row_layout& layout = config.table.layout;
  for (uint32_t w = 0; w < config.workers.size(); ++w) {
    if (placement.remote_worker) {
      if (auto proxy = placement.remote_worker(w)) {
        cluster.workers.push_back(*proxy);
        cluster.worker_here.push_back(false);
        continue;
      }
    }
    cluster.worker_here.push_back(true);
    const auto& wc = config.workers[w];
    worker_peers peers;
    peers.mode = config.mode;
    peers.dense = cluster.dense;
    if (config.mode == training_mode::async)
      peers.caches.push_back(cluster.caches[w % cluster.caches.size()]);
    else
      peers.caches = cluster.caches;
    std::shared_ptr<batch_source> batches;
    if (seams.batches) {
      auto opened = seams.batches(wc);
      if (!opened) return stop_on_error(opened.err());
      batches = std::move(*opened);
    } else {
      auto opened = open_reader_source(wc);
      if (!opened) return stop_on_error(opened.err());
      batches = std::move(*opened);
    }
    std::shared_ptr<gradient_source> gradients;
    if (seams.gradients)
      gradients = seams.gradients(wc);
    else if (config.gradients == gradient_kind::count)
      gradients = make_count_gradients(layout.dim);
    else
      gradients = make_model_gradients(config.model);
    cluster.workers.push_back(spawn_worker(system, wc, layout, std::move(peers), std::move(batches),
                                           std::move(gradients)));
  }
  if (!placement.coordinator) return cluster;
  checkpoint_plan plan;
  plan.settings = config.checkpoint;
  plan.cluster = config.name;
  plan.table = config.table;
  plan.map = cluster.map;
  plan.incarnation = config.incarnation;
  plan.first_epoch = config.first_epoch;
  for (const auto& wc : config.workers) plan.positions.push_back(wc.skip_batches);
  plan.restored_passes = config.restored_passes;
  plan.restored_batches = config.restored_batches;
  plan.restored_examples = config.restored_examples;
  if (plan.settings.enabled()) {
    // Never reuse the name of an earlier (possibly interrupted) checkpoint.
    plan.first_epoch =
        std::max(plan.first_epoch, highest_checkpoint_epoch(plan.settings.directory) + 1);
  }
  // New shards (scale up) take shard 0's settings, their own index and a
  // fresh directory named like shard 0's with the index at its end.
  shard_factory factory;
  factory.spawn = [&system, config](uint32_t index) -> expected<shard_actor> {
    shard_config sc = config.shards.front();
    sc.index = index;
    sc.chain.incarnation = config.incarnation;
    sc.restored_sketch.clear();
    sc.lmdb.directory = numbered_sibling(sc.lmdb.directory, index);
    std::error_code ec;
    std::filesystem::remove_all(sc.lmdb.directory,
                                ec);  // a stale environment would inject old rows
    if (ec)
      return error(errc::io_error,
                   "cannot clear " + sc.lmdb.directory.string() + ": " + ec.message());
    return spawn_shard(system, sc);
  };
  factory.refuse_scaling = placement.refuse_scaling;
  factory.remove_files = [config](uint32_t index) {
    const auto dir = index < config.shards.size()
                         ? config.shards[index].lmdb.directory
                         : numbered_sibling(config.shards.front().lmdb.directory, index);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  cluster.coordinator = spawn_coordinator(
      system, config.mode, config.pass_batches,
      coordinator_peers{cluster.workers, cluster.caches, cluster.shards, cluster.dense, factory},
      std::move(sink), std::move(plan));
  return cluster;
}

}  // namespace strata::actors
