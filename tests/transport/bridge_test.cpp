// The node bridge on its own, two bridges in one process over real UCX on
// loopback: ordering across eager and rendezvous sizes, the per-peer
// window (back-pressure), replies, unknown peers and failed connects.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "actors/protocol.hpp"
#include "tests/transport/inbox.hpp"
#include "transport/node_bridge.hpp"

namespace strata::transport {
namespace {

using namespace std::chrono_literals;

using testing::inbox;

// How the two bridges reach each other: the listener connection (TCP),
// the worker address with the bridge's default transports (loopback TCP:
// no shared memory, node_bridge_init.cpp), or the worker address with
// shared memory, which a user chooses by setting UCX_TLS.
enum class path { listener, worker_address, shared_memory };
constexpr path every_path[] = {path::listener, path::worker_address, path::shared_memory};

struct bridge_pair {
  inbox a_in, b_in;
  std::unique_ptr<node_bridge> a, b;
  explicit bridge_pair(uint64_t window, path how) : bridge_pair(window, how != path::listener, {}, how == path::shared_memory) {}
  explicit bridge_pair(uint64_t window = uint64_t{64} << 20, bool address_exchange = true,
                       decltype(bridge_config::outgoing_fault) a_fault = {},
                       bool shared_memory = false) {
    ::setenv("UCX_NET_DEVICES", "lo", 0);
    // UCX reads it when a bridge starts (both have started below).
    if (shared_memory) ::setenv("UCX_TLS", "^cma", 1);
    bridge_config ca, cb;
    ca.outgoing_fault = std::move(a_fault);
    ca.node_name = "a";
    cb.node_name = "b";
    ca.max_outstanding_bytes = cb.max_outstanding_bytes = window;
    ca.exchange_worker_address = cb.exchange_worker_address = address_exchange;
    auto ra = node_bridge::start(ca, [this](inbound_frame f) { a_in.add(std::move(f)); });
    auto rb = node_bridge::start(cb, [this](inbound_frame f) { b_in.add(std::move(f)); });
    if (shared_memory) ::unsetenv("UCX_TLS");
    EXPECT_TRUE(ra && rb);
    a = std::move(*ra);
    b = std::move(*rb);
    auto peer = a->connect("127.0.0.1", b->port(), 30s);
    EXPECT_TRUE(peer) << peer.err().to_string();
    EXPECT_EQ(peer ? *peer : "", "b");
    EXPECT_TRUE(b->wait_for_peer("a", 30s));
  }
};

std::vector<std::byte> payload_of(size_t bytes, uint8_t fill) {
  return std::vector<std::byte>(bytes, std::byte{fill});
}

TEST(NodeBridge, FramesArriveInSendOrderWhateverTheirSize) {
  for (path how : every_path) {
    SCOPED_TRACE(static_cast<int>(how));
    bridge_pair p(uint64_t{64} << 20, how);
    constexpr int n = 40;
    for (int i = 0; i < n; ++i) {
      // Big (rendezvous) and tiny (eager) frames alternate.
      const size_t bytes = i % 2 == 0 ? (size_t{2} << 20) + i : 8;
      ASSERT_TRUE(p.a->send("b", frame_type::sink, 1, payload_of(bytes, static_cast<uint8_t>(i))));
    }
    ASSERT_TRUE(p.b_in.wait_for(n, 60s));
    for (int i = 0; i < n; ++i) {
      const auto& f = p.b_in.frames[i];
      EXPECT_EQ(f.header.seq, static_cast<uint64_t>(i + 1));
      ASSERT_FALSE(f.payload.empty());
      EXPECT_EQ(f.payload.front(), std::byte{static_cast<uint8_t>(i)}) << "frame " << i;
      EXPECT_EQ(f.peer, "a");
    }
    const auto stats = p.b->stats();
    ASSERT_EQ(stats.peers.size(), 1u);
    EXPECT_GT(stats.peers[0].rendezvous_frames_received, 0u);
    EXPECT_EQ(stats.peers[0].shared_memory_path, how != path::listener);
    // Shared memory only where the user's UCX_TLS allows it; TCP otherwise.
    const auto& lanes = stats.peers[0].transports;
    const bool shm = lanes.find("sysv/") != std::string::npos ||
                     lanes.find("posix/") != std::string::npos;
    EXPECT_EQ(shm, how == path::shared_memory) << lanes;
    if (how != path::shared_memory) {
      EXPECT_NE(lanes.find("tcp/"), std::string::npos) << lanes;
    }
  }
}

TEST(NodeBridge, RequestsGetTheirRepliesAndTheWindowBoundsOutstandingBytes) {
  constexpr uint64_t window = 1 << 20;
  bridge_pair p(window);
  constexpr size_t frame = 256 << 10;  // four fit in the window (with headers: three)
  std::atomic<int> replies{0};
  std::atomic<int> sent{0};
  std::thread sender([&] {
    for (int i = 0; i < 8; ++i) {
      auto s = p.a->request("b", frame_type::echo, 1, payload_of(frame, 1),
                            [&](expected<inbound_frame> r) {
                              EXPECT_TRUE(r);
                              if (r) {
                                EXPECT_EQ(r->header.type, frame_type::reply);
                              }
                              ++replies;
                            });
      EXPECT_TRUE(s);
      ++sent;
    }
  });
  // b holds the requests unanswered: a's window fills after three frames
  // (3 x 256 KiB + headers fit in 1 MiB, four do not) and its sender
  // blocks inside the fourth request: the bridge counts it as blocked.
  ASSERT_TRUE(p.b_in.wait_for(3, 30s));
  const auto until_blocked = std::chrono::steady_clock::now() + 30s;
  while (p.a->stats().peers[0].blocked_senders == 0 &&
         std::chrono::steady_clock::now() < until_blocked)
    std::this_thread::sleep_for(1ms);
  auto stats = p.a->stats();
  ASSERT_EQ(stats.peers[0].blocked_senders, 1u) << "the fourth request was not held back";
  EXPECT_EQ(sent.load(), 3);
  stats = p.a->stats();
  EXPECT_LE(stats.peers[0].outstanding_bytes, window);
  EXPECT_EQ(stats.peers[0].pending_requests, static_cast<uint64_t>(sent.load()));
  // Answer everything as it comes: the sender unblocks and finishes.
  size_t answered = 0;
  while (answered < 8) {
    ASSERT_TRUE(p.b_in.wait_for(answered + 1, 30s));
    std::lock_guard lock(p.b_in.mu);
    for (; answered < p.b_in.frames.size(); ++answered) {
      const auto& f = p.b_in.frames[answered];
      p.b->reply(f.peer, f.header.request_id, frame_type::reply, {});
    }
  }
  sender.join();
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (replies.load() < 8 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(replies.load(), 8);
  EXPECT_EQ(p.a->stats().peers[0].outstanding_bytes, 0u);
}

TEST(NodeBridge, StoppedPeerFailsPendingAndLaterRequestsNamingIt) {
  bridge_pair p;
  std::promise<std::string> failed;
  ASSERT_TRUE(p.a->request(
      "b", frame_type::echo, 1, payload_of(16, 0),
      [&](expected<inbound_frame> r) { failed.set_value(r ? "replied" : r.err().to_string()); }));
  ASSERT_TRUE(p.b_in.wait_for(1, 30s));
  p.b->stop();  // never answers; says goodbye
  auto f = failed.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  const auto text = f.get();
  EXPECT_NE(text.find("node 'b' is down"), std::string::npos) << text;
  auto later = p.a->send("b", frame_type::sink, 1, {});
  ASSERT_FALSE(later);
  EXPECT_NE(later.err().message().find("node 'b'"), std::string::npos);
  EXPECT_FALSE(p.a->is_up("b"));
}

actors::push_request push_of(size_t keys) {
  actors::push_request r;
  for (size_t i = 0; i < keys; ++i) {
    r.keys.push_back(7919 * i + 1);
    for (int d = 0; d < 8; ++d) r.grads.push_back(static_cast<float>(i) + 0.125f * d);
  }
  r.epoch = 3;
  r.id = 0x5eed;
  return r;
}

// A message's arrays go out as iov pieces straight from the message; the
// receiver gets exactly encode_payload's bytes (the wire format is the
// same), eager and by rendezvous, over shared memory and TCP.
TEST(NodeBridge, GatheredFramesArriveAsTheirEncodedBytes) {
  for (path how : every_path) {
    SCOPED_TRACE(static_cast<int>(how));
    bridge_pair p(uint64_t{64} << 20, how);
    const std::vector<size_t> sizes = {200, 9000, 40000};  // ~7 KiB eager .. ~1.4 MiB rendezvous
    for (size_t keys : sizes) {
      auto payload = gather_payload(push_of(keys));
      ASSERT_FALSE(payload.contiguous());
      ASSERT_TRUE(p.a->send("b", frame_type::shard_push, 1, std::move(payload)));
    }
    ASSERT_TRUE(p.b_in.wait_for(sizes.size(), 60s));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto expected = encode_payload(push_of(sizes[i]));
      const auto& got = p.b_in.frames[i].payload;
      ASSERT_EQ(got.size(), expected.size()) << "frame " << i;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin())) << "frame " << i;
    }
    EXPECT_GT(p.b->stats().peers.at(0).rendezvous_frames_received, 0u);
  }
}

// The receiver checks a frame's checksum (eager: while copying it in;
// rendezvous: once it is in) and its lengths before any byte is used: a
// damaged frame is never delivered, the frames before it are.
TEST(NodeBridge, AFrameWithAWrongChecksumOrLengthIsRefusedBeforeItIsDelivered) {
  struct damage {
    const char* what;
    size_t bytes;
    bool length;  // damage the header's length instead of a payload byte
    const char* reason;
  };
  for (const damage& d : {damage{"eager payload bit", 2000, false, "frame checksum mismatch"},
                          damage{"rendezvous payload bit", size_t{2} << 20, false,
                                 "frame checksum mismatch"},
                          damage{"eager length", 2000, true, "header says"},
                          damage{"rendezvous length", size_t{2} << 20, true, "header says"}}) {
    SCOPED_TRACE(d.what);
    bridge_pair p(uint64_t{64} << 20, true, [&d](frame_header& h, std::vector<std::byte>& bytes) {
      if (h.seq != 2) return;
      if (d.length) {
        h.payload_bytes -= 1;
      } else {
        bytes[bytes.size() / 2] ^= std::byte{0x10};
      }
    });
    // The first frame delivered before the damaged one is sent (a frame
    // may overtake another while the shared-memory path comes up).
    ASSERT_TRUE(p.a->send("b", frame_type::sink, 1, payload_of(d.bytes, 1)));
    ASSERT_TRUE(p.b_in.wait_for(1, 30s));
    ASSERT_TRUE(p.a->send("b", frame_type::sink, 1, payload_of(d.bytes, 2)));
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (p.b->is_up("a") && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    const auto rs = p.b->stats().peers.at(0);
    EXPECT_FALSE(rs.up);
    EXPECT_NE(rs.down_reason.find(d.reason), std::string::npos) << rs.down_reason;
    EXPECT_EQ(rs.rejected_frames, 1u);
    EXPECT_EQ(p.b_in.size(), 1u) << "the damaged frame was delivered";
    EXPECT_EQ(p.b_in.frames[0].payload.front(), std::byte{1});
  }
}

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

TEST(NodeBridge, IdleProgressThreadsSleepInsteadOfSpinning) {
  bridge_pair p;
  // Two connected bridges, nothing to send but heartbeats: their progress
  // threads sleep on the worker's event fd. A busy loop would burn about
  // one CPU-second per second per thread.
  const double before = process_cpu_seconds();
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100ms);
  const double used = process_cpu_seconds() - before;
  EXPECT_LT(used, 0.5) << "CPU seconds used by idle bridges in 3 s";
  EXPECT_TRUE(p.a->is_up("b"));  // heartbeats kept flowing meanwhile
  EXPECT_TRUE(p.b->is_up("a"));
}

TEST(NodeBridge, UnknownPeersAndUnreachableListenersAreErrors) {
  bridge_pair p;
  auto s = p.a->send("nobody", frame_type::sink, 1, {});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err().code(), errc::not_found);
  EXPECT_NE(s.err().message().find("'nobody'"), std::string::npos);
  // A port nobody listens on: b's port after b stopped.
  const auto port = p.b->port();
  p.b->stop();
  auto c = p.a->connect("127.0.0.1", port, 20s);
  ASSERT_FALSE(c);
  EXPECT_NE(c.err().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << c.err().to_string();
}

// Peers named by host name (Kubernetes services, DNS) are resolved; a
// name that does not resolve is an error naming it.
TEST(NodeBridge, HostNamesResolveAndUnknownNamesAreNamed) {
  ::setenv("UCX_NET_DEVICES", "lo", 0);
  bridge_config ca, cb;
  ca.node_name = "a";
  cb.node_name = "b";
  cb.listen_address = "0.0.0.0";
  auto a = node_bridge::start(ca, [](inbound_frame) {});
  auto b = node_bridge::start(cb, [](inbound_frame) {});
  ASSERT_TRUE(a && b);
  auto peer = (*a)->connect("localhost", (*b)->port(), 30s);
  ASSERT_TRUE(peer) << peer.err().to_string();
  EXPECT_EQ(*peer, "b");
  auto bad = (*a)->connect("no-such-host.invalid", (*b)->port(), 5s);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message().find("cannot resolve 'no-such-host.invalid'"), std::string::npos)
      << bad.err().to_string();
}

}  // namespace
}  // namespace strata::transport
