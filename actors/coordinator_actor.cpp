#include "actors/coordinator_actor.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <string>

#include "actors/cache_tier_actor.hpp"
#include "actors/dense_actor.hpp"
#include "actors/shard_actor.hpp"

namespace strata::actors {

void add_training_message_types(caf::actor_system_config& config) {
  config.add_message_type<worker_result>("strata::worker_result");
  config.add_message_type<training_summary>("strata::training_summary");
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
};

using coordinator_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

void fail(coordinator_pointer self, caf::error err) {
  auto& st = self->state;
  if (st.failed) return;
  st.failed = true;
  if (st.run) {
    st.run->deliver(std::move(err));
    st.run.reset();
  }
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
            },
            drain_atom::value);
      },
      drain_atom::value);
}

void start_pass(coordinator_pointer self);

// One round: every worker not yet finished runs (pass mode: pass_batches
// batches; async mode: to the end) and answers when its pushes are in.
void run_round(coordinator_pointer self, std::function<void()> next) {
  auto& st = self->state;
  const uint64_t grant =
      st.mode == training_mode::pass ? std::max<uint64_t>(st.pass_batches, 1) : 0;
  auto missing = std::make_shared<size_t>(0);
  for (size_t w = 0; w < st.peers.workers.size(); ++w)
    if (!st.finished[w]) ++*missing;
  if (*missing == 0) {
    next();
    return;
  }
  for (size_t w = 0; w < st.peers.workers.size(); ++w) {
    if (st.finished[w]) continue;
    self->request(st.peers.workers[w], caf::infinite, run_atom::value, grant)
        .then(
            [self, w, missing, next](const worker_result& result) {
              auto& s = self->state;
              if (s.failed) return;
              s.summary.batches += result.batches;
              s.summary.examples += result.examples;
              s.summary.loss_sum += result.loss_sum;
              s.finished[w] = result.finished;
              s.bad_lines[w] = result.bad_lines;  // a running total per worker
              if (--*missing == 0) next();
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  }
}

bool all_finished(const coordinator_state& st) {
  return std::all_of(st.finished.begin(), st.finished.end(), [](bool f) { return f; });
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
                if (all_finished(s))
                  finish(self);
                else
                  start_pass(self);
              },
              pass_end_atom::value, self->state.pass);
        });
      },
      pass_start_atom::value, self->state.pass);
}

coordinator_actor::behavior_type coordinator_behavior(coordinator_pointer self, training_mode mode,
                                                      uint64_t pass_batches,
                                                      coordinator_peers peers, progress_sink sink) {
  auto& st = self->state;
  st.mode = mode;
  st.pass_batches = pass_batches;
  st.peers = std::move(peers);
  st.sink = std::move(sink);
  st.finished.assign(st.peers.workers.size(), false);
  st.bad_lines.assign(st.peers.workers.size(), 0);
  return {
      [self](stats_atom) {
        return actor_stats{"coordinator", 0, static_cast<uint64_t>(self->mailbox().size())};
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
        if (s.mode == training_mode::pass)
          start_pass(self);
        else
          run_round(self, [self] { finish(self); });
        return promise;
      },
      [self](progress_atom, const progress_report& report) {
        auto& s = self->state;
        s.history.push_back({report.examples, report.loss_sum});
        s.progress.examples += report.examples;
        s.progress.batches += report.batches;
        if (!s.sink) return;
        const size_t n = std::min(recent_loss_batches, s.history.size());
        uint64_t examples = 0;
        double loss = 0;
        for (size_t i = s.history.size() - n; i < s.history.size(); ++i) {
          examples += s.history[i].examples;
          loss += s.history[i].loss_sum;
        }
        s.progress.recent_loss = examples == 0 ? 0 : loss / static_cast<double>(examples);
        s.sink(s.progress);
      },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, training_mode mode,
                                    uint64_t pass_batches, coordinator_peers peers,
                                    progress_sink sink) {
  return system.spawn(coordinator_behavior, mode, pass_batches, std::move(peers), std::move(sink));
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

expected<training_cluster> spawn_training_cluster(caf::actor_system& system,
                                                  const cluster_config& config,
                                                  const worker_seams& seams, progress_sink sink) {
  if (config.shards.empty() || config.caches.empty() || config.workers.empty())
    return error(errc::invalid_argument,
                 "cluster '" + config.name + "': needs at least one shard, cache tier and worker");
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
  for (const auto& shard : config.shards) {
    auto spawned = spawn_shard(system, shard);
    if (!spawned) return stop_on_error(spawned.err());
    cluster.shards.push_back(*spawned);
  }
  cluster.map = partition_map(config.partitions, static_cast<uint32_t>(cluster.shards.size()));
  for (const auto& cache : config.caches) {
    auto spawned = spawn_cache_tier(system, cache, config.mode, cluster.shards, cluster.map);
    if (!spawned) return stop_on_error(spawned.err());
    cluster.caches.push_back(*spawned);
  }
  cluster.dense = spawn_dense(
      system, config.dense,
      seams.initial_dense ? *seams.initial_dense : model::ctr_model(config.model).initial_dense());
  const row_layout& layout = config.table.layout;
  for (size_t w = 0; w < config.workers.size(); ++w) {
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
    std::shared_ptr<gradient_source> gradients =
        seams.gradients ? seams.gradients(wc) : make_model_gradients(config.model);
    cluster.workers.push_back(spawn_worker(system, wc, layout, std::move(peers), std::move(batches),
                                           std::move(gradients)));
  }
  cluster.coordinator = spawn_coordinator(
      system, config.mode, config.pass_batches,
      coordinator_peers{cluster.workers, cluster.caches, cluster.shards}, std::move(sink));
  return cluster;
}

}  // namespace strata::actors
