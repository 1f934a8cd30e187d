// Standby nodes (nodes[i].standby; docs/multi-node.md, "Nodes that join
// later (standby)"): the half of node_membership that lets a node join a
// cluster that is already running. The standby node announces itself to
// the coordinator's node with its manifest fingerprint (a `joined` notice);
// the coordinator's node compares it, logs the join and from then on counts
// the node as a member it tells `finished` at the end. A standby node that
// goes down is logged; holding nothing, it leaves training alone. One that
// left (a drain released it) or went down may be started again and joins
// again: its transport admits the name once more (a new process).
#include <cstdio>
#include <cstring>
#include <future>

#include "deploy/multi_node.hpp"
#include "transport/codec.hpp"

namespace strata::deploy {
namespace {

std::string hex16(uint64_t v) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

bool node_membership::is_standby(const std::string& node) const {
  for (const auto& n : m_.nodes)
    if (n.name == node) return n.standby;
  return false;
}

std::string node_membership::standby_note() const {
  std::string names;
  for (const auto& n : m_.nodes)
    if (n.standby) names += (names.empty() ? "" : ", ") + n.name;
  return names.empty() ? "" : " (standby nodes that may join later: " + names + ")";
}

bool node_membership::expects_finish(const std::string& peer) const {
  {
    std::lock_guard lock(mu_);
    if (left_.count(peer) != 0) return false;  // drained: told already
    if (!is_standby(peer)) return true;
    if (joined_.count(peer) == 0) return false;
  }
  return transport_ && transport_->bridge().is_up(peer);
}

status node_membership::announce_join() {
  auto& bridge = transport_->bridge();
  // The coordinator's answer: empty when it admitted this node, else why not.
  auto answer = std::make_shared<std::promise<expected<std::string>>>();
  auto future = answer->get_future();
  std::vector<std::byte> mine(sizeof fingerprint_);
  std::memcpy(mine.data(), &fingerprint_, sizeof fingerprint_);
  auto sent = bridge.request(
      coordinator_, transport::frame_type::echo, targets::joined, std::move(mine),
      [answer](expected<transport::inbound_frame> r) {
        if (!r) {
          answer->set_value(r.err());
          return;
        }
        if (r->header.type == transport::frame_type::reply) {
          answer->set_value(std::string());
          return;
        }
        // reply_error: the coordinator's reason, an encoded string.
        std::string why;
        if (!transport::decode_payload(std::span<const std::byte>(r->payload.data(),
                                                                  r->payload.size()),
                                       why) ||
            why.empty())
          why = "an unreadable refusal";
        answer->set_value(std::move(why));
      });
  if (!sent)
    return error(sent.err().code(), "node '" + me_ + "': cannot announce its join to node '" +
                                        coordinator_ + "': " + sent.err().message());
  // The coordinator's node answers once it has exported its own actors
  // (it holds frames until then): within the join timeout, as any join.
  for (;;) {
    if (stopping()) return error(errc::unavailable, "node '" + me_ + "': stopped while joining");
    if (future.wait_for(std::chrono::milliseconds(200)) == std::future_status::ready) break;
    if (std::chrono::steady_clock::now() >= deadline_)
      return error(errc::unavailable,
                   "node '" + me_ + "': node '" + coordinator_ + "' did not answer its join within " +
                       std::to_string(m_.transport.join_timeout_seconds) +
                       " s (transport.join_timeout_seconds)");
  }
  auto refused = future.get();
  if (!refused)
    return error(refused.err().code(), "node '" + me_ + "': joining through node '" +
                                           coordinator_ + "': " + refused.err().message());
  if (!refused->empty())
    return error(errc::format_mismatch,
                 "node '" + me_ + "': node '" + coordinator_ + "' refused it: " + *refused);
  std::printf("cluster: node %s joined the running cluster (standby; coordinator node %s)\n",
              me_.c_str(), coordinator_.c_str());
  std::fflush(stdout);
  return {};
}

expected<std::vector<std::byte>> node_membership::on_joined(const std::string& peer,
                                                            std::span<const std::byte> payload) {
  if (!runs_coordinator())
    return error(errc::invalid_argument,
                 "node '" + me_ + "' is not the coordinator's node ('" + coordinator_ + "')");
  if (!is_standby(peer))
    return error(errc::invalid_argument,
                 "node '" + peer + "' is not a standby node of " + m_.file.string());
  uint64_t theirs = 0;
  if (payload.size() != sizeof theirs)
    return error(errc::invalid_argument, "a joined notice of " + std::to_string(payload.size()) +
                                             " bytes (expected a fingerprint of " +
                                             std::to_string(sizeof theirs) + ")");
  std::memcpy(&theirs, payload.data(), sizeof theirs);
  if (theirs != fingerprint_) {
    const std::string why = "node '" + peer + "' runs another manifest than node '" + me_ + "' (" +
                            m_.file.string() + ": fingerprint " + hex16(fingerprint_) +
                            ", theirs " + hex16(theirs) +
                            "): start every node with the same manifest file";
    std::fprintf(stderr, "cluster: refused standby node %s: %s\n", peer.c_str(), why.c_str());
    return error(errc::format_mismatch, why);
  }
  // A node that left (drained) or went down may join again as a new
  // process (its transport admitted it: bridge_config::may_rejoin): a
  // member again, told `finished` at the end, drainable again.
  bool again = false;
  {
    std::lock_guard lock(mu_);
    again = left_.erase(peer) != 0 || joined_.count(peer) != 0;
    joined_.insert(peer);
  }
  std::printf("cluster: node %s joined (standby)%s\n", peer.c_str(),
              again ? " again" : "");
  std::fflush(stdout);
  return std::vector<std::byte>{};
}

status node_membership::release(const std::string& node) {
  if (!runs_coordinator() || !transport_)
    return error(errc::invalid_argument, "node '" + me_ + "' is not the coordinator's node");
  if (node == me_)
    return error(errc::invalid_argument, "node '" + me_ + "' runs the coordinator");
  // Its shards' retires first: their files go before the node does.
  if (spawner_) spawner_->wait_retired(node, std::chrono::seconds(120));
  {
    std::lock_guard lock(mu_);
    left_.insert(node);  // from now on its departure is no news
  }
  auto answer = tell_finished(node);
  const std::string why = acknowledged(answer);
  if (!why.empty())
    return error(errc::unavailable,
                 "node '" + node + "' did not acknowledge that it may leave: " + why);
  std::printf("cluster: node %s left (drained: it hosts no shard)\n", node.c_str());
  std::fflush(stdout);
  return {};
}

std::vector<std::string> node_membership::left() const {
  std::lock_guard lock(mu_);
  return {left_.begin(), left_.end()};
}

void node_membership::standby_gone(const std::string& peer, const std::string& reason) {
  bool was_joined = false;
  {
    std::lock_guard lock(mu_);
    if (ending_ || left_.count(peer) != 0) return;
    was_joined = joined_.count(peer) != 0;
  }
  if (!was_joined) return;  // refused, or left before its notice: said already
  // A standby node hosts nothing until a scale places shards on it. One
  // holding shards is lost like any node: their requests fail and the run
  // goes to the crash policy (checkpoint.on_failure).
  // A drain's successor that is not committed is not held: losing it
  // abandons the drain (the old shard still owns its rows).
  std::string held, successors;
  if (spawner_) {
    const auto homes = spawner_->homes();
    for (size_t i = 0; i < homes.size(); ++i) {
      if (homes[i] != peer) continue;
      auto& list = spawner_->successor_only(static_cast<uint32_t>(i), peer) ? successors : held;
      list += (list.empty() ? "" : ", ") + std::to_string(i);
    }
  }
  if (held.empty() && !successors.empty())
    std::fprintf(stderr,
                 "cluster: standby node %s is gone (%s) with the drain's successors of shards "
                 "%s: the drain is abandoned, training goes on\n",
                 peer.c_str(), reason.c_str(), successors.c_str());
  else if (held.empty())
    std::fprintf(stderr,
                 "cluster: standby node %s is gone (%s); it held no shards: training goes on\n",
                 peer.c_str(), reason.c_str());
  else
    std::fprintf(stderr,
                 "cluster: standby node %s is gone (%s) with shards %s: their requests fail "
                 "(checkpoint.on_failure decides)\n",
                 peer.c_str(), reason.c_str(), held.c_str());
}

}  // namespace strata::deploy
