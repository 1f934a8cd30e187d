// Node bridge connections: UCX endpoints and their errors, outgoing
// connects, the hello exchange and peers coming up (node_bridge_impl.hpp).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <memory>
#include <string>

#include "transport/node_bridge_impl.hpp"

namespace strata::transport {

ep_context* node_bridge::impl::new_ep_context(int peer, uint64_t connect) {
  auto ctx = std::make_unique<ep_context>();
  ctx->owner = this;
  ctx->peer = peer;
  ctx->connect = connect;
  ep_contexts.push_back(std::move(ctx));
  return ep_contexts.back().get();
}

void node_bridge::impl::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* ctx = static_cast<ep_context*>(arg);
  if (ctx->closed) return;
  ctx->owner->ep_failed(ctx, std::string("connection error: ") + ucs_status_string(status));
}

void node_bridge::impl::ep_failed(ep_context* ctx, const std::string& reason) {
  if (ctx->peer >= 0) {
    mark_down(*peers_[ctx->peer], reason);
  } else if (ctx->connect != 0) {
    fail_connect(ctx->connect, reason);
  }
  schedule_close(ctx);
}

void node_bridge::impl::schedule_close(ep_context* ctx) {
  if (ctx == nullptr || ctx->closed) return;
  ctx->closed = true;
  to_close.push_back(ctx);
}

void node_bridge::impl::close_scheduled() {
  auto list = std::move(to_close);
  to_close.clear();
  for (auto* ctx : list) {
    if (ctx->ep == nullptr) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    auto* r = ucp_ep_close_nbx(ctx->ep, &p);
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);  // completes in the background
    ctx->ep = nullptr;
  }
}

ep_context* node_bridge::impl::context_of(ucp_ep_h ep) {
  for (auto& c : ep_contexts) {
    if (c->ep == ep && !c->closed) return c.get();
  }
  return nullptr;
}

ep_context* node_bridge::impl::create_ep(ucp_ep_params_t& params, int peer, uint64_t connect,
                                         std::string& failure, bool peer_errors) {
  auto* ctx = new_ep_context(peer, connect);
  if (peer_errors) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &impl::on_ep_error;
    params.err_handler.arg = ctx;
  }
  const auto s = ucp_ep_create(worker, &params, &ctx->ep);
  if (s != UCS_OK) {
    failure = ucs_status_string(s);
    ctx->closed = true;
    ctx->ep = nullptr;
    return nullptr;
  }
  return ctx;
}

void node_bridge::impl::on_connection(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<impl*>(arg);
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
  p.conn_request = request;
  std::string failure;
  if (self->create_ep(p, -1, 0, failure) == nullptr) {
    self->log("cannot accept a connection: " + failure);
  }
}

void node_bridge::impl::start_connect(const std::shared_ptr<connect_op>& op) {
  op->id = next_connect_id++;
  connects[op->id] = op;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(op->port);
  if (::inet_pton(AF_INET, op->host.c_str(), &sa.sin_addr) != 1) {
    fail_connect(op->id, "'" + op->host + "' is not an IPv4 address");
    return;
  }
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  p.sockaddr.addrlen = sizeof sa;
  std::string failure;
  op->ctx = create_ep(p, -1, op->id, failure);
  if (op->ctx == nullptr) {
    fail_connect(op->id, failure);
    return;
  }
  send_control(op->ctx->ep, frame_type::hello, op->id, true);
}

void node_bridge::impl::fail_connect(uint64_t id, const std::string& reason) {
  auto it = connects.find(id);
  if (it == connects.end()) return;
  auto op = it->second;
  connects.erase(it);
  {
    std::lock_guard lock(mu_);
    op->done = true;
    op->failure = error(errc::unavailable, "cannot connect to " + op->host + ":" +
                                               std::to_string(op->port) + ": " + reason);
  }
  cv_.notify_all();
}

void node_bridge::impl::handle_hello(const frame_header& h, std::span<const std::byte> payload,
                                     ucp_ep_h reply_ep) {
  hello_payload hello;
  if (auto s = decode_payload(payload, hello); !s) {
    return reject(nullptr, "bad hello: " + s.err().message());
  }
  const bool same_host =
      config.exchange_worker_address && !hello.worker_address.empty() && hello.host_id == host_id;
  if (h.type == frame_type::hello_ack) {
    auto it = connects.find(h.request_id);
    if (it == connects.end()) return reject(nullptr, "hello_ack for no connection attempt");
    auto op = it->second;
    connects.erase(it);
    ep_context* wire = op->ctx;
    auto* peer = add_peer(hello, h.sender);
    if (peer == nullptr) {
      schedule_close(wire);
      return fail_connect_now(op, "node '" + hello.name + "' is already connected");
    }
    bind_eps(*peer, wire, same_host, hello.worker_address);
    {
      std::lock_guard lock(mu_);
      op->done = true;
      op->peer = peer->name;
    }
    set_up(*peer);
    return;
  }
  // hello: a peer connected to our listener.
  auto* peer = add_peer(hello, h.sender);
  if (peer == nullptr) {
    log("refused a second connection from node '" + hello.name + "'");
    return;
  }
  ep_context* wire = reply_ep ? context_of(reply_ep) : nullptr;
  if (wire == nullptr && reply_ep != nullptr) {
    wire = new_ep_context(static_cast<int>(peer->index), 0);
    wire->ep = reply_ep;
  }
  bind_eps(*peer, wire, same_host, hello.worker_address);
  if (peer->ep == nullptr) return;
  send_control(peer->ep, frame_type::hello_ack, h.request_id, false, static_cast<int>(peer->index));
  set_up(*peer);
}

void node_bridge::impl::fail_connect_now(const std::shared_ptr<connect_op>& op,
                                         const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    op->done = true;
    op->failure = error(errc::unavailable, "cannot connect to " + op->host + ":" +
                                               std::to_string(op->port) + ": " + reason);
  }
  cv_.notify_all();
}

peer_state* node_bridge::impl::add_peer(const hello_payload& hello, uint64_t node_id_of_peer) {
  std::lock_guard lock(mu_);
  if (by_name_.count(hello.name) != 0 || hello.name.empty()) return nullptr;
  auto p = std::make_unique<peer_state>();
  p->index = static_cast<uint32_t>(peers_.size());
  p->name = hello.name;
  p->node_id = node_id_of_peer;
  p->last_heard = clock::now();
  by_name_[p->name] = p->index;
  by_node_id[node_id_of_peer] = p->index;
  peers_.push_back(std::move(p));
  return peers_.back().get();
}

void node_bridge::impl::bind_eps(peer_state& peer, ep_context* wire, bool same_host,
                                 const std::vector<uint8_t>& address) {
  if (wire != nullptr) {
    wire->peer = static_cast<int>(peer.index);
    wire->connect = 0;
    peer.wire_ep = wire->ep;
    peer.ep = wire->ep;
  }
  if (same_host) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = reinterpret_cast<const ucp_address_t*>(address.data());
    std::string failure;
    if (auto* ctx = create_ep(p, static_cast<int>(peer.index), 0, failure, false)) {
      peer.ep = ctx->ep;
      peer.by_address = true;
      if (config.log_endpoints) ucp_ep_print_info(ctx->ep, stderr);
    } else {
      log("node '" + peer.name + "': connecting by worker address failed (" + failure +
          "), keeping the listener connection");
    }
  }
}

void node_bridge::impl::set_up(peer_state& peer) {
  {
    std::lock_guard lock(mu_);
    peer.up = true;
  }
  cv_.notify_all();
  log("node '" + peer.name + "' up" + (peer.by_address ? " (by worker address)" : ""));
  if (on_peer) on_peer(peer.name, true, "");
}

}  // namespace strata::transport
