#include "transport/node_bridge.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <random>

#include "transport/node_bridge_impl.hpp"

namespace strata::transport {
namespace {

std::string default_host_id() {
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  std::error_code ec;
  const auto ns = std::filesystem::read_symlink("/proc/self/ns/net", ec);
  return std::string(host.data()) + "/" + (ec ? std::string("?") : ns.string());
}

}  // namespace

node_bridge::node_bridge(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}

node_bridge::~node_bridge() { stop(); }

expected<std::unique_ptr<node_bridge>> node_bridge::start(bridge_config config,
                                                          inbound_handler on_inbound,
                                                          peer_handler on_peer) {
  if (config.node_name.empty()) return error(errc::invalid_argument, "node name is empty");
  auto i = std::make_unique<impl>();
  i->config = std::move(config);
  i->on_inbound = std::move(on_inbound);
  i->on_peer = std::move(on_peer);
  i->host_id = i->config.host_id.empty() ? default_host_id() : i->config.host_id;
  std::random_device rd;
  i->node_id = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  if (i->node_id == 0) i->node_id = 1;
  if (auto s = i->init(); !s) {
    i->destroy();
    return error(s.err().code(), "node '" + i->config.node_name + "': " + s.err().message());
  }
  auto* raw = i.get();
  i->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<node_bridge>(new node_bridge(std::move(i)));
}

const std::string& node_bridge::name() const { return impl_->config.node_name; }
uint16_t node_bridge::port() const { return impl_->port; }
memory_support node_bridge::memory() const { return impl_->memory; }

expected<std::string> node_bridge::connect(const std::string& host, uint16_t port,
                                           std::chrono::milliseconds timeout) {
  auto op = std::make_shared<connect_op>();
  // A host name (a Kubernetes service, a cluster's DNS) resolves to its
  // first IPv4 address here, on the caller's thread (the lookup may block).
  op->host = host;
  in_addr literal{};
  if (::inet_pton(AF_INET, host.c_str(), &literal) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || !found)
      return error(errc::unavailable,
                   "cannot resolve '" + host + "' to an IPv4 address: " + ::gai_strerror(rc));
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
                sizeof text);
    ::freeaddrinfo(found);
    op->host = text;
  }
  op->port = port;
  std::unique_lock lock(impl_->mu_);
  if (impl_->stopping_) return error(errc::unavailable, "node '" + name() + "' is stopping");
  impl_->connects_queued_.push_back(op);
  lock.unlock();
  impl_->wake();
  lock.lock();
  if (!impl_->cv_.wait_for(lock, timeout, [&] { return op->done; })) {
    return error(errc::unavailable, "cannot connect to " + host + ":" + std::to_string(port) +
                                        ": no answer within " + std::to_string(timeout.count()) +
                                        " ms");
  }
  if (op->failure) return *op->failure;
  return op->peer;
}

status node_bridge::wait_for_peer(const std::string& peer, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu_);
  auto ready = [&] {
    auto it = impl_->by_name_.find(peer);
    return it != impl_->by_name_.end() &&
           (impl_->peers_[it->second]->up || impl_->peers_[it->second]->down);
  };
  if (!impl_->cv_.wait_for(lock, timeout, ready)) {
    // A node that tried and was refused (another cluster secret, say) is
    // named with the reason, not reported as merely late.
    auto refused = impl_->refusals_.find(peer);
    return error(refused != impl_->refusals_.end() ? errc::invalid_argument : errc::unavailable,
                 "node '" + peer + "' did not connect within " + std::to_string(timeout.count()) +
                     " ms" +
                     (refused != impl_->refusals_.end() ? " (this node " + refused->second + ")"
                                                        : std::string()));
  }
  auto& p = *impl_->peers_[impl_->by_name_.at(peer)];
  if (p.down)
    return error(errc::unavailable, "node '" + peer + "' is down (" + p.down_reason + ")");
  return {};
}

status node_bridge::request(const std::string& peer, frame_type type, uint32_t target,
                            frame_payload payload, reply_handler on_reply) {
  STRATA_ASSERT(on_reply, "request without a reply handler");
  return impl_->enqueue(peer, type, target, 0, std::move(payload), std::move(on_reply));
}

status node_bridge::send(const std::string& peer, frame_type type, uint32_t target,
                         frame_payload payload) {
  return impl_->enqueue(peer, type, target, 0, std::move(payload), {});
}

void node_bridge::reply(const std::string& peer, uint64_t request_id, frame_type type,
                        frame_payload payload) {
  (void)impl_->enqueue(peer, type, 0, request_id, std::move(payload), {});
}

void node_bridge::expect_departures() { impl_->departures_expected_ = true; }

std::vector<std::string> node_bridge::peers() const {
  std::lock_guard lock(impl_->mu_);
  std::vector<std::string> out;
  for (auto& p : impl_->peers_)
    if (!p->replaced) out.push_back(p->name);
  return out;
}

bool node_bridge::is_up(const std::string& peer) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->by_name_.find(peer);
  return it != impl_->by_name_.end() && impl_->peers_[it->second]->up;
}

transport_stats node_bridge::stats() const {
  transport_stats s;
  s.node = name();
  s.peers_down = impl_->peers_down;
  s.rejected_frames = impl_->rejected_unknown;
  s.unauthenticated_frames = impl_->unauthenticated;
  s.refused_handshakes = impl_->refused_handshakes;
  std::lock_guard lock(impl_->mu_);
  for (auto& p : impl_->peers_) {
    if (p->replaced) continue;  // its name came back as a new peer
    peer_stats ps;
    ps.name = p->name;
    ps.up = p->up;
    ps.down_reason = p->down_reason;
    ps.bytes_sent = p->bytes_sent;
    ps.frames_sent = p->frames_sent;
    ps.bytes_received = p->bytes_received;
    ps.frames_received = p->frames_received;
    ps.rejected_frames = p->rejected;
    ps.rendezvous_frames_received = p->rndv_received;
    ps.outstanding_bytes = p->outstanding;
    ps.pending_requests = p->pending_requests.size();
    ps.blocked_senders = p->blocked_senders;
    ps.shared_memory_path = p->by_address;
    ps.transports = p->transports;
    ps.reorder_peak_frames = p->reorder_peak;
    ps.window_peak_frames = p->window_peak_frames;
    ps.window_peak_bytes = p->window_peak_bytes;
    ps.window_violations = p->window_violations;
    ps.credit_waits = p->credit_waits;
    ps.held_for_credit = p->held_for_credit;
    s.rejected_frames += ps.rejected_frames;
    s.peers.push_back(std::move(ps));
  }
  return s;
}

void node_bridge::stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu_);
    if (impl_->stopped_) return;
    impl_->stopped_ = true;
  }
  // The progress thread drains the queue before it stops.
  {
    std::lock_guard lock(impl_->mu_);
    impl_->stopping_ = true;
  }
  impl_->cv_.notify_all();
  impl_->wake();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->destroy();
}

}  // namespace strata::transport
