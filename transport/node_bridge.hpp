// The UCX node bridge: one UCP context and worker per node (process), an
// endpoint per peer node, frames (transport/frame.hpp) as active messages.
// docs/transport.md explains the design; in short:
//
// - Set-up: a node listens on a TCP socket address (port 0: pick a free
//   one, see port()). connect() opens an endpoint to a peer's listener and
//   runs the hello exchange over it: a mutual challenge-response over the
//   cluster secret (hello, hello_ack, hello_proof, hello_welcome; see
//   node_bridge_connect.cpp). Peers on the same host (same hostname and
//   network namespace) then open endpoints to each other's worker address,
//   so UCX may use shared memory (the listener's connections never do);
//   other peers keep the listener's connection.
// - Membership: a frame is attributed to a peer by the UCX endpoint it
//   arrived on (every frame is sent with UCX's reply flag, so the receiver
//   learns its endpoint), never by a header field. Until the endpoint's
//   peer has authenticated, every frame but the hello exchange's is
//   dropped and counted (transport_stats::unauthenticated_frames).
// - Frames: the 48-byte header is the active message's user header, the
//   payload its data; UCX picks eager or rendezvous by size. Receivers
//   validate every frame; a bad one is counted, logged with the peer's
//   name, and the peer's connection is closed (the peer goes down).
// - Ordering: frames to one peer carry sequence numbers 1, 2, ... assigned
//   in send order; the receiver delivers them in that order whatever their
//   size (a rendezvous frame still arriving holds back later eager ones).
// - Back-pressure: at most max_outstanding_bytes per peer are in flight
//   (a request counts until its reply arrives, other frames until UCX has
//   sent them); request() and send() block the calling thread until the
//   window has room (or the peer goes down). A frame larger than the
//   window is sent alone. The receiver bounds what it holds with credits:
//   a peer may have at most credit_frames frames / credit_bytes bytes sent
//   and not yet delivered; further frames wait on the sender (in order,
//   never dropped) until credits return; a peer exceeding the window is
//   cut off.
// - Failure: UCX's endpoint error handler and a heartbeat (a frame every
//   heartbeat_interval; silent for heartbeat_timeout = down) mark a peer
//   down. Its pending requests fail, later ones fail at once, with an
//   error naming the node and the reason.
// - Threads: every UCX call runs on the bridge's progress thread, which
//   sleeps on the worker's event fd when idle. Public methods are
//   thread-safe. Handlers (inbound frames, replies, peer events) run on the
//   progress thread and must return quickly (e.g. send an actor message);
//   they may call reply() but not request()/send() (refused with an error:
//   waiting for window space there would deadlock).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <utility>
#include <string>
#include <vector>

#include "common/auth.hpp"
#include "common/error.hpp"
#include "transport/frame.hpp"
#include "transport/frame_payload.hpp"
#include "transport/transport_stats.hpp"

namespace strata::transport {

struct bridge_config {
  std::string node_name;                     // unique in the cluster; names it in every error
  std::string listen_address = "127.0.0.1";  // IPv4 address of the listener
  uint16_t listen_port = 0;                  // 0: any free port (see node_bridge::port())
  // A fixed port that is busy (connections of a previous run in TIME_WAIT)
  // is retried this long before start() fails.
  std::chrono::milliseconds listen_busy_wait{90000};
  std::chrono::milliseconds heartbeat_interval{1000};
  // Silence for this long marks a peer down. Generous by default: a loaded
  // 2-core machine must never declare a live node dead.
  std::chrono::milliseconds heartbeat_timeout{10000};
  // The progress thread keeps polling this long after the last activity
  // before it sleeps on the worker's event fd (latency of bursts vs CPU).
  std::chrono::microseconds spin_after_activity{50};
  uint64_t max_outstanding_bytes = uint64_t{64} << 20;  // per peer
  // Flow control (credits): a peer may have at most credit_frames
  // sequenced frames, and credit_bytes bytes (a larger frame alone), sent
  // that this node has not delivered yet; more wait, in order, on the
  // sender until this node's credits return. A peer that sends beyond the
  // window is cut off (a protocol violation, counted). Every node of a
  // cluster uses the same values (these defaults).
  uint32_t credit_frames = 1024;
  uint64_t credit_bytes = uint64_t{64} << 20;
  uint32_t max_payload_bytes = default_max_payload_bytes;
  // Same-host peers connect by worker address (shared memory). Off: every
  // peer keeps the listener's connection (e.g. forced TCP tests).
  bool exchange_worker_address = true;
  // Identifies the host for the same-host test; empty: hostname plus the
  // network namespace.
  std::string host_id;
  // Print UCX's lanes (transports) of each worker-address endpoint to stderr.
  bool log_endpoints = false;
  // The node moves rows in device memory (GPU cache tiers): log at start
  // whether UCX sends from CUDA memory directly or stages through host.
  bool device_memory = false;
  // Test seam (faults are injected through seams): called with every sequenced
  // frame after it is sealed, before it is sent; it may corrupt it.
  std::function<void(frame_header&, std::vector<std::byte>& payload)> outgoing_fault;

  // Membership (docs/multi-node.md, "Membership"). With a secret, a peer
  // is admitted only once it proved it holds the secret over a fresh nonce
  // of this node (and this node proved it back), and only under a name in
  // `admitted_nodes` (empty: any name). Empty secret: an open endpoint
  // (serving and gateway endpoints for clients); its proofs are made with
  // the empty key, so a node with a secret refuses it and it the node.
  auth::secret cluster_secret;
  std::vector<std::string> admitted_nodes;
  // Names that may connect again after their peer went down, as a new
  // process (another node_id): a standby node that left a running cluster
  // and is started again (docs/multi-node.md, "Nodes that join later").
  // The new connection gets a fresh peer (sequence numbers, windows); the
  // old one stays down and leaves peers() and stats(). Unset or false: a
  // name connects once per run ("... went down earlier in this run").
  std::function<bool(const std::string&)> may_rejoin;

  // Test seams of the membership tests (tests/transport/membership_test.cpp),
  // never set otherwise: `test_trust_blindly` makes this bridge act like an
  // attacker that does not check the other side (it sends its proof
  // whatever it got, and treats a connection as up as soon as its hello is
  // sent, so its frames go out at once); `outgoing_control` sees and may
  // replace the payload of every hello-exchange frame before it is sealed
  // (record a member's handshake, replay it; an emptied payload is not
  // sent at all).
  bool test_trust_blindly = false;
  std::function<void(frame_type, std::vector<std::byte>& payload)> outgoing_control;
};

// Bytes whose resize does not zero them: UCX writes a received payload
// straight into it (a rendezvous frame of megabytes is not memset first).
template <class T>
struct uninitialized_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = uninitialized_allocator<U>;
  };
  uninitialized_allocator() = default;
  template <class U>
  uninitialized_allocator(const uninitialized_allocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialized: no zeroing
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using payload_bytes = std::vector<std::byte, uninitialized_allocator<std::byte>>;

// A delivered frame: the peer's name, the validated header, the payload.
struct inbound_frame {
  std::string peer;
  frame_header header;
  payload_bytes payload;
};

// What UCX can send from, asked at start-up (ucp_context_query).
struct memory_support {
  bool host = true;
  bool cuda = false;  // CUDA device memory (GPUDirect RDMA / CUDA IPC)
};

class node_bridge {
 public:
  using inbound_handler = std::function<void(inbound_frame)>;
  // The reply frame (type reply or reply_error), or an error naming the
  // node when the peer went down or the bridge stopped.
  using reply_handler = std::function<void(expected<inbound_frame>)>;
  using peer_handler =
      std::function<void(const std::string& peer, bool up, const std::string& reason)>;

  // Creates the UCX context and worker, the listener and the progress
  // thread. `on_inbound` receives requests and one-way frames (never
  // replies or control frames), in order per peer.
  static expected<std::unique_ptr<node_bridge>> start(bridge_config config,
                                                      inbound_handler on_inbound,
                                                      peer_handler on_peer = {});
  ~node_bridge();  // stop()
  node_bridge(const node_bridge&) = delete;
  node_bridge& operator=(const node_bridge&) = delete;

  const std::string& name() const;
  uint16_t port() const;  // the listener's port
  memory_support memory() const;

  // Connects to the listener at host:port and returns the peer's name once
  // both hellos are exchanged; errors name the address.
  expected<std::string> connect(const std::string& host, uint16_t port,
                                std::chrono::milliseconds timeout);
  // Waits until `peer` is connected (by either side).
  status wait_for_peer(const std::string& peer, std::chrono::milliseconds timeout);

  // Sends a request frame; `on_reply` runs exactly once. Blocks while the
  // peer's window is full. Fails at once (and does not call on_reply) if
  // the peer is unknown or down.
  status request(const std::string& peer, frame_type type, uint32_t target,
                 frame_payload payload, reply_handler on_reply);
  // A one-way frame; same blocking and failure rules.
  status send(const std::string& peer, frame_type type, uint32_t target,
              frame_payload payload);
  // Answers request `request_id` of `peer` (type reply or reply_error).
  // Never blocks; a reply to a down peer is dropped.
  void reply(const std::string& peer, uint64_t request_id, frame_type type,
             frame_payload payload);

  // From now on a peer whose connection closes (without a goodbye, e.g.
  // reset while both ends stop) is logged as leaving, not as down: the
  // owner's run has ended. Its requests still fail. Thread-safe.
  void expect_departures();
  // Peers known so far, up or down.
  std::vector<std::string> peers() const;
  bool is_up(const std::string& peer) const;
  transport_stats stats() const;

  // Says goodbye to every peer, waits (bounded) for frames in flight,
  // closes the endpoints and the worker. Pending requests fail. Idempotent.
  void stop();

  struct impl;

 private:
  explicit node_bridge(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::transport
