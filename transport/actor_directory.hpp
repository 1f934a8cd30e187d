// Shard handles across nodes (docs/scaling.md, "Across nodes"): routing
// tables and migration orders name shards by caf::actor handle, which means
// nothing on another node. On the wire a shard is an actor_ref (the node
// that hosts it, its target there; payloads.hpp). The directory maps a
// handle to its ref (a shard exported here: this node and its target; a
// proxy: its peer and target) and a ref back to a handle (this node: the
// exported shard; another node: its proxy, one per (node, target), made on
// first use). A ref naming an unknown node or a target exported by no shard
// here is an error naming it: a decoded table is hostile input. A second
// directory maps cache tiers the same way (a worker told its relocated
// cache tiers, worker_rebind).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <caf/all.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/protocol.hpp"
#include "common/error.hpp"
#include "transport/node_bridge.hpp"
#include "transport/payloads.hpp"

namespace strata::transport {

class actor_directory : public std::enable_shared_from_this<actor_directory> {
 public:
  // make_proxy(node, target): a new proxy of that node's shard.
  using proxy_maker = std::function<caf::actor(const std::string& node, uint32_t target)>;
  // kind: what it maps ("shard", "cache tier"), for its errors.
  actor_directory(std::shared_ptr<node_bridge> bridge, proxy_maker make_proxy,
                  std::string kind = "shard")
      : bridge_(std::move(bridge)), make_proxy_(std::move(make_proxy)), kind_(std::move(kind)) {}

  void add_local(uint32_t target, caf::actor shard);
  // The shard exported as `target` (null if none), no longer known.
  caf::actor remove_local(uint32_t target);
  // The proxy of (node, target), made if there is none yet (or the one
  // there has exited: a retired shard's proxy is told to exit, and a later
  // shard under the same index must get a live one). Only for a directory
  // owned by a shared_ptr.
  caf::actor proxy(const std::string& node, uint32_t target);
  expected<actor_ref> ref_of(const caf::actor& shard) const;
  expected<caf::actor> resolve(const actor_ref& ref);
  // Tells every proxy to exit and forgets everything (the transport stops).
  void clear();

 private:
  void forget_proxy(const std::string& node, uint32_t target, const caf::actor_addr& addr);

  std::shared_ptr<node_bridge> bridge_;
  proxy_maker make_proxy_;
  std::string kind_;
  mutable std::mutex mu_;
  std::map<caf::actor_addr, actor_ref> refs_;
  std::unordered_map<uint32_t, caf::actor> local_;
  std::map<std::pair<std::string, uint32_t>, caf::actor> proxies_;
};

// Every actor's ref, or the first that has none; every ref's actor, or the
// first that maps to none (errors name it).
expected<std::vector<actor_ref>> refs_of(const actor_directory& d,
                                         const std::vector<caf::actor>& actors);
expected<std::vector<caf::actor>> actors_of(actor_directory& d, const std::vector<actor_ref>& refs);

expected<routing_wire> to_wire(const actor_directory& d, const actors::routing_table& t);
expected<migration_wire> to_wire(const actor_directory& d, const actors::migration_order& o);
// Also checks the table's shape (every owner index names a shard; as many
// destinations as partitions): errors name the epoch and the counts.
expected<actors::routing_table> from_wire(actor_directory& d, routing_wire w);
expected<actors::migration_order> from_wire(actor_directory& d, migration_wire w);

}  // namespace strata::transport
