// The node's Prometheus endpoint: serves /metrics (prometheus-cpp's
// exposer, an HTTP server on its own threads) from start-up to shutdown.
//
// Instrumentation stays out of the algorithms: shards and cache tiers count
// in plain counters they own, and at scrape time the exporter asks each of
// them for its tier_stats (stats_atom, a short timeout each) and turns the
// answers into metric families (catalogue.hpp). An actor that does not
// answer in time is served from its last answer, so counters never
// decrease. After training, freeze() fixes the final values (the run's
// report) and the exporter stops asking actors: the node keeps serving them
// for its linger period, and the actors may stop.
//
// Lifecycle: start() binds the port (an error names it); watch() once the
// cluster is spawned; update_training() from the progress callback;
// freeze() with the final report; destroying the exporter stops the HTTP
// server. If the watched caches exit before freeze() (a failed run), the
// exporter detaches from them by itself and serves the last snapshot.
// Shards follow the node's hosting: watch_shard() adds one a scale spawned
// here, and a shard retired here (told to exit) leaves /metrics.
//
// Thread-safety: every member function may be called from any thread;
// scrapes run on the exposer's threads. One lock guards the snapshot; it is
// never taken on a hot path (actors are only asked at scrape time).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/local_cluster.hpp"
#include "actors/protocol.hpp"
#include "common/error.hpp"
#include "monitoring/catalogue.hpp"

namespace strata::monitoring {

struct exporter_config {
  std::string bind_address = "127.0.0.1";  // an IPv4 address, or an IPv6 one in brackets
  uint16_t port = 9464;                    // 0: any free port (see exporter::port())
  std::string node = "local";              // label `node` on every series
  std::string table;                       // label `table` on tier series
  // False on a node of several that does not run the coordinator: no
  // training or checkpoint series (it knows neither).
  bool trains = true;
  // How long a scrape waits for each actor's stats before serving its last
  // answer.
  std::chrono::milliseconds stats_timeout{1000};
};

class exporter {
 public:
  // Starts the HTTP server; errors when the address cannot be bound.
  static expected<std::unique_ptr<exporter>> start(const exporter_config& config,
                                                   const build_info& build);
  ~exporter();
  exporter(const exporter&) = delete;
  exporter& operator=(const exporter&) = delete;

  // The port the server listens on (the chosen one when config.port was 0).
  uint16_t port() const;
  // "http://127.0.0.1:9464/metrics"
  std::string url() const;

  // Scrapes from now on ask these actors. `system` must outlive them.
  // `others` (workers, the dense actor, the coordinator) are asked for
  // their mailbox depth only.
  void watch(caf::actor_system& system, const std::vector<actors::shard_actor>& shards,
             const std::vector<actors::cache_tier_actor>& caches,
             const std::vector<caf::actor>& others = {});
  // A shard spawned on this node at run time (a scale placed it here):
  // scraped from now on, with its `shard` label. A shard told to exit (a
  // scale or drain retired it) is no longer asked and its series leave
  // /metrics at once (Prometheus marks them stale at its next scrape); one
  // that fails keeps its last values. No-op before watch() or after
  // freeze()/detach().
  void watch_shard(const actors::shard_actor& shard);
  // A cache tier relocated to this node at run time (a drain moved it from
  // a node that left): scraped from now on, with its `cache` label. No-op
  // before watch() or after freeze()/detach().
  void watch_cache(const actors::cache_tier_actor& cache);
  // Scrapes from now on also export this node's transport counters
  // (strata_transport_*); `source` is called at scrape time from the
  // exporter's threads (node_bridge::stats() is thread-safe) until
  // freeze(), which keeps its last values.
  void watch_transport(std::function<transport::transport_stats()> source);
  // Running training totals (the launch's progress callback); marks
  // training active.
  void update_training(const actors::training_progress& progress);
  // The run is over: serve the report's values (merged so that no counter
  // served before decreases) and stop asking actors.
  void freeze(const actors::training_report& report);
  // The actor system is about to go (a failed run has no freeze()): stop
  // asking its actors; scrapes serve the last snapshot from now on.
  void detach();

  class collector;  // the prometheus::Collectable (exporter.cpp)

 private:
  exporter() = default;
  void attach_shard(const actors::shard_actor& shard);
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::monitoring
