#include "transport/actor_directory.hpp"

#include <algorithm>

namespace strata::transport {

void actor_directory::add_local(uint32_t target, caf::actor shard) {
  std::lock_guard lock(mu_);
  refs_[shard.address()] = actor_ref{bridge_->name(), target};
  local_[target] = std::move(shard);
}

caf::actor actor_directory::remove_local(uint32_t target) {
  std::lock_guard lock(mu_);
  auto it = local_.find(target);
  if (it == local_.end()) return {};
  caf::actor shard = std::move(it->second);
  local_.erase(it);
  refs_.erase(shard.address());
  return shard;
}

caf::actor actor_directory::proxy(const std::string& node, uint32_t target) {
  caf::actor made;
  {
    std::lock_guard lock(mu_);
    auto& slot = proxies_[{node, target}];
    if (slot) return slot;
    slot = make_proxy_(node, target);
    refs_[slot.address()] = actor_ref{node, target};
    made = slot;
  }
  // Outside the lock: a proxy that has already exited runs it at once.
  made->attach_functor([weak = weak_from_this(), node, target, addr = made.address()] {
    if (auto d = weak.lock()) d->forget_proxy(node, target, addr);
  });
  return made;
}

void actor_directory::forget_proxy(const std::string& node, uint32_t target,
                                   const caf::actor_addr& addr) {
  std::lock_guard lock(mu_);
  refs_.erase(addr);
  if (auto it = proxies_.find({node, target}); it != proxies_.end() && it->second.address() == addr)
    proxies_.erase(it);
}

expected<actor_ref> actor_directory::ref_of(const caf::actor& shard) const {
  std::lock_guard lock(mu_);
  if (shard)
    if (auto it = refs_.find(shard.address()); it != refs_.end()) return it->second;
  return error(errc::not_found, "node '" + bridge_->name() + "': " + kind_ + " actor " +
                                    std::to_string(shard ? shard.id() : 0) +
                                    " is neither exported here nor a proxy of another node's " +
                                    kind_ + ", so no other node can reach it");
}

expected<caf::actor> actor_directory::resolve(const actor_ref& r) {
  if (r.node == bridge_->name()) {
    std::lock_guard lock(mu_);
    if (auto it = local_.find(r.target); it != local_.end()) return it->second;
    return error(errc::not_found, "node '" + r.node + "' exports no " + kind_ + " as target " +
                                      std::to_string(r.target));
  }
  const auto peers = bridge_->peers();
  if (std::find(peers.begin(), peers.end(), r.node) == peers.end()) {
    std::string names;
    for (const auto& p : peers) names += (names.empty() ? "" : ", ") + p;
    return error(errc::not_found, "node '" + bridge_->name() + "': a " + kind_ +
                                      " on unknown node '" + r.node + "' (target " +
                                      std::to_string(r.target) +
                                      "; peers: " + (names.empty() ? "none" : names) + ")");
  }
  return proxy(r.node, r.target);
}

void actor_directory::clear() {
  std::lock_guard lock(mu_);
  for (auto& [key, p] : proxies_) caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
  proxies_.clear();
  local_.clear();
  refs_.clear();
}

expected<std::vector<actor_ref>> refs_of(const actor_directory& d,
                                         const std::vector<caf::actor>& shards) {
  std::vector<actor_ref> out;
  out.reserve(shards.size());
  for (const auto& a : shards) {
    auto r = d.ref_of(a);
    if (!r) return r.err();
    out.push_back(std::move(*r));
  }
  return out;
}

expected<std::vector<caf::actor>> actors_of(actor_directory& d, const std::vector<actor_ref>& refs) {
  std::vector<caf::actor> out;
  out.reserve(refs.size());
  for (const auto& r : refs) {
    auto a = d.resolve(r);
    if (!a) return a.err();
    out.push_back(std::move(*a));
  }
  return out;
}

expected<routing_wire> to_wire(const actor_directory& d, const actors::routing_table& t) {
  auto refs = refs_of(d, t.shards);
  if (!refs) return refs.err();
  return routing_wire{t.epoch, t.owners, std::move(*refs)};
}

expected<migration_wire> to_wire(const actor_directory& d, const actors::migration_order& o) {
  auto refs = refs_of(d, o.destinations);
  if (!refs) return refs.err();
  return migration_wire{o.epoch, o.partitions, std::move(*refs)};
}

expected<actors::routing_table> from_wire(actor_directory& d, routing_wire w) {
  for (uint32_t owner : w.owners)
    if (owner >= w.shards.size())
      return error(errc::corrupt_data, "routing table of epoch " + std::to_string(w.epoch) +
                                           ": owner shard " + std::to_string(owner) + " of " +
                                           std::to_string(w.shards.size()) + " shards");
  auto shards = actors_of(d, w.shards);
  if (!shards) return shards.err();
  return actors::routing_table{w.epoch, std::move(w.owners), std::move(*shards)};
}

expected<actors::migration_order> from_wire(actor_directory& d, migration_wire w) {
  if (w.partitions.size() != w.destinations.size())
    return error(errc::corrupt_data, "migration order of epoch " + std::to_string(w.epoch) + ": " +
                                         std::to_string(w.partitions.size()) + " partitions, " +
                                         std::to_string(w.destinations.size()) + " destinations");
  auto dest = actors_of(d, w.destinations);
  if (!dest) return dest.err();
  return actors::migration_order{w.epoch, std::move(w.partitions), std::move(*dest)};
}

}  // namespace strata::transport
