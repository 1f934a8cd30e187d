#include "monitoring/exporter.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <algorithm>
#include <caf/all.hpp>
#include <exception>
#include <mutex>
#include <optional>
#include <utility>

#include "actors/checkpoint.hpp"
#include "actors/foreign_thread.hpp"

namespace strata::monitoring {

// The scrape side: asks the watched actors (under the lock, each with a
// timeout) and renders the snapshot.
class exporter::collector : public prometheus::Collectable {
 public:
  collector(const exporter_config& config, const build_info& build)
      : timeout_(config.stats_timeout) {
    snapshot_.node = config.node;
    snapshot_.table = config.table;
    snapshot_.trains = config.trains;
    snapshot_.build = build;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (system_ != nullptr) refresh();
    if (transport_) snapshot_.transport = transport_();
    if (snapshot_.trains) {
      const auto r = actors::checkpoint_records();
      snapshot_.checkpoints = {
          r.completed, r.failures, r.bytes_total, r.last_unix_seconds, r.last_duration_seconds,
          r.last_bytes};
    }
    return to_families(snapshot_);
  }

  void watch(caf::actor_system& system, std::vector<actors::shard_actor> shards,
             std::vector<actors::cache_tier_actor> caches, std::vector<caf::actor> others) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (frozen_) return;
    system_ = &system;
    shards_.clear();
    for (auto& s : shards) shards_.push_back({std::move(s), std::nullopt});
    caches_ = std::move(caches);
    others_ = std::move(others);
    snapshot_.training.active = true;
  }

  // A shard spawned here at run time (a scale's): asked from now on.
  void watch_shard(actors::shard_actor shard) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (frozen_ || system_ == nullptr) return;
    shards_.push_back({std::move(shard), std::nullopt});
  }

  // A cache tier relocated here at run time (a drain's successor): asked
  // from now on.
  void watch_cache(actors::cache_tier_actor cache) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (frozen_ || system_ == nullptr) return;
    caches_.push_back(std::move(cache));
  }

  // Called when a watched shard exits (on its thread): stop asking it. One
  // that was told to (user_shutdown: a scale or drain retired it here; a
  // run that ends freezes or detaches first) leaves /metrics with its
  // series; one that failed keeps its last values.
  void shard_exited(const caf::actor_addr& who, const caf::error& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (frozen_ || system_ == nullptr) return;
    auto it = std::find_if(shards_.begin(), shards_.end(),
                           [&](const auto& w) { return w.handle.address() == who; });
    if (it == shards_.end()) return;
    const auto index = it->index;
    shards_.erase(it);
    if (reason != caf::exit_reason::user_shutdown || !index) return;
    // Another shard of this index may live here now (retired, then spawned
    // again): its series stays.
    for (const auto& w : shards_)
      if (w.index == index) return;
    std::erase_if(snapshot_.tiers,
                  [&](const auto& t) { return t.kind == "shard" && t.index == *index; });
  }

  // Called when a watched cache exits (on its thread): stop asking.
  void detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    system_ = nullptr;
    shards_.clear();
    caches_.clear();
    others_.clear();
  }

  void watch_transport(std::function<transport::transport_stats()> source) {
    std::lock_guard<std::mutex> lock(mutex_);
    transport_ = std::move(source);
  }

  void update_training(const actors::training_progress& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (frozen_) return;
    auto& t = snapshot_.training;
    t.examples = std::max(t.examples, p.examples);
    t.batches = std::max(t.batches, p.batches);
    t.loss = p.recent_loss;
    t.examples_per_s = p.examples_per_s;
    t.active = true;
  }

  void freeze(const actors::training_report& report) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Keep the transport's last counters; its bridge may stop now.
    if (transport_) snapshot_.transport = transport_();
    transport_ = nullptr;
    system_ = nullptr;
    shards_.clear();
    caches_.clear();
    others_.clear();
    frozen_ = true;
    for (const auto& final_stats : report.tiers) {
      auto it = find(final_stats.kind, final_stats.index);
      if (it == snapshot_.tiers.end())
        snapshot_.tiers.push_back(final_stats);
      else
        *it = monotonic_merge(*it, final_stats);
    }
    auto& t = snapshot_.training;
    t.examples = std::max(t.examples, report.examples);
    t.batches = std::max(t.batches, report.batches);
    t.loss = report.train_loss;
    t.examples_per_s = report.examples_per_s;
    if (report.heldout_examples > 0) t.heldout_auc = report.heldout_auc;
    t.active = false;
  }

 private:
  std::vector<actors::tier_stats>::iterator find(const std::string& kind, uint32_t index) const {
    return std::find_if(snapshot_.tiers.begin(), snapshot_.tiers.end(),
                        [&](const auto& t) { return t.kind == kind && t.index == index; });
  }

  // Requires the lock. Keeps the last answer of an actor that does not
  // answer in time.
  void refresh() const {
    // Declared first, so it runs after the scoped actor is gone: this is a
    // server thread, which outlives the actor system.
    actors::foreign_thread_scope foreign;
    caf::scoped_actor self{*system_};
    caf::actor_addr asked;  // the actor whose answer store() handles
    auto store = [&](actors::tier_stats& stats) {
      if (stats.kind == "shard")
        for (auto& w : shards_)
          if (w.handle.address() == asked) w.index = stats.index;
      auto it = find(stats.kind, stats.index);
      if (it == snapshot_.tiers.end())
        snapshot_.tiers.push_back(std::move(stats));
      else
        *it = monotonic_merge(*it, stats);
    };
    auto ask = [&](const auto& handle) {
      asked = handle.address();
      self->request(handle, timeout_, actors::stats_atom::value)
          .receive([&](actors::tier_stats& stats) { store(stats); },
                   [&](caf::error&) { ++snapshot_.stats_failures; });
    };
    const auto shards = shards_;  // store() writes the indices
    for (const auto& s : shards) ask(s.handle);
    for (const auto& c : caches_) ask(c);
    // Workers, the dense actor, the coordinator: mailbox depths only.
    snapshot_.actors.clear();
    for (const auto& a : others_) {
      self->request(a, timeout_, actors::stats_atom::value)
          .receive(
              [&](actors::actor_stats& stats) { snapshot_.actors.push_back(std::move(stats)); },
              [&](caf::error&) { ++snapshot_.stats_failures; });
    }
    std::sort(snapshot_.tiers.begin(), snapshot_.tiers.end(), [](const auto& a, const auto& b) {
      if (a.kind != b.kind) return a.kind > b.kind;  // shards first
      return a.index < b.index;
    });
  }

  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  mutable node_snapshot snapshot_;
  caf::actor_system* system_ = nullptr;
  struct watched_shard {
    actors::shard_actor handle;
    std::optional<uint32_t> index;  // from its first answer
  };
  mutable std::vector<watched_shard> shards_;
  std::vector<actors::cache_tier_actor> caches_;
  std::vector<caf::actor> others_;
  bool frozen_ = false;
  std::function<transport::transport_stats()> transport_;
};

struct exporter::impl {
  std::shared_ptr<collector> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string bind_address;
  uint16_t port = 0;
};

expected<std::unique_ptr<exporter>> exporter::start(const exporter_config& config,
                                                    const build_info& build) {
  std::unique_ptr<exporter> e(new exporter());
  e->impl_ = std::make_unique<impl>();
  e->impl_->metrics = std::make_shared<collector>(config, build);
  e->impl_->bind_address = config.bind_address;
  const std::string listen = config.bind_address + ":" + std::to_string(config.port);
  try {
    e->impl_->exposer = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& ex) {
    // The library's text ("null context when constructing CivetServer")
    // names neither the port nor the field: say them first.
    return error(errc::io_error, "metrics.port " + std::to_string(config.port) + " (" + listen +
                                     "): cannot serve /metrics: is the port in use? (metrics.port: "
                                     "0 turns metrics off; the server said: " +
                                     ex.what() + ")");
  }
  const auto ports = e->impl_->exposer->GetListeningPorts();
  if (ports.empty())
    return error(errc::io_error, "metrics: " + listen + ": the server listens on no port");
  e->impl_->port = static_cast<uint16_t>(ports.front());
  e->impl_->exposer->RegisterCollectable(e->impl_->metrics);
  return e;
}

exporter::~exporter() {
  // Stop serving before the collector goes (the exposer holds it weakly).
  if (impl_) impl_->exposer.reset();
}

uint16_t exporter::port() const { return impl_->port; }

std::string exporter::url() const {
  return "http://" + impl_->bind_address + ":" + std::to_string(impl_->port) + "/metrics";
}

void exporter::watch(caf::actor_system& system, const std::vector<actors::shard_actor>& shards,
                     const std::vector<actors::cache_tier_actor>& caches,
                     const std::vector<caf::actor>& others) {
  std::weak_ptr<collector> weak = impl_->metrics;
  auto on_exit = [weak] {
    if (auto c = weak.lock()) c->detach();
  };
  impl_->metrics->watch(system, shards, caches, others);
  // An actor that has already exited runs the functor at once.
  for (const auto& s : shards) attach_shard(s);
  for (const auto& c : caches) caf::actor_cast<caf::actor>(c)->attach_functor(on_exit);
}

void exporter::watch_cache(const actors::cache_tier_actor& cache) {
  impl_->metrics->watch_cache(cache);
}

void exporter::watch_shard(const actors::shard_actor& shard) {
  impl_->metrics->watch_shard(shard);
  attach_shard(shard);
}

void exporter::attach_shard(const actors::shard_actor& shard) {
  std::weak_ptr<collector> weak = impl_->metrics;
  auto handle = caf::actor_cast<caf::actor>(shard);
  handle->attach_functor([weak, who = handle.address()](const caf::error& reason) {
    if (auto c = weak.lock()) c->shard_exited(who, reason);
  });
}

void exporter::watch_transport(std::function<transport::transport_stats()> source) {
  impl_->metrics->watch_transport(std::move(source));
}

void exporter::update_training(const actors::training_progress& progress) {
  impl_->metrics->update_training(progress);
}

void exporter::freeze(const actors::training_report& report) { impl_->metrics->freeze(report); }

void exporter::detach() { impl_->metrics->detach(); }

}  // namespace strata::monitoring
