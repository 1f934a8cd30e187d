// The admin API of the coordinator's node: HTTP/1.1 (Boost.Beast) on the
// manifest's admin port, loopback unless the manifest binds elsewhere.
// Every request needs `Authorization: Bearer <token>` (401 without it).
//
//   GET  /status      JSON: nodes and their health, shards with their
//                     partitions and rows per tier, cache tiers, the
//                     partition map's epoch, training progress
//   POST /scale       {"shards": N, "placement": ["node", ...]} (placement
//                     optional: one known node name per shard, or "spread");
//                     answers once the new map is committed
//   POST /drain       {"node": "n2"}: every shard on the node moves to
//                     other connected nodes (copy, fence, commit), then the
//                     node is told it may leave; answers once it has
//   POST /checkpoint  a checkpoint at the next cut; answers its directory
//   POST /stop        graceful stop at the next cut (202)
//
// Bad requests (malformed JSON, unknown fields, impossible targets) get a
// 4xx with {"error": "..."}; an unknown path 404; a wrong method 405.
//
// Threads: one accepts; each connection is served on a thread of its own
// (a scale may take long; /status stays answerable meanwhile), keep-alive;
// requests to the actors are blocking scoped_actor requests with a
// deadline. Connections go through serving/connection_limits.hpp: capped,
// closed when idle or slow (a request must arrive within idle_timeout),
// accept backs off when out of descriptors. stop() (or the destructor)
// closes the port and every connection and joins every thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/training_protocol.hpp"
#include "common/error.hpp"
#include "serving/connection_limits.hpp"
#include "transport/transport_stats.hpp"

namespace strata::deploy {

struct admin_node {
  std::string name;
  std::string host;
  bool standby = false;  // may join later (nodes[i].standby)
};

struct admin_config {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see admin_server::port())
  std::string token;  // required, non-empty
  std::string cluster;
  std::vector<admin_node> nodes;  // the manifest's nodes; the first is this one
  // The node of each shard and cache tier by index (the manifest's
  // placement; missing: the first node).
  std::vector<std::string> shard_nodes, cache_nodes, worker_nodes;
  // Set (a node of several): where every shard lives now, shards a scale
  // spawned on other nodes included; overrides shard_nodes.
  std::function<std::vector<std::string>()> current_shard_nodes;
  // The transport's view of the other nodes (a node of several): their
  // health in /status. Unset: they show as "unknown".
  std::function<transport::transport_stats()> transport;
  // Set (the coordinator's node of several): /drain tells a node with no
  // shard left that it may leave; `left` lists the nodes that did (their
  // health: "left (drained)").
  std::function<status(const std::string& node)> release_node;
  std::function<std::vector<std::string>()> left_nodes;
  // The training rate the progress line shows (examples/s; unset or 0: not
  // known yet), and the plan: examples over every epoch, epochs per worker
  // (0: unknown).
  std::function<double()> examples_per_second;
  uint64_t planned_examples = 0;
  uint32_t epochs = 0;
  // Examples trained before a resume (part of planned_examples; the
  // coordinator counts this run's).
  uint64_t restored_examples = 0;
  // How long a request may wait for the actors (a scale waits for its commit).
  uint32_t request_timeout_seconds = 600;
  // Connections (serving/connection_limits.hpp): at most 64 open (more are
  // answered 503 and closed), a request must arrive within 10 s of the
  // connection or of the previous answer, and answering one may take
  // request_timeout (longer than request_timeout_seconds: start refuses
  // less).
  serving::connection_settings connections{64, std::chrono::seconds(10), std::chrono::seconds(630),
                                           uint64_t{16} << 20};
};

class admin_server {
 public:
  // Binds the port (errors name address and port) and starts serving.
  static expected<std::unique_ptr<admin_server>> start(const admin_config& config,
                                                       caf::actor_system& system,
                                                       actors::coordinator_actor coordinator);
  ~admin_server();
  admin_server(const admin_server&) = delete;
  admin_server& operator=(const admin_server&) = delete;

  uint16_t port() const;
  std::string url() const;  // http://address:port
  void stop();
  // The connection counters (open, refused over the cap, timeouts, ...).
  serving::connection_stats connections() const;

  struct impl;

 private:
  explicit admin_server(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::deploy
