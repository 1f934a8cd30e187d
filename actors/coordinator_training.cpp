// The coordinator's training: rounds (async mode), passes (pass mode),
// checkpoints at cuts, progress reports and the graceful end (final
// checkpoint, drain). See coordinator_actor.hpp.
#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <string>

#include "actors/cache_tier_actor.hpp"
#include "actors/checkpoint.hpp"
#include "actors/coordinator_internal.hpp"
#include "actors/dense_actor.hpp"
#include "actors/shard_actor.hpp"
#include "common/file_manifest.hpp"

namespace strata::actors::coordinator_impl {

namespace {

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
              s.summary.tail_loss = s.history.tail_loss();
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
// A failed checkpoint fails the run; counted first (strata_checkpoint_failures_total).
void fail_checkpoint(coordinator_pointer self, caf::error err) {
  record_checkpoint_failure();
  fail(self, std::move(err));
}

// Bytes of the files under a complete checkpoint (strata_checkpoint_*).
uint64_t checkpoint_bytes(const std::filesystem::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto n = it->file_size(size_ec);
      if (!size_ec) bytes += n;
    }
  }
  return bytes;
}

void complete_checkpoint(coordinator_pointer self, checkpoint_meta meta, std::filesystem::path dir,
                         std::vector<uint8_t> dense,
                         std::chrono::steady_clock::time_point started) {
  auto& st = self->state;
  auto rows = std::make_shared<std::vector<uint64_t>>(st.peers.shards.size(), 0);
  auto missing = std::make_shared<size_t>(st.peers.shards.size());
  auto done = [self, meta, dir, dense, rows, started]() mutable {
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
      fail_checkpoint(self, io_failure(ok.err()));
      return;
    }
    record_checkpoint(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
        checkpoint_bytes(dir));
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
            [self](caf::error& err) { fail_checkpoint(self, std::move(err)); });
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
    fail_checkpoint(
        self, caf::make_error(caf::sec::runtime_error, "cannot create checkpoint directory " +
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
  const auto started = std::chrono::steady_clock::now();
  auto cut_done = [self, meta, dir, resume, started] {
    self->request(self->state.peers.dense, caf::infinite, checkpoint_atom::value)
        .then(
            [self, meta, dir, resume, started](std::vector<uint8_t>& dense) {
              if (self->state.failed) return;
              complete_checkpoint(self, meta, dir, std::move(dense), started);
              resume();
            },
            [self](caf::error& err) { fail_checkpoint(self, std::move(err)); });
  };
  if (*missing == 0) {
    cut_done();
    return;
  }
  for (size_t i = 0; i < st.peers.shards.size(); ++i)
    // Each shard writes shard_checkpoint_dir(dir, i) itself, derived from
    // its own checkpoint root: the message names the epoch, never a path.
    self->request(st.peers.shards[i], caf::infinite, checkpoint_atom::value, epoch)
        .then(
            [self, missing, cut_done](ok_atom) {
              if (self->state.failed) return;
              if (--*missing == 0) cut_done();
            },
            [self](caf::error& err) { fail_checkpoint(self, std::move(err)); });
}

// The end of training (data exhausted or a stop): a final checkpoint if
// configured, then the graceful stop. The final checkpoint is complete
// before the drain begins.
void end_training_now(coordinator_pointer self);

// Clients' pushes (the gateway) stop before the final cut: the gate is
// closed (new pushes are refused as "stopping"), and the pushes already
// inside are applied before `next` — so every acknowledged push is in the
// final checkpoint and the drain. The wait blocks, so it runs on a thread
// of its own, never on the scheduler's.
void after_client_pushes(coordinator_pointer self, std::function<void()> next) {
  auto gate = self->state.peers.client_pushes;
  if (!gate) {
    next();
    return;
  }
  gate->close();
  auto waiter = self->home_system().spawn<caf::detached>(
      [gate](caf::event_based_actor*) -> caf::behavior {
        return {[gate](drain_atom) {
          gate->wait_idle();
          return ok_atom::value;
        }};
      });
  self->request(waiter, caf::infinite, drain_atom::value)
      .then(
          [self, next, waiter](ok_atom) {
            caf::anon_send_exit(waiter, caf::exit_reason::user_shutdown);
            if (!self->state.failed) next();
          },
          [self, waiter](caf::error& err) {
            caf::anon_send_exit(waiter, caf::exit_reason::user_shutdown);
            fail(self, std::move(err));
          });
}

void end_training(coordinator_pointer self) {
  // Clients' pushes end first; a scale in progress commits next, so the
  // final checkpoint and the drain see the new map; a relocation still
  // waiting is refused (the drain writes every cache tier back).
  self->state.ending = true;
  after_client_pushes(self, [self] {
    at_cut(
        self,
        [self] {
          relocate_at_cut(
              self, [self] { end_training_now(self); }, true);
        },
        true);
  });
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

}  // namespace

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

// At a cut: a checkpoint when one is due and none is being written, then
// `next`.
void checkpoint_if_due(coordinator_pointer self, std::function<void()> next) {
  auto& s = self->state;
  if (checkpoint_due(s) && !s.writing)
    take_checkpoint(self, std::move(next));
  else
    next();
}

// At a cut that training goes on from: a scale commits, a relocation
// waiting runs, a checkpoint is taken if due, then `next`.
void cut_then(coordinator_pointer self, std::function<void()> next) {
  at_cut(
      self,
      [self, next] {
        relocate_at_cut(
            self, [self, next] { checkpoint_if_due(self, next); }, false);
      },
      false);
}

// Async mode: rounds until the data ends or a stop; a checkpoint at a
// round's end when one is due.
void async_round(coordinator_pointer self) {
  run_round(self, [self] {
    auto& s = self->state;
    if (s.peers.workers.empty() && !s.stop_requested) {
      // No workers: a store for clients' pushes (the gateway). Every moment
      // is a cut; wait for a stop, taking checkpoints when due.
      cut_then(self, [self] { self->delayed_send(self, idle_poll, idle_atom::value); });
      return;
    }
    if (all_finished(s) || s.stop_requested) {
      end_training(self);
      return;
    }
    cut_then(self, [self] { async_round(self); });
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
                cut_then(self, [self] { start_pass(self); });
              },
              pass_end_atom::value, self->state.pass);
        });
      },
      pass_start_atom::value, self->state.pass);
}

void on_progress(coordinator_pointer self, const progress_report& report) {
  auto& s = self->state;
  s.history.add(report.examples, report.loss_sum);
  s.progress.examples += report.examples;
  s.progress.batches += report.batches;
  s.progress.recent_loss = s.history.recent_loss();
  // The TTL clock: shards expire rows idle for shards.ttl_ticks batches.
  const uint64_t clock = s.plan.restored_batches + s.progress.batches;
  if (clock >= s.ttl_clock_sent + ttl_clock_step) {
    s.ttl_clock_sent = clock;
    for (const auto& shard : s.peers.shards)
      self->send(shard, tick_atom::value, static_cast<uint32_t>(clock));
  }
  if (s.sink) s.sink(s.progress);
}

}  // namespace strata::actors::coordinator_impl
