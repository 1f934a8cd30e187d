#include "actors/local_cluster.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <string>

#include "actors/coordinator_actor.hpp"
#include "actors/error.hpp"
#include "model/ctr_model.hpp"
#include "model/metrics.hpp"
#include "model/reader.hpp"
#include "tiers/row.hpp"

namespace strata::actors {
namespace {

using clock_type = std::chrono::steady_clock;

// Batch size of the held-out evaluation (pulls per shard per batch).
constexpr size_t eval_batch_examples = 4096;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

error from_caf(caf::actor_system& system, const caf::error& err, const std::string& what) {
  return error(code_of(system, err, errc::io_error), what + ": " + describe(system, err));
}

// How long a step of the runner after training (the map, a held-out pull,
// a tier's stats) waits for an actor: no step on the way to the exit waits
// forever (issue 15). Training itself (run_atom) has no bound.
constexpr std::chrono::seconds step_timeout{60};

// Blocking request from the runner (not a hot path: a handful per run, or
// one per shard per evaluation batch); `timeout` as above.
template <class T, class Handle, class... Ts>
expected<T> ask_within(caf::scoped_actor& self, caf::duration timeout, const Handle& target,
                       const std::string& what, Ts&&... message) {
  std::optional<T> value;
  std::optional<error> failure;
  self->request(target, timeout, std::forward<Ts>(message)...)
      .receive([&](T& reply) { value = std::move(reply); },
               [&](caf::error& err) {
                 if (err == caf::sec::request_timeout)
                   failure =
                       error(errc::unavailable, what + ": no answer within " +
                                                    std::to_string(step_timeout.count()) + " s");
                 else
                   failure = from_caf(self->system(), err, what);
               });
  if (failure) return *failure;
  return std::move(*value);
}

template <class T, class Handle, class... Ts>
expected<T> ask(caf::scoped_actor& self, const Handle& target, const std::string& what,
                Ts&&... message) {
  return ask_within<T>(self, caf::duration{step_timeout}, target, what,
                       std::forward<Ts>(message)...);
}

struct heldout_result {
  double auc = 0;
  double logloss = 0;
  uint64_t examples = 0;
  uint64_t bad_lines = 0;  // in the held-out window (the workers count theirs)
};

// Predicts the held-out window with the trained rows (pulled from their
// shards, authoritative after the drain) and the dense actor's weights.
expected<heldout_result> evaluate(caf::scoped_actor& self, const cluster_config& config,
                                  const training_cluster& cluster) {
  heldout_result out;
  if (config.heldout.path.empty()) return out;
  auto reader = model::reader::open(config.heldout);
  if (!reader) return reader.err();
  auto dense = ask<dense_weights>(self, cluster.dense, "pull_dense", pull_dense_atom::value);
  if (!dense) return dense.err();
  const model::ctr_model model(config.model);
  const row_layout& layout = config.table.layout;
  const uint32_t dim = layout.dim;
  const size_t record_bytes = layout.record_bytes();
  std::vector<float> predictions;
  std::vector<float> labels;
  std::vector<float> rows;
  while (config.heldout_examples == 0 || out.examples < config.heldout_examples) {
    size_t want = eval_batch_examples;
    if (config.heldout_examples != 0)
      want = std::min<uint64_t>(want, config.heldout_examples - out.examples);
    auto batch = (*reader)->next_batch(want);
    if (!batch) return batch.err();
    if (batch->examples.empty()) break;
    const auto keys = batch->keys();
    rows.assign(keys.size() * dim, 0.0f);
    const auto groups = cluster.map.group(keys);
    for (size_t s = 0; s < groups.size(); ++s) {
      if (groups[s].empty()) continue;
      std::vector<uint64_t> shard_keys;
      shard_keys.reserve(groups[s].size());
      for (uint32_t pos : groups[s]) shard_keys.push_back(keys[pos]);
      auto reply =
          ask<pull_reply>(self, cluster.shards[s], "held-out pull from shard " + std::to_string(s),
                          pull_atom::value, std::move(shard_keys));
      if (!reply) return reply.err();
      if (reply->rows.records.size() != groups[s].size() * record_bytes)
        return error(errc::corrupt_data, "held-out pull from shard " + std::to_string(s) +
                                             ": reply size does not match the request");
      const auto* records = reinterpret_cast<const std::byte*>(reply->rows.records.data());
      for (size_t j = 0; j < groups[s].size(); ++j) {
        const float* w = weights_of(records + j * record_bytes);
        std::copy(w, w + dim, rows.data() + size_t{groups[s][j]} * dim);
      }
    }
    auto p = model.predict(*batch, rows, dense->weights);
    predictions.insert(predictions.end(), p.begin(), p.end());
    for (const auto& e : batch->examples) labels.push_back(e.label);
    out.examples += batch->examples.size();
  }
  if (!predictions.empty()) {
    out.auc = model::auc(predictions, labels);
    out.logloss = model::logloss(predictions, labels);
  }
  out.bad_lines = (*reader)->bad_lines().size();
  return out;
}

// A member node of a multi-node cluster: its actors work for the
// coordinator's node until that node is done; then the report holds this
// node's own tiers.
expected<training_report> serve_as_member(caf::scoped_actor& self, const training_cluster& cluster,
                                          clock_type::time_point start,
                                          const cluster_hooks& hooks) {
  if (hooks.serve_until_done) {
    if (auto served = hooks.serve_until_done(); !served) return served.err();
  }
  training_report report;
  report.seconds = seconds_since(start);
  for (size_t s = 0; s < cluster.shards.size(); ++s) {
    if (!cluster.shard_here[s]) continue;
    auto stats = ask<tier_stats>(self, cluster.shards[s], "stats of shard " + std::to_string(s),
                                 stats_atom::value);
    // Exited: a drain moved it to another node and retired it here.
    if (!stats && stats.err().message().find("request_receiver_down") != std::string::npos)
      continue;
    if (!stats) return stats.err();
    report.stored_keys += stats->lmdb_rows;
    report.tiers.push_back(std::move(*stats));
  }
  for (size_t c = 0; c < cluster.caches.size(); ++c) {
    if (!cluster.cache_here[c]) continue;
    auto stats = ask<tier_stats>(self, cluster.caches[c], "stats of cache " + std::to_string(c),
                                 stats_atom::value);
    if (!stats) return stats.err();
    report.tiers.push_back(std::move(*stats));
  }
  if (hooks.finished) hooks.finished(report);
  return report;
}

expected<training_report> train(caf::actor_system& system, const cluster_config& config,
                                const progress_callback& progress, const cluster_hooks& hooks) {
  const auto start = clock_type::now();
  auto last_call = start;
  progress_sink sink;
  if (progress)
    sink = [&progress, start, last_call,
            interval = hooks.progress_interval_s](const training_progress& totals) mutable {
      const auto now = clock_type::now();
      if (std::chrono::duration<double>(now - last_call).count() < interval) return;
      last_call = now;
      training_progress p = totals;
      p.seconds = std::chrono::duration<double>(now - start).count();
      p.examples_per_s = p.seconds > 0 ? static_cast<double>(p.examples) / p.seconds : 0;
      progress(p);
    };
  cluster_placement placement;
  if (hooks.place) {
    auto placed = hooks.place(system);
    if (!placed) return placed.err();
    placement = std::move(*placed);
  }
  auto cluster = spawn_training_cluster(system, config, {}, std::move(sink), placement);
  if (!cluster) return cluster.err();
  caf::scoped_actor self{system};
  struct stopper {
    training_cluster& cluster;
    ~stopper() { cluster.stop(); }
  } stop_at_exit{*cluster};
  if (hooks.started) hooks.started(system, *cluster);
  if (hooks.join) {
    if (auto joined = hooks.join(*cluster); !joined) return joined.err();
  }
  if (!placement.coordinator) return serve_as_member(self, *cluster, start, hooks);

  auto summary = ask_within<training_summary>(self, caf::infinite, cluster->coordinator, "training",
                                              run_atom::value);
  if (!summary) return summary.err();
  training_report report;
  report.seconds = seconds_since(start);
  report.examples = summary->examples;
  report.batches = summary->batches;
  report.examples_per_s =
      report.seconds > 0 ? static_cast<double>(report.examples) / report.seconds : 0;
  report.train_loss = summary->tail_loss;
  report.bad_lines = summary->bad_lines;
  report.checkpoints = summary->checkpoints;
  report.last_checkpoint = summary->last_checkpoint;
  report.stopped = summary->stopped;

  // The map and shards as they are now: a scale may have moved partitions,
  // added shards and retired some of the first ones.
  auto status = ask<cluster_status>(self, cluster->coordinator, "map", map_atom::value);
  if (!status) return status.err();
  training_cluster current = *cluster;
  current.map = partition_map(status->routing.epoch, status->routing.owners,
                              static_cast<uint32_t>(status->routing.shards.size()));
  current.shards.clear();
  for (const auto& s : status->routing.shards)
    current.shards.push_back(caf::actor_cast<shard_actor>(s));

  auto heldout = evaluate(self, config, current);
  if (!heldout) return heldout.err();
  report.heldout_auc = heldout->auc;
  report.heldout_logloss = heldout->logloss;
  report.heldout_examples = heldout->examples;
  report.bad_lines += heldout->bad_lines;

  // Read after the evaluation (whose pulls the shards count too), so the
  // report and a node's final /metrics agree.
  // After the drain every stored row is in its shard's LMDB environment.
  for (size_t s = 0; s < current.shards.size(); ++s) {
    auto stats = ask<tier_stats>(self, current.shards[s], "stats of shard " + std::to_string(s),
                                 stats_atom::value);
    if (!stats) return stats.err();
    report.stored_keys += stats->lmdb_rows;
    report.tiers.push_back(std::move(*stats));
  }
  // The cache tiers as they are now: a drain may have relocated some to
  // this node (their first actors left with their node).
  for (size_t c = 0; c < status->caches.size(); ++c) {
    auto stats = ask<tier_stats>(self, caf::actor_cast<cache_tier_actor>(status->caches[c]),
                                 "stats of cache " + std::to_string(c), stats_atom::value);
    if (!stats) return stats.err();
    report.tiers.push_back(std::move(*stats));
  }

  if (hooks.finished) hooks.finished(report);
  return report;
}

}  // namespace

expected<training_report> run_local_cluster(const cluster_config& config,
                                            const progress_callback& progress,
                                            const cluster_hooks& hooks) {
  caf::actor_system_config system_config;
  add_message_types(system_config);
  add_training_message_types(system_config);
  if (config.threads != 0)
    system_config.set("scheduler.max-threads", static_cast<size_t>(config.threads));
  caf::actor_system system{system_config};
  auto report = train(system, config, progress, hooks);
  if (hooks.shutdown) hooks.shutdown(static_cast<bool>(report));
  return report;
}

}  // namespace strata::actors
