#include "transport/node_bridge.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "transport/codec.hpp"
#include "transport/payloads.hpp"

namespace strata::transport {
namespace {

using clock = std::chrono::steady_clock;
constexpr uint16_t am_id = 7;  // our one active-message id

std::string default_host_id() {
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  std::error_code ec;
  const auto ns = std::filesystem::read_symlink("/proc/self/ns/net", ec);
  return std::string(host.data()) + "/" + (ec ? std::string("?") : ns.string());
}

}  // namespace

// One peer node. Fields above the marker belong to the progress thread;
// the others are guarded by impl::mu_ (counters are atomics).
struct peer_state {
  uint32_t index = 0;
  std::string name;
  uint64_t node_id = 0;
  ucp_ep_h ep = nullptr;       // where frames to the peer go
  ucp_ep_h wire_ep = nullptr;  // the listener connection (when ep is by address)
  uint64_t next_deliver = 1;
  std::map<uint64_t, inbound_frame> reorder;  // received, waiting for earlier seqs
  uint32_t rndv_in_flight = 0;
  bool leaving = false;  // goodbye seen; down once everything before it is delivered
  clock::time_point last_heard;
  bool by_address = false;
  std::string transports;  // UCX lanes of `ep` (written under mu_ on its first frame)
  // --- guarded by mu_
  bool up = false;
  bool down = false;
  std::string down_reason;
  uint64_t next_seq = 1;
  uint64_t outstanding = 0;
  uint64_t blocked_senders = 0;  // send calls waiting in cv_ for window space
  struct pending {
    node_bridge::reply_handler handler;
    uint64_t bytes;
    frame_type type;
    uint32_t target;
  };
  std::unordered_map<uint64_t, pending> pending_requests;
  // --- counters
  std::atomic<uint64_t> bytes_sent{0}, frames_sent{0}, bytes_received{0}, frames_received{0},
      rejected{0}, rndv_received{0};
};

// Context of one UCX endpoint for its error handler.
struct ep_context {
  node_bridge::impl* owner = nullptr;
  int peer = -1;         // -1: not yet bound (accepted, or connecting)
  uint64_t connect = 0;  // the connect op it belongs to, if any
  ucp_ep_h ep = nullptr;
  bool closed = false;
};

struct send_op {
  node_bridge::impl* owner = nullptr;
  uint32_t peer = 0;
  std::array<std::byte, frame_header_bytes> header{};
  std::vector<std::byte> payload;
  uint64_t bytes = 0;
  bool release_when_sent = true;  // requests release on their reply instead
  bool use_wire_ep = false;       // hello: over the listener connection
  ucp_ep_h ep_override = nullptr;
};

struct connect_op {
  uint64_t id = 0;
  std::string host;
  uint16_t port = 0;
  ep_context* ctx = nullptr;
  bool done = false;
  std::string peer;  // set on success
  std::optional<error> failure;
};

struct node_bridge::impl {
  bridge_config config;
  inbound_handler on_inbound;
  peer_handler on_peer;
  uint64_t node_id = 0;
  std::string host_id;
  memory_support memory;

  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
  std::vector<uint8_t> worker_address;
  uint16_t port = 0;
  int worker_fd = -1;
  int wake_fd = -1;
  std::thread thread;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<peer_state>> peers_;  // never shrinks
  std::unordered_map<std::string, uint32_t> by_name_;
  std::deque<std::unique_ptr<send_op>> queue_;
  std::deque<std::shared_ptr<connect_op>> connects_queued_;
  uint64_t next_request_id_ = 1;
  bool stopping_ = false;
  bool stopped_ = false;
  std::atomic<uint64_t> rejected_unknown{0}, peers_down{0};

  // progress thread only
  std::unordered_map<uint64_t, uint32_t> by_node_id;
  std::unordered_map<uint64_t, std::shared_ptr<connect_op>> connects;
  std::vector<std::unique_ptr<ep_context>> ep_contexts;
  std::vector<ep_context*> to_close;
  // Frames handed to UCX whose completion callback has not run yet. UCX
  // only holds a raw pointer (the request's user data); a send still in
  // flight when the worker is destroyed (a peer that stopped reading, past
  // shutdown's deadline) never gets its callback, so the ops are owned here
  // and the rest are freed after ucp_worker_destroy.
  std::unordered_map<send_op*, std::unique_ptr<send_op>> in_flight;
  uint64_t sends_in_flight = 0;
  uint64_t posted = 0;  // frames handed to UCX
  uint64_t next_connect_id = 1;

  void log(const std::string& line) const {
    std::cerr << "strata transport [" + config.node_name + "]: " + line + "\n" << std::flush;
  }

  void wake() const {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // --- set-up -----------------------------------------------------------------

  status init() {
    ucp_config_t* ucp_config = nullptr;
    if (auto s = ucp_config_read(nullptr, nullptr, &ucp_config); s != UCS_OK) {
      return error(errc::unavailable, std::string("UCX config: ") + ucs_status_string(s));
    }
    // This context's setting, not the process environment (other threads
    // read it; children would inherit it), and only where the user's
    // environment chose nothing: UCX 1.13's CMA transport (same-host
    // rendezvous by process_vm_readv) aborts the whole process when the
    // peer dies mid-transfer ("No such process" is fatal there), so a
    // killed node would take its peers down; same-host rendezvous goes
    // through shared-memory fragments instead. (The listener's address
    // reuse is a connection-manager option that ucp_config_modify does not
    // reach in UCX 1.13: the strata binary sets UCX_TCP_CM_REUSEADDR at
    // start, deploy/main.cpp.)
    auto set_default = [&](const char* env, const char* name, const char* value) -> status {
      if (::getenv(env) != nullptr) return {};
      if (auto s = ucp_config_modify(ucp_config, name, value); s != UCS_OK) {
        ucp_config_release(ucp_config);
        return error(errc::unavailable, std::string("UCX config ") + name + "=" + value + ": " +
                                            ucs_status_string(s));
      }
      return {};
    };
    STRATA_TRY(set_default("UCX_TLS", "TLS", "^cma"));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = config.node_name.c_str();
    const auto s = ucp_init(&params, ucp_config, &context);
    ucp_config_release(ucp_config);
    if (s != UCS_OK) {
      return error(errc::unavailable, std::string("ucp_init: ") + ucs_status_string(s));
    }
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) == UCS_OK) {
      memory.host = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_HOST)) != 0;
      memory.cuda = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    }
    log(memory.cuda ? "UCX supports CUDA memory: device rows go to UCX directly (GPUDirect)"
                    : "UCX has no CUDA memory support: device rows are staged through host "
                      "buffers");

    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches it
    if (auto ws = ucp_worker_create(context, &wparams, &worker); ws != UCS_OK) {
      return error(errc::unavailable, std::string("ucp_worker_create: ") + ucs_status_string(ws));
    }
    ucp_address_t* address = nullptr;
    size_t address_length = 0;
    if (auto as = ucp_worker_get_address(worker, &address, &address_length); as != UCS_OK) {
      return error(errc::unavailable,
                   std::string("ucp_worker_get_address: ") + ucs_status_string(as));
    }
    const auto* a = reinterpret_cast<const uint8_t*>(address);
    worker_address.assign(a, a + address_length);
    ucp_worker_release_address(worker, address);
    if (auto es = ucp_worker_get_efd(worker, &worker_fd); es != UCS_OK) {
      return error(errc::unavailable, std::string("ucp_worker_get_efd: ") + ucs_status_string(es));
    }
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) return error(errc::unavailable, "eventfd failed");

    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    am.id = am_id;
    am.flags = UCP_AM_FLAG_WHOLE_MSG;
    am.cb = &impl::on_am;
    am.arg = this;
    if (auto hs = ucp_worker_set_am_recv_handler(worker, &am); hs != UCS_OK) {
      return error(errc::unavailable,
                   std::string("ucp_worker_set_am_recv_handler: ") + ucs_status_string(hs));
    }

    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(config.listen_port);
    if (::inet_pton(AF_INET, config.listen_address.c_str(), &sa.sin_addr) != 1) {
      return error(errc::invalid_argument,
                   "listen address '" + config.listen_address + "' is not an IPv4 address");
    }
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
    lp.sockaddr.addrlen = sizeof sa;
    lp.conn_handler.cb = &impl::on_connection;
    lp.conn_handler.arg = this;
    // A fixed port whose last connections are still in TIME_WAIT (a node
    // restarted within a minute) is busy for a while: wait for it, bounded.
    const auto busy_deadline = std::chrono::steady_clock::now() + config.listen_busy_wait;
    bool announced = false;
    for (;;) {
      const auto ls = ucp_listener_create(worker, &lp, &listener);
      if (ls == UCS_OK) break;
      if (ls != UCS_ERR_BUSY || config.listen_port == 0 ||
          std::chrono::steady_clock::now() >= busy_deadline)
        return error(errc::unavailable, "cannot listen on " + config.listen_address + ":" +
                                            std::to_string(config.listen_port) + ": " +
                                            ucs_status_string(ls));
      if (!announced) {
        log("port " + std::to_string(config.listen_port) +
            " is busy (a previous run's connections in TIME_WAIT?); retrying for up to " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(config.listen_busy_wait)
                               .count()) +
            " s");
        announced = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    ucp_listener_attr_t la{};
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (auto qs = ucp_listener_query(listener, &la); qs != UCS_OK) {
      return error(errc::unavailable, std::string("ucp_listener_query: ") + ucs_status_string(qs));
    }
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
    log("listening on " + config.listen_address + ":" + std::to_string(port));
    return {};
  }

  // --- endpoints ----------------------------------------------------------------

  ep_context* new_ep_context(int peer, uint64_t connect) {
    auto ctx = std::make_unique<ep_context>();
    ctx->owner = this;
    ctx->peer = peer;
    ctx->connect = connect;
    ep_contexts.push_back(std::move(ctx));
    return ep_contexts.back().get();
  }

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* ctx = static_cast<ep_context*>(arg);
    if (ctx->closed) return;
    ctx->owner->ep_failed(ctx, std::string("connection error: ") + ucs_status_string(status));
  }

  void ep_failed(ep_context* ctx, const std::string& reason) {
    if (ctx->peer >= 0) {
      mark_down(*peers_[ctx->peer], reason);
    } else if (ctx->connect != 0) {
      fail_connect(ctx->connect, reason);
    }
    schedule_close(ctx);
  }

  void schedule_close(ep_context* ctx) {
    if (ctx == nullptr || ctx->closed) return;
    ctx->closed = true;
    to_close.push_back(ctx);
  }

  void close_scheduled() {
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

  ep_context* context_of(ucp_ep_h ep) {
    for (auto& c : ep_contexts) {
      if (c->ep == ep && !c->closed) return c.get();
    }
    return nullptr;
  }

  // `peer_errors`: UCP_ERR_HANDLING_MODE_PEER with our error handler. UCX
  // 1.13's shared-memory transports cannot detect peer failure, so an
  // endpoint asking for it never uses them: worker-address endpoints go
  // without (the listener connection beside them, kept open, and the
  // heartbeat detect the failure; docs/transport.md).
  ep_context* create_ep(ucp_ep_params_t& params, int peer, uint64_t connect, std::string& failure,
                        bool peer_errors = true) {
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

  static void on_connection(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<impl*>(arg);
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = request;
    std::string failure;
    if (self->create_ep(p, -1, 0, failure) == nullptr) {
      self->log("cannot accept a connection: " + failure);
    }
  }

  void start_connect(const std::shared_ptr<connect_op>& op) {
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

  void fail_connect(uint64_t id, const std::string& reason) {
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

  // --- sending --------------------------------------------------------------------

  std::vector<std::byte> hello_bytes() const {
    hello_payload h{config.node_name, node_id, host_id,
                    config.exchange_worker_address ? worker_address : std::vector<uint8_t>{}};
    return encode_payload(h);
  }

  // Control frames (hello, heartbeat, goodbye) from the progress thread.
  void send_control(ucp_ep_h ep, frame_type type, uint64_t request_id, bool reply_flag,
                    int peer = -1) {
    auto op = std::make_unique<send_op>();
    op->owner = this;
    op->peer = peer < 0 ? 0 : static_cast<uint32_t>(peer);
    frame_header h;
    h.type = type;
    h.sender = node_id;
    h.request_id = request_id;
    if (type == frame_type::hello || type == frame_type::hello_ack) op->payload = hello_bytes();
    seal(h, op->payload);
    encode_header(h, op->header);
    op->bytes = frame_header_bytes + op->payload.size();
    op->ep_override = ep;
    post(std::move(op), reply_flag, peer < 0 ? nullptr : peers_[peer].get());
  }

  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<send_op*>(user_data);
    impl* owner = op->owner;
    owner->sent(owner->take_in_flight(op), status);
    ucp_request_free(request);
  }

  std::unique_ptr<send_op> take_in_flight(send_op* op) {
    auto node = in_flight.extract(op);
    return std::move(node.mapped());
  }

  void sent(std::unique_ptr<send_op> op, ucs_status_t status) {
    --sends_in_flight;
    if (op->release_when_sent && op->ep_override == nullptr) release(*peers_[op->peer], op->bytes);
    if (status != UCS_OK && status != UCS_ERR_CANCELED && op->ep_override == nullptr) {
      mark_down(*peers_[op->peer], std::string("send failed: ") + ucs_status_string(status));
    }
  }

  void release(peer_state& p, uint64_t bytes) {
    {
      std::lock_guard lock(mu_);
      p.outstanding -= std::min(p.outstanding, bytes);
    }
    cv_.notify_all();
  }

  void post(std::unique_ptr<send_op> op, bool reply_flag, peer_state* peer) {
    ucp_ep_h ep = op->ep_override != nullptr ? op->ep_override : (peer ? peer->ep : nullptr);
    if (ep == nullptr) {
      if (op->release_when_sent && op->ep_override == nullptr && peer) release(*peer, op->bytes);
      return;
    }
    if (peer != nullptr) {
      peer->bytes_sent += op->bytes;
      ++peer->frames_sent;
    }
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = reply_flag ? UCP_AM_SEND_FLAG_REPLY : 0;
    p.cb.send = &impl::on_sent;
    p.user_data = op.get();
    ++sends_in_flight;
    ++posted;
    auto* raw = op.get();
    in_flight.emplace(raw, std::move(op));
    auto* r = ucp_am_send_nbx(ep, am_id, raw->header.data(), raw->header.size(),
                              raw->payload.data(), raw->payload.size(), &p);
    if (r == nullptr) {
      sent(take_in_flight(raw), UCS_OK);
    } else if (UCS_PTR_IS_ERR(r)) {
      sent(take_in_flight(raw), UCS_PTR_STATUS(r));
    }
  }

  void drain_queue() {
    std::deque<std::unique_ptr<send_op>> batch;
    {
      std::lock_guard lock(mu_);
      batch.swap(queue_);
    }
    for (auto& op : batch) {
      auto& peer = *peers_[op->peer];
      post(std::move(op), false, &peer);
    }
  }

  // --- receiving --------------------------------------------------------------------

  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param) {
    static_cast<impl*>(arg)->received(header, header_length, data, length, param);
    return UCS_OK;
  }

  void reject(peer_state* peer, const std::string& reason) {
    if (peer == nullptr) {
      ++rejected_unknown;
      log("rejected a frame from an unknown sender: " + reason);
      return;
    }
    ++peer->rejected;
    log("rejected a frame from node '" + peer->name + "': " + reason + "; closing the connection");
    mark_down(*peer, "rejected frame: " + reason);
  }

  struct rndv_context {
    impl* owner;
    uint32_t peer;
    frame_header header;
    payload_bytes payload;
  };

  static void on_rndv_done(void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<rndv_context> ctx(static_cast<rndv_context*>(user_data));
    auto& peer = *ctx->owner->peers_[ctx->peer];
    --peer.rndv_in_flight;
    if (status != UCS_OK) {
      ctx->owner->mark_down(peer, std::string("receive failed: ") + ucs_status_string(status));
    } else {
      ctx->owner->complete(peer, ctx->header, std::move(ctx->payload));
    }
    ucp_request_free(request);
  }

  void received(const void* header, size_t header_length, void* data, size_t length,
                const ucp_am_recv_param_t* param) {
    const std::span<const std::byte> hbytes(static_cast<const std::byte*>(header), header_length);
    auto h = check_arrival(hbytes, length, config.max_payload_bytes);
    peer_state* peer = nullptr;
    if (header_length >= frame_header_bytes) {
      uint64_t sender = 0;
      std::memcpy(&sender, hbytes.data() + 8, sizeof sender);
      if (auto it = by_node_id.find(sender); it != by_node_id.end())
        peer = peers_[it->second].get();
    }
    const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (!h) return reject(peer, h.err().message());
    if (h->type == frame_type::hello || h->type == frame_type::hello_ack) {
      if (rndv) return reject(peer, "hello by rendezvous");
      std::vector<std::byte> payload(static_cast<std::byte*>(data),
                                     static_cast<std::byte*>(data) + length);
      if (auto s = check_payload(*h, payload); !s) return reject(peer, s.err().message());
      ucp_ep_h reply_ep =
          (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
      return handle_hello(*h, payload, reply_ep);
    }
    if (peer == nullptr) return reject(nullptr, "sender " + std::to_string(h->sender) + " unknown");
    if (peer->down) return;  // late frames of a closed connection
    if (rndv) {
      auto ctx = std::make_unique<rndv_context>();
      ctx->owner = this;
      ctx->peer = peer->index;
      ctx->header = *h;
      ctx->payload.resize(length);
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = &impl::on_rndv_done;
      p.user_data = ctx.get();
      ++peer->rndv_in_flight;
      ++peer->rndv_received;
      auto* raw = ctx.release();
      auto* r = ucp_am_recv_data_nbx(worker, data, raw->payload.data(), length, &p);
      if (r == nullptr) {
        std::unique_ptr<rndv_context> done(raw);
        --peer->rndv_in_flight;
        complete(*peer, done->header, std::move(done->payload));
      } else if (UCS_PTR_IS_ERR(r)) {
        std::unique_ptr<rndv_context> done(raw);
        --peer->rndv_in_flight;
        mark_down(*peer, std::string("receive failed: ") + ucs_status_string(UCS_PTR_STATUS(r)));
      }
      return;
    }
    payload_bytes payload(static_cast<std::byte*>(data), static_cast<std::byte*>(data) + length);
    complete(*peer, *h, std::move(payload));
  }

  void complete(peer_state& peer, const frame_header& h, payload_bytes payload) {
    if (peer.down) return;
    if (auto s = check_payload(h, payload); !s) return reject(&peer, s.err().message());
    peer.last_heard = clock::now();
    if (peer.transports.empty() && peer.ep != nullptr) {
      // Lanes are final once the peer answered over them.
      auto lanes = lanes_of(peer.ep);
      std::lock_guard lock(mu_);
      peer.transports = std::move(lanes);
    }
    peer.bytes_received += frame_header_bytes + payload.size();
    ++peer.frames_received;
    if (!is_sequenced(h.type)) {
      if (h.type == frame_type::goodbye) {
        peer.leaving = true;
        maybe_leave(peer);
      }
      return;  // heartbeat: last_heard is all it does
    }
    if (h.seq < peer.next_deliver || peer.reorder.count(h.seq) != 0) {
      return reject(&peer, "duplicate frame seq " + std::to_string(h.seq));
    }
    peer.reorder.emplace(h.seq, inbound_frame{peer.name, h, std::move(payload)});
    while (!peer.reorder.empty() && peer.reorder.begin()->first == peer.next_deliver) {
      auto frame = std::move(peer.reorder.begin()->second);
      peer.reorder.erase(peer.reorder.begin());
      ++peer.next_deliver;
      deliver(peer, std::move(frame));
      if (peer.down) return;
    }
    maybe_leave(peer);
  }

  void maybe_leave(peer_state& peer) {
    if (peer.leaving && peer.reorder.empty() && peer.rndv_in_flight == 0) {
      mark_down(peer, "node left (goodbye)");
    }
  }

  void deliver(peer_state& peer, inbound_frame frame) {
    const auto type = frame.header.type;
    if (type == frame_type::reply || type == frame_type::reply_error) {
      std::optional<peer_state::pending> req;
      {
        std::lock_guard lock(mu_);
        auto it = peer.pending_requests.find(frame.header.request_id);
        if (it != peer.pending_requests.end()) {
          req = std::move(it->second);
          peer.pending_requests.erase(it);
          peer.outstanding -= std::min(peer.outstanding, req->bytes);
        }
      }
      cv_.notify_all();
      if (!req) {
        return reject(&peer, "reply to unknown request " + std::to_string(frame.header.request_id));
      }
      req->handler(std::move(frame));
      return;
    }
    if (on_inbound) on_inbound(std::move(frame));
  }

  void handle_hello(const frame_header& h, std::span<const std::byte> payload, ucp_ep_h reply_ep) {
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
    send_control(peer->ep, frame_type::hello_ack, h.request_id, false,
                 static_cast<int>(peer->index));
    set_up(*peer);
  }

  void fail_connect_now(const std::shared_ptr<connect_op>& op, const std::string& reason) {
    {
      std::lock_guard lock(mu_);
      op->done = true;
      op->failure = error(errc::unavailable, "cannot connect to " + op->host + ":" +
                                                 std::to_string(op->port) + ": " + reason);
    }
    cv_.notify_all();
  }

  peer_state* add_peer(const hello_payload& hello, uint64_t node_id_of_peer) {
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

  void bind_eps(peer_state& peer, ep_context* wire, bool same_host,
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

  // The UCX transports of an endpoint's lanes ("posix/memory,tcp/lo"), from
  // ucp_ep_print_info (UCX 1.13 has no query for them).
  static std::string lanes_of(ucp_ep_h ep) {
    char* text = nullptr;
    size_t size = 0;
    FILE* out = ::open_memstream(&text, &size);
    if (out == nullptr) return {};
    ucp_ep_print_info(ep, out);
    std::fclose(out);
    std::string info(text, size);
    std::free(text);
    // Lines like "lane[1]:  1:tcp/lo.0 md[1] -> ..." ("lane[0]: cm rdmacm" has no transport).
    std::string lanes;
    std::istringstream lines(info);
    for (std::string line; std::getline(lines, line);) {
      const size_t lane = line.find("lane[");
      if (lane == std::string::npos) continue;
      std::istringstream words(line.substr(line.find("]:", lane) + 2));
      std::string first;
      words >> first;
      const size_t colon = first.find(':');
      if (colon == std::string::npos) continue;
      const auto name = first.substr(colon + 1);
      if (lanes.find(name) == std::string::npos) lanes += (lanes.empty() ? "" : ",") + name;
    }
    return lanes;
  }

  void set_up(peer_state& peer) {
    {
      std::lock_guard lock(mu_);
      peer.up = true;
    }
    cv_.notify_all();
    log("node '" + peer.name + "' up" + (peer.by_address ? " (by worker address)" : ""));
    if (on_peer) on_peer(peer.name, true, "");
  }

  // --- failure ----------------------------------------------------------------------

  void mark_down(peer_state& peer, const std::string& reason) {
    std::unordered_map<uint64_t, peer_state::pending> pending;
    {
      std::lock_guard lock(mu_);
      if (peer.down) return;
      peer.down = true;
      peer.up = false;
      peer.down_reason = reason;
      pending.swap(peer.pending_requests);
      peer.outstanding = 0;
    }
    cv_.notify_all();
    ++peers_down;
    log("node '" + peer.name + "' down: " + reason);
    for (auto& c : ep_contexts) {
      if (!c->closed && c->peer == static_cast<int>(peer.index)) schedule_close(c.get());
    }
    peer.ep = nullptr;
    peer.wire_ep = nullptr;
    peer.reorder.clear();
    for (auto& [id, req] : pending) {
      req.handler(error(errc::unavailable, "node '" + peer.name + "' is down (" + reason +
                                               "): request " + std::string(to_string(req.type)) +
                                               " to target " + std::to_string(req.target) +
                                               " failed"));
    }
    if (on_peer) on_peer(peer.name, false, reason);
  }

  void heartbeat(clock::time_point now) {
    std::vector<peer_state*> live;
    {
      std::lock_guard lock(mu_);
      for (auto& p : peers_) {
        if (p->up && !p->down) live.push_back(p.get());
      }
    }
    for (auto* p : live) {
      if (now - p->last_heard > config.heartbeat_timeout) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - p->last_heard).count();
        mark_down(*p, "no frame for " + std::to_string(ms) + " ms (heartbeat timeout " +
                          std::to_string(config.heartbeat_timeout.count()) + " ms)");
        continue;
      }
      send_control(p->ep, frame_type::heartbeat, 0, false, static_cast<int>(p->index));
    }
  }

  // --- the progress thread ----------------------------------------------------------

  void run() {
    auto next_beat = clock::now() + config.heartbeat_interval;
    auto last_activity = clock::now();
    uint32_t idle_polls = 0;  // bounds the spin when the clock is coarse or the CPU busy
    while (true) {
      {
        std::deque<std::shared_ptr<connect_op>> connects_now;
        bool stop = false;
        {
          std::lock_guard lock(mu_);
          connects_now.swap(connects_queued_);
          stop = stopping_;
        }
        if (stop) break;
        for (auto& op : connects_now) start_connect(op);
      }
      const uint64_t posted_before = posted;
      drain_queue();
      bool active = posted != posted_before;
      while (ucp_worker_progress(worker) != 0) active = true;
      close_scheduled();
      const auto now = clock::now();
      if (active) {
        last_activity = now;
        idle_polls = 0;
      }
      if (now >= next_beat) {
        heartbeat(now);
        next_beat = now + config.heartbeat_interval;
      }
      bool waiting_on_peers = sends_in_flight > 0;
      {
        std::lock_guard lock(mu_);
        if (!queue_.empty() || !connects_queued_.empty() || stopping_) continue;
        for (auto& p : peers_) waiting_on_peers |= p->outstanding > 0 || p->rndv_in_flight > 0;
      }
      // Spin a little after activity: the next frame of a burst usually
      // follows within microseconds, and a sleep would add a wake-up to
      // each one.
      if (now - last_activity < config.spin_after_activity && ++idle_polls < 1000) continue;
      idle_polls = 0;
      if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
      // Some transports' rendezvous steps do not signal the event fd: with
      // frames in flight, sleep at most 1 ms; idle, until the next heartbeat.
      const auto wait_ms =
          waiting_on_peers
              ? int64_t{1}
              : std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - clock::now())
                        .count() +
                    1;
      std::array<pollfd, 2> fds{pollfd{worker_fd, POLLIN, 0}, pollfd{wake_fd, POLLIN, 0}};
      ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait_ms, 0)));
      if (fds[1].revents & POLLIN) {
        uint64_t v;
        [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof v);
      }
    }
    shutdown();
  }

  void shutdown() {
    std::vector<peer_state*> live;
    {
      std::lock_guard lock(mu_);
      for (auto& p : peers_) {
        if (p->up && !p->down) live.push_back(p.get());
      }
    }
    drain_queue();
    for (auto* p : live)
      send_control(p->ep, frame_type::goodbye, 0, false, static_cast<int>(p->index));
    const auto deadline = clock::now() + std::chrono::seconds(2);
    while (sends_in_flight > 0 && clock::now() < deadline) ucp_worker_progress(worker);
    for (auto& c : ep_contexts) schedule_close(c.get());
    close_scheduled();
    const auto close_deadline = clock::now() + std::chrono::milliseconds(200);
    while (clock::now() < close_deadline) ucp_worker_progress(worker);
    for (auto& p : peers_) mark_down(*p, "this node stopped");
    for (auto& [id, op] : connects) fail_connect_now(op, "this node stopped");
    connects.clear();
  }

  void destroy() {
    if (listener != nullptr) ucp_listener_destroy(listener);
    if (worker != nullptr) ucp_worker_destroy(worker);
    in_flight.clear();  // no callback runs after the worker is gone
    if (context != nullptr) ucp_cleanup(context);
    if (wake_fd >= 0) ::close(wake_fd);
    listener = nullptr;
    worker = nullptr;
    context = nullptr;
    wake_fd = -1;
  }

  // --- public side ------------------------------------------------------------------

  status enqueue(const std::string& name, frame_type type, uint32_t target, uint64_t request_id,
                 std::vector<std::byte> payload, reply_handler on_reply) {
    auto op = std::make_unique<send_op>();
    op->owner = this;
    op->payload = std::move(payload);
    op->bytes = frame_header_bytes + op->payload.size();
    op->release_when_sent = !on_reply;
    const bool is_reply = type == frame_type::reply || type == frame_type::reply_error;
    if (!is_reply && std::this_thread::get_id() == thread.get_id()) {
      // Waiting for window space here would wait for this very thread.
      return error(errc::invalid_argument,
                   "node '" + config.node_name + "': " + std::string(to_string(type)) +
                       " sent from a transport handler; handlers may only reply or hand off");
    }
    {
      std::unique_lock lock(mu_);
      auto it = by_name_.find(name);
      if (it == by_name_.end()) {
        return error(errc::not_found, "no connection to node '" + name + "'");
      }
      auto& peer = *peers_[it->second];
      while (!is_reply && !peer.down && !stopping_ && peer.outstanding > 0 &&
             peer.outstanding + op->bytes > config.max_outstanding_bytes) {
        ++peer.blocked_senders;
        cv_.wait(lock);
        --peer.blocked_senders;
      }
      if (peer.down || stopping_) {
        return error(errc::unavailable, "node '" + name + "' is down (" +
                                            (stopping_ ? "this node stopped" : peer.down_reason) +
                                            "): " + std::string(to_string(type)) + " to target " +
                                            std::to_string(target) + " not sent");
      }
      frame_header h;
      h.type = type;
      h.sender = node_id;
      h.seq = peer.next_seq++;
      h.request_id = request_id != 0 ? request_id : (on_reply ? next_request_id_++ : 0);
      h.target = target;
      seal(h, op->payload);
      if (config.outgoing_fault) config.outgoing_fault(h, op->payload);
      encode_header(h, op->header);
      op->peer = peer.index;
      peer.outstanding += op->bytes;
      if (on_reply) {
        peer.pending_requests.emplace(
            h.request_id, peer_state::pending{std::move(on_reply), op->bytes, type, target});
      }
      queue_.push_back(std::move(op));
    }
    wake();
    return {};
  }
};

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
    return error(errc::unavailable, "node '" + peer + "' did not connect within " +
                                        std::to_string(timeout.count()) + " ms");
  }
  auto& p = *impl_->peers_[impl_->by_name_.at(peer)];
  if (p.down)
    return error(errc::unavailable, "node '" + peer + "' is down (" + p.down_reason + ")");
  return {};
}

status node_bridge::request(const std::string& peer, frame_type type, uint32_t target,
                            std::vector<std::byte> payload, reply_handler on_reply) {
  STRATA_ASSERT(on_reply, "request without a reply handler");
  return impl_->enqueue(peer, type, target, 0, std::move(payload), std::move(on_reply));
}

status node_bridge::send(const std::string& peer, frame_type type, uint32_t target,
                         std::vector<std::byte> payload) {
  return impl_->enqueue(peer, type, target, 0, std::move(payload), {});
}

void node_bridge::reply(const std::string& peer, uint64_t request_id, frame_type type,
                        std::vector<std::byte> payload) {
  (void)impl_->enqueue(peer, type, 0, request_id, std::move(payload), {});
}

std::vector<std::string> node_bridge::peers() const {
  std::lock_guard lock(impl_->mu_);
  std::vector<std::string> out;
  for (auto& p : impl_->peers_) out.push_back(p->name);
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
  std::lock_guard lock(impl_->mu_);
  for (auto& p : impl_->peers_) {
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
