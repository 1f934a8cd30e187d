// One node's part in a cluster of several nodes (a manifest's `nodes`
// list, docs/multi-node.md). Every node runs `strata node` with the same
// manifest; this class is what makes the processes one cluster:
//
// - Transport: the node's UCX bridge (transport/node_bridge.hpp) listens on
//   its nodes[i].host:transport_port; it connects to every node listed
//   before it (retrying while they start) and waits for every node listed
//   after it to connect, until transport.join_timeout_seconds.
// - Placement: shards, cache tiers and workers live on the nodes the
//   manifest's placement gives them (shard_nodes, cache_nodes,
//   worker_nodes); the first node runs the coordinator and the dense model.
//   Actors elsewhere are reached through proxies with the same typed
//   interface, so the actor code is the single-node code.
// - Join: a node holds its peers' frames until it has exported its actors
//   under fixed target numbers (a worker elsewhere pulls the dense model as
//   soon as it is spawned), then answers a readiness echo; the
//   coordinator's node starts training only once every node answers it.
//   The answer carries the node's manifest fingerprint: a node started from
//   another manifest makes the coordinator's node fail, naming it.
// - Standby nodes (nodes[i].standby, docs/multi-node.md "Nodes that join
//   later"): the others neither dial nor wait for them, and they host
//   nothing at start. Started later, a standby node dials every node that
//   is not standby (two standby nodes do not connect to each other), exports
//   through the same join(), and sends the coordinator's node a `joined`
//   notice with its manifest fingerprint: compared there, it is logged as
//   joined or refused (naming both fingerprints). It then serves like any
//   member until it is told `finished`; one that dies holding nothing is
//   logged and training goes on (multi_node_join.cpp).
// - End: a member node serves until the coordinator's node tells it that
//   training ended and everything is drained (a `finished` notice, answered
//   before the coordinator's node says goodbye): a clean end. Losing the
//   coordinator's node before that (crash, network) is an error naming it. A node that loses any peer logs
//   it (the bridge's log line names the node and the reason); requests to
//   it fail with that error, so training fails instead of hanging.
//
// Thread-safety: place/join/serve_until_done run on the node's main thread;
// request_stop() may be called from a signal thread.
#pragma once

#include <caf/fwd.hpp>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "actors/local_cluster.hpp"
#include "common/error.hpp"
#include "deploy/manifest.hpp"
#include "deploy/node_spawner.hpp"
#include "transport/remote_actors.hpp"

namespace strata::deploy {

// Target numbers of a cluster's exported actors (the same on every node).
namespace targets {
inline constexpr uint32_t ready = 1;  // echo: the node has exported everything
inline constexpr uint32_t dense = 2;
inline constexpr uint32_t finished = 3;  // notice: the coordinator's node is done with this one
inline constexpr uint32_t joined = 4;    // notice: a standby node joins (its manifest fingerprint)
inline constexpr uint32_t spawner = 5;  // spawn_shard / retire_shard (deploy/node_spawner.hpp)
inline constexpr uint32_t shard_base = 0x10000;
inline constexpr uint32_t cache_base = 0x20000;
inline constexpr uint32_t worker_base = 0x30000;
}  // namespace targets

class node_membership {
 public:
  // `node` must be one of m.nodes (an error lists them otherwise).
  static expected<std::unique_ptr<node_membership>> create(const manifest& m,
                                                           const std::string& node);
  ~node_membership();

  const std::string& name() const { return me_; }
  const std::string& coordinator_node() const { return coordinator_; }
  bool runs_coordinator() const { return me_ == coordinator_; }
  // A standby node: joins the running cluster (nodes[i].standby).
  bool standby() const { return m_.nodes[my_index_].standby; }
  // Which shards this node hosts (index -> bool): what it clears, restores
  // and exports.
  const std::vector<bool>& hosted_shards() const { return hosted_shards_; }
  // "shards 1, 4; cache tiers 1; workers 1, 4" for the start-up line.
  std::string describe() const;

  // cluster_hooks::place: starts the transport, connects to every peer and
  // returns the placement (proxies for everything hosted elsewhere).
  expected<actors::cluster_placement> place(caf::actor_system& system);
  // cluster_hooks::join: exports this node's actors; on the coordinator's
  // node, waits until every peer has exported its own.
  status join(const actors::training_cluster& cluster);
  // cluster_hooks::serve_until_done (member nodes).
  status serve_until_done();
  // A stop signal: aborts a join in progress (the node exits with an
  // error). A member keeps serving until the coordinator's node has
  // finished its graceful stop, which needs the member's shards.
  void request_stop();

  // Null before place().
  transport::node_bridge* bridge() { return transport_ ? &transport_->bridge() : nullptr; }
  // Where shards live now, new ones included (null before place()).
  const node_spawner* spawner() const { return spawner_.get(); }
  // cluster_hooks::shutdown: on the coordinator's node after a successful
  // run, tells every member it is done with it (each answers once told);
  // then says goodbye to the peers (the end of this node's part).
  void finish(bool ok);
  void stop();
  // The coordinator's node, once a drain moved every shard off `node`
  // (docs/multi-node.md "Draining a node"): tells it the coordinator's
  // node is done with it (the `finished` notice; it exits 0) and expects
  // its departure. Errors if it does not acknowledge.
  status release(const std::string& node);
  // Nodes released so far (strata status: "left (drained)").
  std::vector<std::string> left() const;

 private:
  node_membership() = default;
  void on_peer(const std::string& peer, bool up, const std::string& reason);
  bool stopping() const;
  bool is_standby(const std::string& node) const;
  // A standby node, once it exported everything: the `joined` notice to the
  // coordinator's node (multi_node_join.cpp).
  status announce_join();
  // The coordinator's node: answers a standby node's `joined` notice.
  expected<std::vector<std::byte>> on_joined(const std::string& peer,
                                             std::span<const std::byte> payload);
  // The coordinator's node: whether `peer` must be told `finished` (a
  // standby node only once it joined).
  bool expects_finish(const std::string& peer) const;
  // The coordinator's node: sends `node` the finished notice; the answer
  // is empty once it acknowledged, else why not (acknowledged() waits
  // finish_timeout for it).
  std::future<std::string> tell_finished(const std::string& node);
  static std::string acknowledged(std::future<std::string>& answer);
  // The coordinator's node: a standby node went down (logged; a node
  // holding nothing leaves training alone).
  void standby_gone(const std::string& peer, const std::string& reason);
  // " (standby nodes that may join later: n3, n4)", or "".
  std::string standby_note() const;

  manifest m_;
  std::string me_, coordinator_;
  size_t my_index_ = 0;
  std::vector<bool> hosted_shards_;
  uint64_t fingerprint_ = 0;  // of the manifest file (size and CRC32C)
  auth::secret secret_;       // cluster_secret: what this node proves to its peers
  std::unique_ptr<transport::node_transport> transport_;
  std::unique_ptr<node_spawner> spawner_;  // after transport_: stops first
  std::chrono::steady_clock::time_point deadline_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  bool coordinator_gone_ = false;
  bool finished_ = false;  // the coordinator's node is done with this node
  bool ending_ = false;    // the coordinator's node: the run is over (peers leave)
  std::set<std::string> joined_;  // the coordinator's node: standby nodes that joined
  std::set<std::string> left_;    // the coordinator's node: nodes released by a drain
  std::string coordinator_reason_;
};

}  // namespace strata::deploy
