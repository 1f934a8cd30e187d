// Internal to the node bridge: the state behind node_bridge (its pimpl) and
// the bookkeeping types it shares between its source files. Nothing outside
// transport/node_bridge*.cpp includes this header.
//
// Ownership: node_bridge owns its impl; impl owns the UCX context, worker,
// listener and progress thread, every peer_state (peers_ never shrinks),
// every ep_context (ep_contexts), every send_op and rendezvous receive
// handed to UCX (in_flight, rndv_pending: freed after ucp_worker_destroy
// when a callback never came).
// UCX holds only raw pointers to them (request user data, handler args).
//
// Threads: one progress thread (impl::run) owns the UCX worker
// (UCS_THREAD_MODE_SINGLE) and the fields marked "progress thread only";
// the callers of node_bridge's methods (any thread) reach the rest only
// under impl::mu_, and wait on impl::cv_ for window space, connections and
// peers; they wake the progress thread through wake_fd. Counters are atomics.
//
// The member functions are defined by concern:
//   node_bridge_init.cpp      UCX context, worker, active-message handler, listener
//   node_bridge_connect.cpp   endpoints, outgoing connections, hello, peers coming up
//   node_bridge_send.cpp      control frames, posting to UCX, back-pressure, enqueue
//   node_bridge_receive.cpp   active messages, rendezvous, ordering, delivery, replies
//   node_bridge_progress.cpp  the progress thread, heartbeat, failure, shutdown
//   node_bridge.cpp           node_bridge's own methods, stats and stop
#pragma once

#include <ucp/api/ucp.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/codec.hpp"
#include "transport/node_bridge.hpp"
#include "transport/payloads.hpp"

namespace strata::transport {

using clock = std::chrono::steady_clock;
inline constexpr uint16_t am_id = 7;  // our one active-message id

struct send_op;

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
  // Flow control (docs/transport.md, "Back-pressure"). Receiver side: the
  // last credit sent (every seq up to it delivered), the frames (and bytes)
  // that arrived above it, and how many of those were delivered since.
  uint64_t credited = 0;
  uint64_t window_frames = 0, window_bytes = 0;
  uint64_t delivered_frames = 0, delivered_bytes = 0;
  bool credit_owed = false;  // in impl::credits_owed
  // Sender side: the peer's last credit, what was posted above it (seq,
  // bytes) and the frames waiting for credit, in seq order.
  uint64_t acked = 0;
  uint64_t last_posted_seq = 0;
  std::deque<std::pair<uint64_t, uint64_t>> unacked;
  uint64_t unacked_bytes = 0;
  std::deque<std::unique_ptr<send_op>> held;
  uint32_t rndv_in_flight = 0;
  bool leaving = false;  // goodbye seen; down once everything before it is delivered
  clock::time_point last_heard;
  bool by_address = false;
  // Our endpoint to the peer's worker address, opened once it authenticated;
  // frames go over it once the peer's first frame arrived over it (then the
  // peer opened its side: docs/multi-node.md, "Membership").
  ucp_ep_h address_ep = nullptr;
  std::string transports;  // UCX lanes of `ep` (written under mu_ on its first frame)
  // --- guarded by mu_
  bool up = false;
  bool down = false;
  bool replaced = false;  // down, and its name came back as a new peer (may_rejoin)
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
  // Flow control: peaks of the reorder buffer and of the frames/bytes held
  // above the last credit (never above the window), frames that waited for
  // credit here, frames waiting now, and peers cut off for exceeding it.
  std::atomic<uint64_t> reorder_peak{0}, window_peak_frames{0}, window_peak_bytes{0},
      credit_waits{0}, held_for_credit{0}, window_violations{0};
};

// Where one endpoint's hello exchange stands (node_bridge_connect.cpp).
enum class hello_step : uint8_t {
  none,        // accepted, no hello yet (or a worker-address endpoint)
  hello_sent,  // connector: waits for hello_ack
  ack_sent,    // acceptor: waits for hello_proof
  proof_sent,  // connector: waits for hello_welcome
  done,        // authenticated (peer bound)
  refused,     // refused: every frame dropped until it closes
};

// Context of one UCX endpoint: its error handler's argument and its hello
// exchange.
struct ep_context {
  node_bridge::impl* owner = nullptr;
  int peer = -1;         // -1: not yet bound (accepted, or connecting)
  uint64_t connect = 0;  // the connect op it belongs to, if any
  ucp_ep_h ep = nullptr;
  bool closed = false;
  std::string address;  // the other end's "ip:port" (for messages), when known
  hello_step step = hello_step::none;
  auth::nonce own_nonce{};
  auth::nonce their_nonce{};
  hello_payload their;  // what the other side said its name, id and host are
  clock::time_point opened = clock::now();  // a hello unfinished after heartbeat_timeout closes
};

struct send_op {
  node_bridge::impl* owner = nullptr;
  uint32_t peer = 0;
  std::array<std::byte, frame_header_bytes> header{};
  // Sent from where it is (the payload keeps its message's arrays alive
  // until on_sent): one contiguous piece, or `iov` over its pieces.
  frame_payload payload;
  std::vector<ucp_dt_iov_t> iov;
  uint64_t bytes = 0;
  uint64_t seq = 0;               // sequenced frames (flow control)
  bool release_when_sent = true;  // requests release on their reply instead
  bool use_wire_ep = false;       // hello: over the listener connection
  ucp_ep_h ep_override = nullptr;
  bool close_after = false;  // hello_refused: close ep_override once sent
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
  // node_bridge::expect_departures: a peer whose connection closes is
  // logged as leaving, not as down.
  std::atomic<bool> departures_expected_{false};
  // Progress thread only: shutdown() has logged this node's goodbye to the
  // peers still up; a peer going down after that is not logged again.
  bool stop_announced_ = false;
  bool stopped_ = false;
  std::atomic<uint64_t> rejected_unknown{0}, peers_down{0};
  std::atomic<uint64_t> unauthenticated{0}, refused_handshakes{0};
  // The last refusal of each claimed node name (hello exchanges), for
  // wait_for_peer's error: a node with another secret is named, not just late.
  std::unordered_map<std::string, std::string> refusals_;

  // progress thread only
  std::unordered_map<uint64_t, uint32_t> by_node_id;
  // Endpoints whose frames are attributed to a peer: its listener
  // connection once the hello exchange proved it a member, and our
  // worker-address endpoint to it (UCX pairs it with the peer's endpoint to
  // us, so frames the peer sends by address arrive with it as reply_ep).
  // A frame over any other endpoint is dropped (docs/multi-node.md).
  std::unordered_map<ucp_ep_h, uint32_t> authed_eps;
  // Until then the progress thread polls every millisecond instead of
  // sleeping until the next heartbeat: a new worker-address endpoint's
  // wire-up (its first frame with the reply flag needs the peer's endpoint
  // id) does not always signal the event fd, and an idle node slept
  // through it (frames at a stop right after connecting were lost).
  clock::time_point settle_until{};
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

  status init();

  // --- endpoints ----------------------------------------------------------------

  ep_context* new_ep_context(int peer, uint64_t connect);

  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status);

  void ep_failed(ep_context* ctx, const std::string& reason);

  void schedule_close(ep_context* ctx);

  void close_scheduled();

  ep_context* context_of(ucp_ep_h ep);

  // `peer_errors`: UCP_ERR_HANDLING_MODE_PEER with our error handler. UCX
  // 1.13's shared-memory transports cannot detect peer failure, so an
  // endpoint asking for it never uses them: worker-address endpoints go
  // without (the listener connection beside them, kept open, and the
  // heartbeat detect the failure; docs/transport.md).
  ep_context* create_ep(ucp_ep_params_t& params, int peer, uint64_t connect, std::string& failure,
                        bool peer_errors = true);

  static void on_connection(ucp_conn_request_h request, void* arg);

  void start_connect(const std::shared_ptr<connect_op>& op);

  // `code`: invalid_argument for a refused hello (retrying cannot help).
  void fail_connect(uint64_t id, const std::string& reason, errc code = errc::unavailable);

  // --- sending --------------------------------------------------------------------

  // Control frames (heartbeat, goodbye) from the progress thread.
  void send_control(ucp_ep_h ep, frame_type type, uint64_t request_id, bool reply_flag,
                    int peer = -1);

  static void on_sent(void* request, ucs_status_t status, void* user_data);

  std::unique_ptr<send_op> take_in_flight(send_op* op);

  void sent(std::unique_ptr<send_op> op, ucs_status_t status);

  void release(peer_state& p, uint64_t bytes);

  void post(std::unique_ptr<send_op> op, bool reply_flag, peer_state* peer);

  void drain_queue();

  // Flow control (node_bridge_send.cpp): whether `op` fits the peer's
  // credit; posting a sequenced frame; a credit from the peer; sending
  // ours (now, or once this burst is processed: flush_credits).
  bool has_credit(const peer_state& p, const send_op& op) const;
  void post_sequenced(peer_state& p, std::unique_ptr<send_op> op);
  void on_credit(peer_state& p, std::span<const std::byte> payload);
  void send_credit(peer_state& p);
  void flush_credits();
  std::vector<uint32_t> credits_owed;  // progress thread only
  clock::time_point credits_owed_since;
  // A credit owed goes back this long after the first delivery it covers
  // (the poll wakes at least every millisecond while one is owed). A
  // sender only waits for it when its window is full, and then half the
  // window's delivery sends it at once (complete()): this delay only ever
  // holds back a sender blocked on a frame too big for the bytes left.
  static constexpr std::chrono::microseconds credit_delay{1000};

  // --- receiving --------------------------------------------------------------------

  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param);

  void reject(peer_state* peer, const std::string& reason);

  struct rndv_context {
    impl* owner;
    uint32_t peer;
    frame_header header;
    payload_bytes payload;
  };
  // Rendezvous receives handed to UCX, owned here like in_flight: a receive
  // still running when the worker is destroyed (a node stopping while a
  // large frame arrives) never gets its callback; the rest are freed after
  // ucp_worker_destroy.
  std::unordered_map<rndv_context*, std::unique_ptr<rndv_context>> rndv_pending;
  std::unique_ptr<rndv_context> take_rndv(rndv_context* ctx);

  static void on_rndv_done(void* request, ucs_status_t status, size_t, void* user_data);

  void received(const void* header, size_t header_length, void* data, size_t length,
                const ucp_am_recv_param_t* param);

  // A sequenced frame announced by `peer`: within its credit window
  // (counted), or a violation that cuts the peer off (false).
  bool admit(peer_state& peer, const frame_header& h, size_t length);

  // `checked`: the caller verified the checksum while copying the bytes in.
  void complete(peer_state& peer, const frame_header& h, payload_bytes payload,
                bool checked = false);

  void maybe_leave(peer_state& peer);

  void deliver(peer_state& peer, inbound_frame frame);

  void handle_hello(const frame_header& h, std::span<const std::byte> payload, ucp_ep_h reply_ep);

  // The hello exchange's steps (node_bridge_connect.cpp).
  void send_hello(ucp_ep_h ep, frame_type type, uint64_t request_id, hello_payload payload,
                  bool close_after = false);
  bool proof_holds(const hello_payload& hello, const ep_context& ctx, bool from_acceptor) const;
  auth::mac proof_for(const ep_context& ctx, bool as_acceptor) const;
  std::string admitted_problem(const std::string& name) const;
  // Refuses the other end of `ctx`: logs why with its address, counts it,
  // tells it (hello_refused) and closes the endpoint once that is sent.
  void refuse(ep_context* ctx, uint64_t request_id, const std::string& claimed,
              const std::string& reason);
  // Closes the connections whose hello exchange did not finish within
  // heartbeat_timeout (a non-member holding connections open).
  void expire_hellos(clock::time_point now);
  // Closes `ctx`, and its peer with it when it is bound to one.
  void close_connection(ep_context* ctx, const std::string& reason);
  void on_hello(ep_context* ctx, const frame_header& h, hello_payload hello);
  void on_hello_ack(ep_context* ctx, const frame_header& h, hello_payload hello);
  void on_hello_proof(ep_context* ctx, const frame_header& h, hello_payload hello);
  void on_hello_welcome(ep_context* ctx, const frame_header& h, hello_payload hello);
  // The peer a frame's endpoint is attributed to, or null (dropped).
  peer_state* peer_of(ucp_ep_h reply_ep);

  void fail_connect_now(const std::shared_ptr<connect_op>& op, const std::string& reason);

  peer_state* add_peer(const hello_payload& hello, uint64_t node_id_of_peer);
  std::string taken_name(const std::string& name);

  // Binds the authenticated listener connection `wire` to `peer` and, on
  // the same host, opens our endpoint to the peer's worker address;
  // `use_address_now`: send over it at once (the connector: the acceptor
  // opened its side before it welcomed us).
  void bind_eps(peer_state& peer, ep_context* wire, bool same_host,
                const std::vector<uint8_t>& address, bool use_address_now);

  // The UCX transports of an endpoint's lanes ("posix/memory,tcp/lo"), from
  // ucp_ep_print_info (UCX 1.13 has no query for them).
  static std::string lanes_of(ucp_ep_h ep);

  void set_up(peer_state& peer);

  // --- failure ----------------------------------------------------------------------

  // `disconnected`: the connection closed under us (an endpoint error, a
  // failed send or receive), not a protocol failure; once departures are
  // expected (node_bridge::expect_departures) that is a peer leaving.
  void mark_down(peer_state& peer, const std::string& reason, bool disconnected = false);

  void heartbeat(clock::time_point now);

  // --- the progress thread ----------------------------------------------------------

  void run();

  void shutdown();

  void destroy();

  // --- public side ------------------------------------------------------------------

  status enqueue(const std::string& name, frame_type type, uint32_t target, uint64_t request_id,
                 frame_payload payload, reply_handler on_reply);
};

}  // namespace strata::transport
