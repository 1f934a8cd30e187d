#include "deploy/multi_node.hpp"

#include "actors/coordinator_actor.hpp"
#include "common/crc32c.hpp"

#include <arpa/inet.h>

#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

namespace strata::deploy {
namespace {

using clock_type = std::chrono::steady_clock;

// How long the coordinator's node waits for a member to acknowledge the
// end (it is up and idle: anything longer means it is gone).
constexpr auto finish_timeout = std::chrono::seconds(30);
// Pause between tries while peers start.
constexpr auto retry_pause = std::chrono::milliseconds(200);

std::string index_list(const std::vector<std::string>& nodes, const std::string& me) {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i] == me) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out.empty() ? "none" : out;
}

std::string hex(uint64_t v) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::chrono::milliseconds left_until(clock_type::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace

expected<std::unique_ptr<node_membership>> node_membership::create(const manifest& m,
                                                                  const std::string& node) {
  std::unique_ptr<node_membership> n(new node_membership);
  n->m_ = m;
  n->me_ = node;
  std::string names;
  bool known = false;
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    names += (names.empty() ? "" : ", ") + m.nodes[i].name;
    if (m.nodes[i].name == node) {
      known = true;
      n->my_index_ = i;
    }
  }
  if (!known)
    return error(errc::not_found,
                 m.file.string() + ": no node '" + node + "' (nodes: " + names + ")");
  for (size_t i = 0; i < m.nodes.size(); ++i)
    if (m.nodes[i].transport_port == 0)
      return error(errc::invalid_argument,
                   m.file.string() + ": nodes[" + std::to_string(i) + "].transport_port: node '" +
                       m.nodes[i].name +
                       "' needs a fixed transport port in a cluster of several nodes (its peers "
                       "connect to it)");
  // Peers admit this node only if it proves the cluster secret (and it
  // them): read now, so that a missing or unsafe file fails the start.
  auto secret = cluster_secret(m);
  if (!secret) return secret.err();
  n->secret_ = std::move(*secret);
  n->coordinator_ = m.nodes.front().name;
  // The manifest file's bytes: every node must run the same cluster.
  std::ifstream in(m.file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  n->fingerprint_ = crc32c(text.data(), text.size()) | uint64_t{text.size()} << 32;
  for (const auto& owner : m.shard_nodes) n->hosted_shards_.push_back(owner == node);
  return n;
}

node_membership::~node_membership() { stop(); }

std::string node_membership::describe() const {
  return "shards " + index_list(m_.shard_nodes, me_) + "; cache tiers " +
         index_list(m_.cache_nodes, me_) + "; workers " + index_list(m_.worker_nodes, me_) +
         (runs_coordinator() ? "; the coordinator and the dense model" : "") +
         (standby() ? " (standby: joins the running cluster)" : "");
}

bool node_membership::stopping() const {
  std::lock_guard lock(mu_);
  return stop_requested_;
}

void node_membership::request_stop() {
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
  }
  cv_.notify_all();
}

void node_membership::on_peer(const std::string& peer, bool up, const std::string& reason) {
  if (!up && runs_coordinator() && is_standby(peer)) {
    standby_gone(peer, reason);
    return;
  }
  if (up || peer != coordinator_) return;
  {
    std::lock_guard lock(mu_);
    coordinator_gone_ = true;
    coordinator_reason_ = reason;
  }
  cv_.notify_all();
}

expected<actors::cluster_placement> node_membership::place(caf::actor_system& system) {
  const auto& self = m_.nodes[my_index_];
  const auto& ts = m_.transport;
  deadline_ = clock_type::now() + std::chrono::seconds(ts.join_timeout_seconds);
  transport::bridge_config bc;
  bc.node_name = me_;
  // A node named by an IPv4 address listens on it; one named by a host
  // name (a Kubernetes service, DNS) listens on every interface, and its
  // peers resolve the name.
  in_addr literal{};
  bc.listen_address = ::inet_pton(AF_INET, self.host.c_str(), &literal) == 1 ? self.host : "0.0.0.0";
  bc.listen_port = self.transport_port;
  bc.heartbeat_interval = std::chrono::milliseconds(ts.heartbeat_interval_ms);
  bc.heartbeat_timeout = std::chrono::milliseconds(ts.heartbeat_timeout_ms);
  bc.max_outstanding_bytes = ts.max_outstanding_bytes;
  // Whether UCX sends from device memory matters (and is logged) only
  // where rows live on a device.
  bc.device_memory = self.devices > 0 || m_.cache_backend == cache_backend_choice::gpu;
  // Membership: only the manifest's nodes, each proving the cluster secret.
  bc.cluster_secret = secret_;
  for (const auto& n : m_.nodes) bc.admitted_nodes.push_back(n.name);
  // A standby node that left (drained, or lost holding nothing) may be
  // started again and join again (multi_node_join.cpp); a starting node
  // connects once per run.
  bc.may_rejoin = [this](const std::string& peer) { return is_standby(peer); };
  auto started = transport::node_transport::start(
      system, bc, [this](const std::string& peer, bool up, const std::string& reason) {
        on_peer(peer, up, reason);
      },
      /*hold_inbound=*/true);
  if (!started)
    return error(started.err().code(), "node '" + me_ + "': transport on " + self.host + ":" +
                                           std::to_string(self.transport_port) + ": " +
                                           started.err().message());
  transport_ = std::move(*started);
  auto& bridge = transport_->bridge();
  std::printf("transport: node %s listening on %s:%u (UCX)\n", me_.c_str(),
              bc.listen_address.c_str(), static_cast<unsigned>(bridge.port()));
  std::fflush(stdout);

  // Nodes listed before this one are dialled (they may still be starting);
  // nodes listed after it dial in. Standby nodes are neither dialled nor
  // waited for; a standby node dials every node that is not standby.
  size_t connected_peers = 0;
  for (size_t i = 0; i < m_.nodes.size(); ++i) {
    if (i == my_index_ || m_.nodes[i].standby) continue;
    ++connected_peers;
    const auto& peer = m_.nodes[i];
    if (i < my_index_ || standby()) {
      std::string last;
      for (;;) {
        if (stopping()) return error(errc::unavailable, "node '" + me_ + "': stopped while joining");
        const auto left = left_until(deadline_);
        if (left.count() == 0)
          return error(errc::unavailable, "node '" + me_ + "': cannot reach node '" + peer.name +
                                          "' at " + peer.host + ":" +
                                          std::to_string(peer.transport_port) + " within " +
                                          std::to_string(ts.join_timeout_seconds) +
                                          " s (transport.join_timeout_seconds): " + last);
        auto connected = bridge.connect(peer.host, peer.transport_port,
                                        std::min(left, std::chrono::milliseconds(5000)));
        if (connected) {
          if (*connected != peer.name)
            return error(errc::invalid_argument,
                         "node '" + me_ + "': " + peer.host + ":" +
                             std::to_string(peer.transport_port) + " is node '" + *connected +
                             "', the manifest says '" + peer.name + "'");
          break;
        }
        // A refused hello (another cluster secret, not a member) fails at
        // once: retrying cannot change the answer.
        if (connected.err().code() == errc::invalid_argument)
          return error(errc::invalid_argument,
                       "node '" + me_ + "': cannot join node '" + peer.name + "' at " + peer.host +
                           ":" + std::to_string(peer.transport_port) + ": " +
                           connected.err().message());
        last = connected.err().message();
        std::this_thread::sleep_for(retry_pause);
      }
    } else {
      std::string refused;  // a hello under its name was refused (e.g. another secret)
      for (;;) {
        if (stopping()) return error(errc::unavailable, "node '" + me_ + "': stopped while joining");
        const auto left = left_until(deadline_);
        if (left.count() == 0)
          return error(errc::unavailable, "node '" + me_ + "': node '" + peer.name +
                                          "' did not connect within " +
                                          std::to_string(ts.join_timeout_seconds) +
                                          " s (transport.join_timeout_seconds)" + refused);
        auto waited = bridge.wait_for_peer(peer.name, std::min(left, std::chrono::milliseconds(500)));
        if (waited) break;
        // Not fatal: anyone can send a hello under a member's name.
        if (waited.err().code() == errc::invalid_argument)
          refused = "; " + waited.err().message();
      }
    }
  }
  std::printf("transport: node %s connected to %zu peer%s\n", me_.c_str(), connected_peers,
              connected_peers == 1 ? "" : "s");
  std::fflush(stdout);

  actors::cluster_placement p;
  auto* t = transport_.get();
  const std::string me = me_;
  const manifest& m = m_;
  p.remote_shard = [t, me, &m](uint32_t i) -> std::optional<actors::shard_actor> {
    if (m.shard_nodes[i] == me) return std::nullopt;
    return t->remote_shard(m.shard_nodes[i], targets::shard_base + i);
  };
  p.remote_cache = [t, me, &m](uint32_t i) -> std::optional<actors::cache_tier_actor> {
    if (m.cache_nodes[i] == me) return std::nullopt;
    return t->remote_cache(m.cache_nodes[i], targets::cache_base + i);
  };
  p.remote_worker = [t, me, &m](uint32_t i) -> std::optional<actors::worker_actor> {
    if (m.worker_nodes[i] == me) return std::nullopt;
    return t->remote_worker(m.worker_nodes[i], targets::worker_base + i);
  };
  if (!runs_coordinator()) p.remote_dense = t->remote_dense(coordinator_, targets::dense);
  p.coordinator = runs_coordinator();
  // Scaling: new shards go to the node the placement names, spawned there.
  spawner_ = std::make_unique<node_spawner>(m_, me_, *transport_);
  auto* spawner = spawner_.get();
  p.spawn_shard = [spawner](uint32_t i, const std::string& node) { return spawner->spawn(i, node); };
  p.retire_shard = [spawner](uint32_t i) { spawner->retire(i); };
  p.spawn_successor = [spawner](uint32_t i, const std::string& node) {
    return spawner->spawn_successor(i, node);
  };
  p.end_rehome = [spawner](uint32_t i, bool keep) { spawner->end_rehome(i, keep); };
  // A drain relocates a node's cache tiers here: workers on other nodes
  // reach the successor under its index.
  p.publish_cache = [t](uint32_t i, const actors::cache_tier_actor& cache) {
    t->export_cache(targets::cache_base + i, cache);
  };
  return p;
}

status node_membership::join(const actors::training_cluster& cluster) {
  for (uint32_t i = 0; i < cluster.shards.size(); ++i)
    if (cluster.shard_here[i]) transport_->export_shard(targets::shard_base + i, cluster.shards[i]);
  for (uint32_t i = 0; i < cluster.caches.size(); ++i)
    if (cluster.cache_here[i]) transport_->export_cache(targets::cache_base + i, cluster.caches[i]);
  for (uint32_t i = 0; i < cluster.workers.size(); ++i)
    if (cluster.worker_here[i])
      transport_->export_worker(targets::worker_base + i, cluster.workers[i]);
  if (cluster.dense_here) transport_->export_dense(targets::dense, cluster.dense);
  spawner_->export_spawner(cluster.spawn_shard_at);
  transport_->export_notice(
      targets::finished,
      [this](const std::string& peer, std::span<const std::byte>) -> expected<std::vector<std::byte>> {
        if (peer == coordinator_) {
          // The run is over: peers closing their connections now are leaving.
          transport_->bridge().expect_departures();
          {
            std::lock_guard lock(mu_);
            finished_ = true;
          }
          cv_.notify_all();
        }
        return std::vector<std::byte>{};
      });
  // Readiness: answered (once everything is exported) with this node's
  // manifest fingerprint, which the coordinator's node compares with its own.
  transport_->export_notice(
      targets::ready, [this](const std::string&, std::span<const std::byte>) {
        std::vector<std::byte> mine(sizeof fingerprint_);
        std::memcpy(mine.data(), &fingerprint_, sizeof fingerprint_);
        return expected<std::vector<std::byte>>(std::move(mine));
      });
  transport_->export_notice(targets::joined,
                            [this](const std::string& peer, std::span<const std::byte> payload) {
                              return on_joined(peer, payload);
                            });
  transport_->release_inbound();
  if (standby()) return announce_join();
  if (!runs_coordinator()) return {};

  // Training starts once every peer answers the readiness echo.
  auto& bridge = transport_->bridge();
  size_t starting = 0;
  for (const auto& peer : m_.nodes) {
    if (!peer.standby) ++starting;
    if (peer.name == me_ || peer.standby) continue;
    std::string last = "no answer";
    for (;;) {
      if (stopping()) return error(errc::unavailable, "node '" + me_ + "': stopped while joining");
      const auto left = left_until(deadline_);
      if (left.count() == 0)
        return error(errc::unavailable, "node '" + me_ + "': node '" + peer.name +
                                        "' did not become ready within " +
                                        std::to_string(m_.transport.join_timeout_seconds) +
                                        " s: " + last);
      // The peer's manifest fingerprint, nullopt if it is not ready yet.
      auto answer = std::make_shared<std::promise<expected<std::optional<uint64_t>>>>();
      auto future = answer->get_future();
      auto sent = bridge.request(peer.name, transport::frame_type::echo, targets::ready, {},
                                 [answer](expected<transport::inbound_frame> r) {
                                   if (!r) {
                                     answer->set_value(r.err());
                                     return;
                                   }
                                   uint64_t theirs = 0;
                                   if (r->header.type != transport::frame_type::reply ||
                                       r->payload.size() != sizeof theirs) {
                                     answer->set_value(std::optional<uint64_t>());  // not ready yet
                                     return;
                                   }
                                   std::memcpy(&theirs, r->payload.data(), sizeof theirs);
                                   answer->set_value(std::optional<uint64_t>(theirs));
                                 });
      if (!sent) return sent.err();
      if (future.wait_for(left) != std::future_status::ready) continue;
      auto ready = future.get();
      if (!ready) return ready.err();
      if (*ready) {
        if (**ready != fingerprint_)
          return error(errc::format_mismatch,
                       "node '" + peer.name + "' runs another manifest than node '" + me_ + "' (" +
                           m_.file.string() + ": fingerprint " + hex(fingerprint_) + ", theirs " +
                           hex(**ready) + "): start every node with the same manifest file");
        break;
      }
      last = "it has not exported its actors yet";
      std::this_thread::sleep_for(retry_pause);
    }
  }
  std::printf("cluster: all %zu nodes ready%s\n", starting, standby_note().c_str());
  std::fflush(stdout);
  return {};
}

status node_membership::serve_until_done() {
  std::printf("node %s: serving its actors until node %s finishes\n", me_.c_str(),
              coordinator_.c_str());
  std::fflush(stdout);
  std::unique_lock lock(mu_);
  bool announced = false;
  for (;;) {
    if (finished_) return {};
    if (coordinator_gone_) break;
    if (stop_requested_ && !announced) {
      announced = true;
      std::fprintf(stderr,
                   "strata node: %s: stop requested; serving until node %s has stopped "
                   "gracefully (its drain needs this node's shards)\n",
                   me_.c_str(), coordinator_.c_str());
    }
    cv_.wait(lock);
  }
  return error(errc::unavailable, "node '" + me_ + "': lost the coordinator's node '" +
                                      coordinator_ + "': " + coordinator_reason_);
}

std::future<std::string> node_membership::tell_finished(const std::string& node) {
  auto answer = std::make_shared<std::promise<std::string>>();
  auto future = answer->get_future();
  auto sent = transport_->bridge().request(node, transport::frame_type::echo, targets::finished, {},
                                           [answer](expected<transport::inbound_frame> r) {
                                             if (!r)
                                               answer->set_value(r.err().message());
                                             else if (r->header.type != transport::frame_type::reply)
                                               answer->set_value("it answered with an error");
                                             else
                                               answer->set_value(std::string());
                                           });
  if (!sent) answer->set_value(sent.err().message());
  return future;
}

std::string node_membership::acknowledged(std::future<std::string>& answer) {
  return answer.wait_for(finish_timeout) != std::future_status::ready ? "no answer within 30 s"
                                                                      : answer.get();
}

void node_membership::finish(bool ok) {
  {
    std::lock_guard lock(mu_);
    ending_ = true;  // standby nodes leaving now are no news
  }
  if (ok && transport_ && runs_coordinator()) {
    auto& bridge = transport_->bridge();
    // Members stop once told: their connections closing are departures.
    bridge.expect_departures();
    // Each member's answer: empty once it acknowledged, else why not.
    std::vector<std::pair<std::string, std::future<std::string>>> answers;
    for (const auto& peer : m_.nodes) {
      if (peer.name == me_ || !expects_finish(peer.name)) continue;
      answers.emplace_back(peer.name, tell_finished(peer.name));
    }
    for (auto& [peer, a] : answers) {
      const std::string why = acknowledged(a);
      if (!why.empty())
        std::fprintf(stderr,
                     "strata node: %s: member %s did not acknowledge the end of training: %s\n",
                     me_.c_str(), peer.c_str(), why.c_str());
    }
  }
  stop();
}

void node_membership::stop() {
  if (spawner_) spawner_->stop();
  if (transport_) transport_->stop();
}

}  // namespace strata::deploy
