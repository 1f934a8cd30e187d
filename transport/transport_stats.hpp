// Counters of one node's transport, for reports and metrics (bytes and
// messages per peer, rejected frames, peer up/down). Snapshots
// are plain values; the bridge keeps the live counters as atomics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::transport {

struct peer_stats {
  std::string name;         // the peer node's name
  bool up = false;          // connected and heard from within the heartbeat timeout
  std::string down_reason;  // why it went down (empty while up)
  uint64_t bytes_sent = 0;  // header + payload bytes of every frame sent to it
  uint64_t frames_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_received = 0;
  uint64_t rendezvous_frames_received = 0;  // payloads UCX moved by rendezvous
  uint64_t rejected_frames = 0;             // malformed, truncated, oversized or bad checksum
  uint64_t outstanding_bytes = 0;   // gauge: bytes sent and not yet released (back-pressure)
  uint64_t pending_requests = 0;    // gauge: requests waiting for their reply
  uint64_t blocked_senders = 0;     // gauge: send calls waiting for window space
  bool shared_memory_path = false;  // connected by worker address (same host)
  // Flow control (credits; docs/transport.md, "Back-pressure"). Receiving
  // from the peer: the most out-of-order frames held at once, and the most
  // frames / bytes held above the last credit (never above the window).
  uint64_t reorder_peak_frames = 0;
  uint64_t window_peak_frames = 0;
  uint64_t window_peak_bytes = 0;
  uint64_t window_violations = 0;  // frames beyond the window (the peer was cut off)
  // Sending to the peer: frames that waited here for its credit, and how
  // many wait now (gauge).
  uint64_t credit_waits = 0;
  uint64_t held_for_credit = 0;
  std::string transports;  // UCX transports carrying its frames, e.g. "posix/memory,tcp/lo"
};

struct transport_stats {
  std::string node;
  uint64_t rejected_frames = 0;  // all peers, including frames from unknown senders
  uint64_t peers_down = 0;       // transitions up -> down since start
  // Membership (docs/multi-node.md): frames dropped because the endpoint
  // they came over had not authenticated (a non-member, or a frame before
  // the hello exchange finished), and hello exchanges refused (no or wrong
  // proof, a name not in the manifest, a replayed hello).
  uint64_t unauthenticated_frames = 0;
  uint64_t refused_handshakes = 0;
  std::vector<peer_stats> peers;
};

}  // namespace strata::transport
