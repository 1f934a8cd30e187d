// Per-peer flow control (issue 16 item 1): what a node holds from a peer
// (the reorder buffer, rendezvous receives, frames above the last credit)
// is bounded by credits, never by dropping frames. A slow receiver makes
// its senders wait, in order; a peer that sends beyond the window is cut
// off with the reason. Two bridges in one process over real UCX on
// loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/transport/inbox.hpp"
#include "transport/node_bridge.hpp"

namespace strata::transport {
namespace {

using namespace std::chrono_literals;

using testing::inbox;

struct pair_of_bridges {
  inbox a_in, b_in;
  std::unique_ptr<node_bridge> a, b;
  pair_of_bridges(bridge_config ca, bridge_config cb) {
    ::setenv("UCX_NET_DEVICES", "lo", 0);
    ca.node_name = "a";
    cb.node_name = "b";
    auto ra = node_bridge::start(ca, [this](inbound_frame f) { a_in.add(std::move(f)); });
    auto rb = node_bridge::start(cb, [this](inbound_frame f) { b_in.add(std::move(f)); });
    EXPECT_TRUE(ra && rb);
    a = std::move(*ra);
    b = std::move(*rb);
    auto peer = a->connect("127.0.0.1", b->port(), 30s);
    EXPECT_TRUE(peer) << peer.err().to_string();
    EXPECT_TRUE(b->wait_for_peer("a", 30s));
  }
};

bridge_config windowed(uint32_t frames, uint64_t bytes) {
  bridge_config c;
  c.credit_frames = frames;
  c.credit_bytes = bytes;
  return c;
}

// A flood into a slow receiver, big (rendezvous) and tiny (eager) frames
// mixed: every frame arrives, in send order; the receiver never held more
// than the window; the sender waited for credit instead.
TEST(FlowControl, AFloodIntoASlowReceiverArrivesInOrderWithinTheWindow) {
  constexpr uint32_t window = 8;
  constexpr uint64_t window_bytes = 2 << 20;
  for (bool address_exchange : {true, false}) {
    auto ca = windowed(window, window_bytes), cb = windowed(window, window_bytes);
    ca.exchange_worker_address = cb.exchange_worker_address = address_exchange;
    pair_of_bridges p(ca, cb);
    p.b_in.delay = 200us;
    constexpr int n = 600;
    std::thread sender([&] {
      for (int i = 0; i < n; ++i) {
        const size_t bytes = i % 50 == 0 ? (size_t{512} << 10) + i : 16;
        std::vector<std::byte> payload(bytes, std::byte{static_cast<uint8_t>(i)});
        auto s = p.a->send("b", frame_type::sink, 1, std::move(payload));
        ASSERT_TRUE(s) << s.err().to_string();
      }
    });
    sender.join();
    ASSERT_TRUE(p.b_in.wait_for(n, 120s)) << "frames were lost: " << p.b_in.frames.size();
    {
      std::lock_guard lock(p.b_in.mu);
      ASSERT_EQ(p.b_in.frames.size(), static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        const auto& f = p.b_in.frames[i];
        ASSERT_EQ(f.header.seq, static_cast<uint64_t>(i + 1)) << "out of order at " << i;
        ASSERT_EQ(f.payload.front(), std::byte{static_cast<uint8_t>(i)}) << "frame " << i;
      }
    }
    const auto rs = p.b->stats().peers.at(0);
    EXPECT_TRUE(rs.up) << rs.down_reason;
    EXPECT_GT(rs.window_peak_frames, 0u);
    EXPECT_LE(rs.window_peak_frames, window);
    EXPECT_LE(rs.reorder_peak_frames, window);
    EXPECT_LE(rs.window_peak_bytes, window_bytes);
    EXPECT_EQ(rs.window_violations, 0u);
    EXPECT_EQ(rs.rejected_frames, 0u);
    const auto ss = p.a->stats().peers.at(0);
    EXPECT_GT(ss.credit_waits, 0u) << "the slow receiver never held the sender back";
    EXPECT_EQ(ss.held_for_credit, 0u);
    EXPECT_TRUE(ss.up) << ss.down_reason;
  }
}

// Requests and replies both ways under small windows (replies are
// sequenced too and need credit): nothing deadlocks, every reply arrives.
TEST(FlowControl, RequestsAndRepliesBothWaysUnderSmallWindows) {
  auto ca = windowed(4, 64 << 10), cb = windowed(4, 64 << 10);
  pair_of_bridges p(ca, cb);
  constexpr int n = 300;
  std::atomic<int> replies{0};
  std::atomic<bool> stop{false};
  // b answers every request as it comes (its handler may only reply).
  std::thread answerer([&] {
    size_t answered = 0;
    while (!stop) {
      if (!p.b_in.wait_for(answered + 1, 100ms)) continue;
      std::lock_guard lock(p.b_in.mu);
      for (; answered < p.b_in.frames.size(); ++answered) {
        const auto& f = p.b_in.frames[answered];
        (void)p.b->reply(f.peer, f.header.request_id, frame_type::reply,
                         std::vector<std::byte>(f.payload.begin(), f.payload.end()));
      }
    }
  });
  for (int i = 0; i < n; ++i) {
    auto s = p.a->request("b", frame_type::echo, 1,
                          std::vector<std::byte>(i % 7 == 0 ? 100 << 10 : 32, std::byte{1}),
                          [&](expected<inbound_frame> r) {
                            EXPECT_TRUE(r);
                            ++replies;
                          });
    ASSERT_TRUE(s) << s.err().to_string();
  }
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (replies.load() < n && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  stop = true;
  answerer.join();
  EXPECT_EQ(replies.load(), n);
  EXPECT_LE(p.b->stats().peers.at(0).window_peak_frames, 4u);
  EXPECT_LE(p.a->stats().peers.at(0).window_peak_frames, 4u);
}

// A graceful stop with frames still waiting for credit sends them first:
// the goodbye (which ends the connection at the receiver once everything
// before it is delivered) must not overtake them.
TEST(FlowControl, FramesWaitingForCreditAtAStopStillArrive) {
  auto ca = windowed(4, 1 << 20), cb = windowed(4, 1 << 20);
  pair_of_bridges p(ca, cb);
  p.b_in.delay = 2ms;  // slow: a's frames wait for credit
  constexpr int n = 60;
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(p.a->send("b", frame_type::sink, 1, std::vector<std::byte>(64, std::byte(i))));
  p.a->stop();
  ASSERT_TRUE(p.b_in.wait_for(n, 30s))
      << "frames lost at the stop: " << p.b_in.frames.size() << " of " << n << " arrived";
  std::lock_guard lock(p.b_in.mu);
  for (int i = 0; i < n; ++i) EXPECT_EQ(p.b_in.frames[i].header.seq, static_cast<uint64_t>(i + 1));
}

// A peer that ignores credits (here: sends a frame numbered far beyond
// what this node credited, as a peer trying to make it buffer would) is
// cut off with the reason and counted; nothing is buffered for it.
TEST(FlowControl, APeerSendingBeyondTheWindowIsCutOffWithTheReason) {
  constexpr uint32_t window = 16;
  auto ca = windowed(1u << 20, uint64_t{1} << 30), cb = windowed(window, 1 << 20);
  ca.outgoing_fault = [](frame_header& h, std::vector<std::byte>& payload) {
    if (h.seq == 3) {
      h.seq = 3 + 4 * window;  // frames 3 .. 66 "still on their way"
      seal(h, payload);
    }
  };
  pair_of_bridges p(ca, cb);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(p.a->send("b", frame_type::sink, 1, std::vector<std::byte>(8, std::byte{1})));
  ASSERT_TRUE(p.b_in.wait_for(2, 30s));
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (p.b->is_up("a") && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  const auto rs = p.b->stats().peers.at(0);
  EXPECT_FALSE(rs.up) << "a frame beyond the window was accepted (buffered)";
  EXPECT_NE(rs.down_reason.find("flow control: frame seq 67 is beyond the credit window"),
            std::string::npos)
      << rs.down_reason;
  EXPECT_EQ(rs.window_violations, 1u);
  EXPECT_EQ(rs.rejected_frames, 1u);
  EXPECT_LE(rs.reorder_peak_frames, 1u);
  EXPECT_EQ(p.b_in.frames.size(), 2u);
}

}  // namespace
}  // namespace strata::transport
