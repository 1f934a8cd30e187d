// Remote actors: the CAF side of the transport. A node_transport owns this
// node's node_bridge and
// - exports local actors (a shard, a cache tier, the dense actor) under a target number,
//   so peers can reach them: requests arriving for a target are decoded
//   and sent to the actor by a relay actor, in the order the peer sent
//   them; the actor's reply (or error) goes back as a reply frame;
// - creates proxies of remote actors: a local actor with the same typed
//   interface (shard_actor, cache_tier_actor, dense_actor) that encodes each request into a
//   frame and delivers the decoded reply to the waiting requester (a CAF
//   response promise). Actor code cannot tell a proxy from a local actor,
//   except that a request to a node that is down fails with an error
//   naming the node (errc::unavailable) instead of waiting forever.
//
// Requests to one proxy are sent in mailbox order; a proxy blocks its
// scheduler thread while the peer's outstanding-bytes window is full
// (back-pressure reaches the senders; memory stays bounded).
//
// Thread-safety: all methods are thread-safe. Lifetime: stop() (or the
// destructor) stops the bridge, failing pending requests; the actor system
// must outlive the node_transport.
#pragma once

#include <caf/all.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/protocol.hpp"
#include "actors/training_protocol.hpp"
#include "transport/node_bridge.hpp"

namespace strata::transport {

using frame_ptr = std::shared_ptr<const inbound_frame>;

// Maps shard handles to (node, target) and back, for the routing tables and
// migration orders that travel between nodes (remote_actors.cpp).
class actor_directory;

class node_transport {
 public:
  // hold_inbound: requests and one-way frames from peers wait, in arrival
  // order, until release_inbound() (a node starting up: peers may send to
  // actors it has not exported yet).
  static expected<std::unique_ptr<node_transport>> start(caf::actor_system& system,
                                                         bridge_config config,
                                                         node_bridge::peer_handler on_peer = {},
                                                         bool hold_inbound = false);
  ~node_transport();

  node_bridge& bridge() { return *bridge_; }

  // Makes a local actor reachable by peers as `target` (unique per node).
  void export_shard(uint32_t target, actors::shard_actor shard);
  void export_dense(uint32_t target, actors::dense_actor dense);
  void export_cache(uint32_t target, actors::cache_tier_actor cache);
  // A worker run by a peer's coordinator: its progress reports go back to
  // that peer (worker_progress frames), ahead of the run's reply.
  void export_worker(uint32_t target, actors::worker_actor worker);
  // Answers echo frames to `target` with their payload and drops sink
  // frames (tests and benchmarks of the transport itself).
  void export_echo(uint32_t target);
  // Echo frames to `target` call `notice(peer, payload)` (on the bridge's
  // progress thread: it must return quickly) and are answered with what it
  // returns: the reply's payload, or an error text the peer's request
  // fails with.
  using notice_fn = std::function<expected<std::vector<std::byte>>(
      const std::string& peer, std::span<const std::byte> payload)>;
  void export_notice(uint32_t target, notice_fn notice);
  // A node's spawner (deploy/node_spawner.hpp): spawn_shard frames to
  // `target` call `spawn(index)`, retire_shard frames `retire(index, done)`,
  // each on an actor's thread (not the bridge's); the reply is ok or the
  // error's text.
  using spawn_fn = std::function<status(uint32_t index)>;
  using retire_fn = std::function<void(uint32_t index, std::function<void(status)> done)>;
  void export_spawner(uint32_t target, spawn_fn spawn, retire_fn retire);
  // Stops exporting `target` (a retired shard); returns the shard actor
  // that was exported there (null if none).
  caf::actor unexport_shard(uint32_t target);
  // Delivers the frames held since start (in order), then every frame as
  // it arrives. Idempotent.
  void release_inbound();

  // A local proxy for the actor exported as `target` on node `peer`
  // (shards: one per (peer, target), the same one routing tables resolve to).
  actors::shard_actor remote_shard(const std::string& peer, uint32_t target);
  actors::dense_actor remote_dense(const std::string& peer, uint32_t target);
  // (Cache tiers: one per (peer, target), as for shards: a worker told its
  // relocated cache tiers gets the same one.)
  actors::cache_tier_actor remote_cache(const std::string& peer, uint32_t target);
  // Its progress reports reach the sender of run (a coordinator_actor).
  actors::worker_actor remote_worker(const std::string& peer, uint32_t target);

  void stop();

 private:
  node_transport(caf::actor_system& system) : system_(system) {}
  void on_inbound(inbound_frame frame);
  void dispatch(inbound_frame frame);  // mu_ not held

  caf::actor_system& system_;
  std::shared_ptr<node_bridge> bridge_;
  std::shared_ptr<actor_directory> directory_;
  // Cache tiers exported here and proxies of other nodes' (worker_rebind).
  std::shared_ptr<actor_directory> cache_directory_;
  std::mutex mu_;
  std::unordered_map<uint32_t, caf::actor> relays_;  // target -> relay actor
  std::unordered_map<uint32_t, bool> echo_targets_;
  std::unordered_map<uint32_t, notice_fn> notices_;
  // Worker proxies by (peer, target): where worker_progress frames go.
  std::map<std::pair<std::string, uint32_t>, caf::actor> upstream_;
  bool holding_ = false;
  std::vector<inbound_frame> held_;
  std::mutex release_mu_;  // serializes release with on_inbound's dispatch
};

}  // namespace strata::transport
