// Node bridge connections: UCX endpoints and their errors, outgoing
// connects, the hello exchange and peers coming up (node_bridge_impl.hpp).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
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
    mark_down(*peers_[ctx->peer], reason, /*disconnected=*/true);
  } else if (ctx->connect != 0) {
    fail_connect(ctx->connect, reason);
  }
  schedule_close(ctx);
}

void node_bridge::impl::schedule_close(ep_context* ctx) {
  if (ctx == nullptr || ctx->closed) return;
  ctx->closed = true;
  // authed_eps keeps a closed endpoint's entry: an endpoint bound to a
  // peer closes only when the peer goes down (close_connection, mark_down,
  // shutdown), and a down peer never comes back (a name that does, by
  // may_rejoin, gets a new peer entry), so the entry maps only frames
  // still in flight from it to a peer that drops them as late ones (not
  // as a non-member's). A handle UCX reuses for a new connection is
  // rebound when that connection authenticates; until then its frames go
  // to the down peer and are dropped all the same.
  to_close.push_back(ctx);
}

void node_bridge::impl::close_scheduled() {
  auto list = std::move(to_close);
  to_close.clear();
  for (auto* ctx : list) {
    if (ctx->ep == nullptr) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // A refused connection closes by flush: its hello_refused must reach the
    // other side before the disconnect (a forced close resets the TCP
    // connection, and the reset could overtake the refusal: the stranger
    // then saw "connection reset" instead of why).
    p.flags = ctx->step == hello_step::refused ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
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
  // The other end's address, for the messages about its hello.
  std::string address;
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(request, &attr) == UCS_OK &&
      attr.client_address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&attr.client_address);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    address = std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  std::string failure;
  if (auto* ctx = self->create_ep(p, -1, 0, failure)) {
    ctx->address = address;
  } else {
    self->log("cannot accept a connection from " + address + ": " + failure);
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
  op->ctx->address = op->host + ":" + std::to_string(op->port);
  auto own = auth::fresh_nonce();
  if (!own) {
    fail_connect(op->id, own.err().message());
    return;
  }
  op->ctx->own_nonce = *own;
  op->ctx->step = hello_step::hello_sent;
  hello_payload hello;
  hello.node_id = node_id;
  hello.host_id = host_id;
  hello.nonce.assign(own->begin(), own->end());
  send_hello(op->ctx->ep, frame_type::hello, op->id, std::move(hello));
  if (config.test_trust_blindly) {
    // The attacker of the membership tests: up as soon as its hello left,
    // named by the address it dialled; its frames go out over this
    // connection before (and whatever) the acceptor decides.
    hello_payload target;
    target.name = op->ctx->address;
    if (auto* peer = add_peer(target, 0)) {
      bind_eps(*peer, op->ctx, false, {}, false);
      op->ctx->connect = op->id;  // its hello_ack still finds the attempt
      {
        std::lock_guard lock(mu_);
        op->done = true;
        op->peer = peer->name;
      }
      set_up(*peer);
    }
  }
}

void node_bridge::impl::fail_connect(uint64_t id, const std::string& reason, errc code) {
  auto it = connects.find(id);
  if (it == connects.end()) return;
  auto op = it->second;
  connects.erase(it);
  {
    std::lock_guard lock(mu_);
    op->done = true;
    op->failure = error(
        code, "cannot connect to " + op->host + ":" + std::to_string(op->port) + ": " + reason);
  }
  cv_.notify_all();
}

// The hello exchange: a mutual challenge-response over the cluster secret
// (docs/multi-node.md, "Membership"), all on the listener connection:
//
//   connector -> acceptor  hello          name, node id, host id, nonce Nc
//   acceptor -> connector  hello_ack      name, node id, host id, nonce Na,
//                                         prove(secret, ".../acceptor", its name, Nc, Na)
//   connector -> acceptor  hello_proof    prove(secret, ".../connector", its name, Na, Nc),
//                                         its worker address
//   acceptor -> connector  hello_welcome  its worker address
//
// Each side checks the other's proof over the nonce it chose itself, fresh
// per connection, so a recorded hello replayed on a new connection fails;
// the role in the proof's context keeps an answer of one side from being
// reflected as the other's. Only names in admitted_nodes pass, and neither
// side's worker address goes to a peer that has not proved the secret. Any
// failure answers hello_refused (the reason), is logged with the other
// end's address and counted, and the connection closes.
namespace {

constexpr std::string_view acceptor_context = "strata-node-hello-v1/acceptor";
constexpr std::string_view connector_context = "strata-node-hello-v1/connector";

// Text from the other side (names, reasons) as this node's messages show
// it: cut to `limit` characters, so that a stranger cannot fill the log.
std::string shown(const std::string& text, size_t limit = 64) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

bool to_nonce(const std::vector<uint8_t>& bytes, auth::nonce& out) {
  if (bytes.size() != out.size()) return false;
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return true;
}

}  // namespace

void node_bridge::impl::send_hello(ucp_ep_h ep, frame_type type, uint64_t request_id,
                                   hello_payload payload, bool close_after) {
  if (ep == nullptr) return;
  payload.name = config.node_name;
  auto op = std::make_unique<send_op>();
  op->owner = this;
  auto bytes = encode_payload(payload);
  if (config.outgoing_control) {
    config.outgoing_control(type, bytes);
    if (bytes.empty()) return;  // the seam dropped it
  }
  frame_header h;
  h.type = type;
  h.sender = node_id;
  h.request_id = request_id;
  seal(h, bytes);
  op->payload = std::move(bytes);
  encode_header(h, op->header);
  op->bytes = frame_header_bytes + op->payload.size();
  op->ep_override = ep;
  op->close_after = close_after;
  post(std::move(op), true, nullptr);
}

auth::mac node_bridge::impl::proof_for(const ep_context& ctx, bool as_acceptor) const {
  return auth::prove(config.cluster_secret, as_acceptor ? acceptor_context : connector_context,
                     config.node_name, ctx.their_nonce, ctx.own_nonce);
}

bool node_bridge::impl::proof_holds(const hello_payload& hello, const ep_context& ctx,
                                    bool from_acceptor) const {
  // An open endpoint (no secret: clients of a serving node) checks nothing;
  // a node with a secret checks every proof.
  if (config.cluster_secret.empty() || config.test_trust_blindly) return true;
  if (hello.proof.size() != auth::mac_size) return false;
  auth::mac got{};
  std::copy(hello.proof.begin(), hello.proof.end(), got.begin());
  const auto want =
      auth::prove(config.cluster_secret, from_acceptor ? acceptor_context : connector_context,
                  ctx.their.name, ctx.own_nonce, ctx.their_nonce);
  return auth::same_mac(got, want);
}

std::string node_bridge::impl::admitted_problem(const std::string& name) const {
  if (name.empty()) return "no node name";
  if (name == config.node_name) return "it claims this node's own name '" + shown(name) + "'";
  if (config.admitted_nodes.empty()) return {};
  for (const auto& n : config.admitted_nodes)
    if (n == name) return {};
  std::string list;
  for (const auto& n : config.admitted_nodes) list += (list.empty() ? "" : ", ") + n;
  return "node '" + shown(name) + "' is not a member (the manifest's nodes: " + list + ")";
}

void node_bridge::impl::refuse(ep_context* ctx, uint64_t request_id, const std::string& claimed,
                               const std::string& reason) {
  const uint64_t n = ++refused_handshakes;
  const std::string from = ctx && !ctx->address.empty() ? ctx->address : "an unknown address";
  // Every refusal up to 16, then at powers of two: a flood of hellos
  // cannot flood the log.
  if (n <= 16 || (n & (n - 1)) == 0)
    log("hello from " + from + ": " + reason + "; refused" +
        (n > 16 ? " (" + std::to_string(n) + " refused so far)" : std::string()));
  // Remembered for wait_for_peer's error under member names only: a
  // stranger's made-up names must not grow the map.
  if (!claimed.empty() && !config.admitted_nodes.empty() && admitted_problem(claimed).empty()) {
    std::lock_guard lock(mu_);
    refusals_[claimed] = "refused a hello from " + from + ": " + reason;
  }
  if (ctx == nullptr) return;
  ctx->step = hello_step::refused;
  ctx->their = hello_payload{};  // a closed context stays (small): not what a stranger sent
  if (ctx->connect != 0) fail_connect(ctx->connect, reason, errc::invalid_argument);
  hello_payload why;
  why.refusal = reason;
  if (ctx->ep != nullptr && !ctx->closed) {
    send_hello(ctx->ep, frame_type::hello_refused, request_id, why, /*close_after=*/true);
  }
}

void node_bridge::impl::expire_hellos(clock::time_point now) {
  const auto ms = std::to_string(config.heartbeat_timeout.count());
  // By index: refusing may add contexts.
  for (size_t i = 0; i < ep_contexts.size(); ++i) {
    auto* ctx = ep_contexts[i].get();
    if (ctx->closed || ctx->peer >= 0 || ctx->step == hello_step::done ||
        now - ctx->opened <= config.heartbeat_timeout)
      continue;
    if (ctx->step == hello_step::refused) {  // hello_refused never went out
      schedule_close(ctx);
      continue;
    }
    if (ctx->connect != 0) {
      fail_connect(ctx->connect, "no hello answer within " + ms + " ms");
      schedule_close(ctx);
      continue;
    }
    refuse(ctx, 0, ctx->their.name, "no hello exchange within " + ms + " ms (heartbeat_timeout)");
  }
}

void node_bridge::impl::close_connection(ep_context* ctx, const std::string& reason) {
  if (ctx == nullptr || ctx->closed) return;
  // A connection bound to a peer closes with the peer (no endpoint of a
  // peer is left dangling); an unbound one alone.
  if (ctx->peer >= 0) return mark_down(*peers_[ctx->peer], reason);
  schedule_close(ctx);
}

void node_bridge::impl::handle_hello(const frame_header& h, std::span<const std::byte> payload,
                                     ucp_ep_h reply_ep) {
  // The endpoint the frame came over says who it is from; a frame without
  // one cannot be answered nor attributed.
  if (reply_ep == nullptr) {
    ++unauthenticated;
    return;
  }
  ep_context* ctx = context_of(reply_ep);
  if (ctx == nullptr) {
    ctx = new_ep_context(-1, 0);
    ctx->ep = reply_ep;
  }
  hello_payload hello;
  if (auto s = decode_payload(payload, hello); !s) {
    return refuse(ctx, h.request_id, "", "bad hello: " + s.err().message());
  }
  switch (h.type) {
    case frame_type::hello:
      return on_hello(ctx, h, std::move(hello));
    case frame_type::hello_ack:
      return on_hello_ack(ctx, h, std::move(hello));
    case frame_type::hello_proof:
      return on_hello_proof(ctx, h, std::move(hello));
    case frame_type::hello_welcome:
      return on_hello_welcome(ctx, h, std::move(hello));
    case frame_type::hello_refused: {
      // Once per connection, and only during its hello exchange (a
      // connection that refused or was refused closes; a member's refusal
      // after the exchange means nothing).
      if (ctx->step == hello_step::done || ctx->step == hello_step::refused) return;
      ++refused_handshakes;
      const std::string from = ctx->address.empty() ? "an unknown address" : ctx->address;
      const std::string reason = "refused by node '" + shown(hello.name) + "' at " + from + ": " +
                                 shown(hello.refusal, 400);
      log(reason);
      if (!ctx->their.name.empty() && !config.admitted_nodes.empty() &&
          admitted_problem(ctx->their.name).empty()) {
        std::lock_guard lock(mu_);
        refusals_[ctx->their.name] = "was " + reason;
      }
      if (ctx->step != hello_step::done) {
        ctx->step = hello_step::refused;
        if (ctx->connect != 0) fail_connect(ctx->connect, reason, errc::invalid_argument);
        close_connection(ctx, reason);
      }
      return;
    }
    default:
      return;
  }
}

void node_bridge::impl::on_hello(ep_context* ctx, const frame_header& h, hello_payload hello) {
  if (ctx->step != hello_step::none || ctx->peer >= 0 || ctx->connect != 0)
    return refuse(ctx, h.request_id, "", "a second hello on one connection");
  if (auto problem = admitted_problem(hello.name); !problem.empty())
    return refuse(ctx, h.request_id, hello.name, problem);
  if (!to_nonce(hello.nonce, ctx->their_nonce))
    return refuse(
        ctx, h.request_id, hello.name,
        "node '" + shown(hello.name) + "' sent no challenge (a node of another version?)");
  auto own = auth::fresh_nonce();
  if (!own) return refuse(ctx, h.request_id, hello.name, own.err().message());
  ctx->own_nonce = *own;
  ctx->their = hello;
  ctx->their.worker_address.clear();
  ctx->step = hello_step::ack_sent;
  hello_payload ack;
  ack.node_id = node_id;
  ack.host_id = host_id;
  ack.nonce.assign(ctx->own_nonce.begin(), ctx->own_nonce.end());
  const auto proof = proof_for(*ctx, /*as_acceptor=*/true);
  ack.proof.assign(proof.begin(), proof.end());
  send_hello(ctx->ep, frame_type::hello_ack, h.request_id, std::move(ack));
}

void node_bridge::impl::on_hello_ack(ep_context* ctx, const frame_header& h, hello_payload hello) {
  auto it = connects.find(h.request_id);
  if (ctx->step != hello_step::hello_sent || it == connects.end() || it->second->ctx != ctx)
    return refuse(ctx, h.request_id, "", "hello_ack for no connection attempt of this endpoint");
  if (auto problem = admitted_problem(hello.name); !problem.empty())
    return refuse(ctx, h.request_id, hello.name, problem);
  if (!to_nonce(hello.nonce, ctx->their_nonce))
    return refuse(
        ctx, h.request_id, hello.name,
        "node '" + shown(hello.name) + "' sent no challenge (a node of another version?)");
  ctx->their = hello;
  ctx->their.worker_address.clear();
  if (!proof_holds(hello, *ctx, /*from_acceptor=*/true))
    return refuse(ctx, h.request_id, hello.name,
                  "wrong proof for node '" + shown(hello.name) +
                      "' (it does not hold this cluster's secret: the nodes' cluster_secret "
                      "files differ)");
  ctx->step = hello_step::proof_sent;
  hello_payload proof;
  const auto mac = proof_for(*ctx, /*as_acceptor=*/false);
  proof.proof.assign(mac.begin(), mac.end());
  if (config.exchange_worker_address) proof.worker_address = worker_address;
  send_hello(ctx->ep, frame_type::hello_proof, h.request_id, std::move(proof));
}

void node_bridge::impl::on_hello_proof(ep_context* ctx, const frame_header& h,
                                       hello_payload hello) {
  if (ctx->step != hello_step::ack_sent)
    return refuse(ctx, h.request_id, hello.name, "hello_proof before hello");
  const std::string claimed = ctx->their.name;
  if (hello.name != claimed)
    return refuse(
        ctx, h.request_id, claimed,
        "hello_proof names node '" + shown(hello.name) + "', its hello '" + shown(claimed) + "'");
  if (!proof_holds(hello, *ctx, /*from_acceptor=*/false))
    return refuse(ctx, h.request_id, claimed,
                  "wrong proof for node '" + shown(claimed) +
                      "' (it does not hold this cluster's secret: a non-member, a replayed "
                      "hello, or the nodes' cluster_secret files differ)");
  auto* peer = add_peer(ctx->their, ctx->their.node_id);
  if (peer == nullptr) return refuse(ctx, h.request_id, "", taken_name(claimed));
  {
    std::lock_guard lock(mu_);
    refusals_.erase(claimed);
  }
  ctx->step = hello_step::done;
  const bool same_host = config.exchange_worker_address && !hello.worker_address.empty() &&
                         ctx->their.host_id == host_id;
  // Our worker-address endpoint opens before the welcome leaves: the
  // connector sends by address only after the welcome, and UCX pairs its
  // endpoint with this one, so its frames arrive attributed to it.
  bind_eps(*peer, ctx, same_host, hello.worker_address, /*use_address_now=*/false);
  hello_payload welcome;
  if (config.exchange_worker_address) welcome.worker_address = worker_address;
  send_hello(ctx->ep, frame_type::hello_welcome, h.request_id, std::move(welcome));
  set_up(*peer);
}

void node_bridge::impl::on_hello_welcome(ep_context* ctx, const frame_header& h,
                                         hello_payload hello) {
  auto it = connects.find(h.request_id);
  if (ctx->step != hello_step::proof_sent || it == connects.end() || it->second->ctx != ctx)
    return refuse(ctx, h.request_id, "", "hello_welcome for no connection attempt");
  auto op = it->second;
  connects.erase(it);
  auto* peer = add_peer(ctx->their, ctx->their.node_id);
  if (peer == nullptr) {
    schedule_close(ctx);
    return fail_connect_now(op, taken_name(ctx->their.name));
  }
  ctx->step = hello_step::done;
  const bool same_host = config.exchange_worker_address && !hello.worker_address.empty() &&
                         ctx->their.host_id == host_id;
  bind_eps(*peer, ctx, same_host, hello.worker_address, /*use_address_now=*/true);
  {
    std::lock_guard lock(mu_);
    op->done = true;
    op->peer = peer->name;
  }
  set_up(*peer);
}

peer_state* node_bridge::impl::peer_of(ucp_ep_h reply_ep) {
  if (reply_ep == nullptr) return nullptr;
  auto it = authed_eps.find(reply_ep);
  if (it == authed_eps.end()) return nullptr;
  auto* peer = peers_[it->second].get();
  if (reply_ep == peer->address_ep && peer->ep != reply_ep && !peer->down) {
    // The peer's first frame by address: its endpoint is paired with ours,
    // so ours carries frames to it from now on (the sequence numbers keep
    // the order across the switch).
    peer->ep = reply_ep;
    peer->by_address = true;
    std::lock_guard lock(mu_);
    peer->transports.clear();
  }
  return peer;
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

// Why add_peer refused `name` (it has a peer already).
std::string node_bridge::impl::taken_name(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end() || !peers_[it->second]->down)
    return "node '" + shown(name) + "' is already connected";
  return "node '" + shown(name) + "' went down earlier in this run (" +
         peers_[it->second]->down_reason +
         "); a node name connects once per run, except a standby node started again";
}

peer_state* node_bridge::impl::add_peer(const hello_payload& hello, uint64_t node_id_of_peer) {
  std::lock_guard lock(mu_);
  if (hello.name.empty()) return nullptr;
  if (auto it = by_name_.find(hello.name); it != by_name_.end()) {
    // A name whose peer went down may come back as a new process (another
    // node_id) where config.may_rejoin allows it: a fresh peer, the old
    // one stays down (peers_ never shrinks) and out of peers() and stats().
    auto& old = *peers_[it->second];
    if (!old.down || old.node_id == node_id_of_peer || !config.may_rejoin ||
        !config.may_rejoin(hello.name))
      return nullptr;
    old.replaced = true;
  }
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
                                 const std::vector<uint8_t>& address, bool use_address_now) {
  if (wire != nullptr) {
    wire->peer = static_cast<int>(peer.index);
    wire->connect = 0;
    peer.wire_ep = wire->ep;
    peer.ep = wire->ep;
    authed_eps[wire->ep] = peer.index;
  }
  if (same_host) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = reinterpret_cast<const ucp_address_t*>(address.data());
    std::string failure;
    if (auto* ctx = create_ep(p, static_cast<int>(peer.index), 0, failure, false)) {
      ctx->step = hello_step::done;
      authed_eps[ctx->ep] = peer.index;
      peer.address_ep = ctx->ep;
      if (use_address_now) {
        peer.ep = ctx->ep;
        peer.by_address = true;
        // The acceptor switches on our first frame by address: send one now
        // rather than at the next heartbeat.
        send_control(ctx->ep, frame_type::heartbeat, 0, false, static_cast<int>(peer.index));
      }
      if (config.log_endpoints) ucp_ep_print_info(ctx->ep, stderr);
    } else {
      log("node '" + peer.name + "': connecting by worker address failed (" + failure +
          "), keeping the listener connection");
    }
  }
}

void node_bridge::impl::set_up(peer_state& peer) {
  settle_until = clock::now() + std::chrono::seconds(2);
  {
    std::lock_guard lock(mu_);
    peer.up = true;
  }
  cv_.notify_all();
  log("node '" + peer.name + "' up" + (peer.by_address ? " (by worker address)" : ""));
  if (on_peer) on_peer(peer.name, true, "");
}

}  // namespace strata::transport
