// Hostile clients against the update publisher's port (issue 16 items 3
// and 7): slowloris, hundreds of idle connections, a header claiming
// 256 MiB, running out of descriptors. During and after each, a real
// subscriber (connected and proven before the attack) gets each newly
// published row within 1 s, a new one can subscribe afterwards, and the
// publisher's counters stay under their caps (hostile_scenarios.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "tests/serving/hostile_scenarios.hpp"
#include "tests/serving/update_stream_test_util.hpp"

namespace strata::serving {
namespace {

using namespace std::chrono_literals;
using namespace update_test;
namespace hostile = testing::hostile;

connection_settings small_settings() {
  connection_settings s;
  s.max_connections = 64;
  s.idle_timeout = 2500ms;
  s.request_timeout = 500ms;  // the handshake's deadline
  s.max_buffered_bytes = 4u << 20;
  return s;
}

// A subscriber by hand: subscribes and proves the secret once (1 s
// timeouts); each request publishes a new row and waits for it to arrive.
class subscriber_client : public hostile::normal_client {
 public:
  subscriber_client(update_publisher& p, std::atomic<uint64_t>& keys) : p_(p), keys_(keys) {}
  bool request() override {
    if (!socket_ && !subscribe()) return false;
    const uint64_t key = ++keys_;
    p_.publish(std::vector<uint64_t>{key}, std::vector<float>{1.0f}, std::vector<uint64_t>{key});
    const auto until = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < until) {
      auto f = socket_->receive();
      if (!f || f->header.type != wire::frame_type::updates) break;
      auto b = wire::decode_updates(f->payload);
      if (!b) break;
      for (uint64_t k : b->keys)
        if (k == key) return true;
    }
    socket_.reset();
    return false;
  }

 private:
  bool subscribe() {
    auto s = wire::frame_socket::connect({"127.0.0.1", p_.port()}, 1s);
    if (!s) return false;
    auto nonce = *auth::fresh_nonce();
    std::vector<std::byte> payload;
    wire::encode(payload, wire::subscribe_request{"ads", 0, 0, nonce});
    if (!s->send(wire::frame_type::subscribe, 0, payload)) return false;
    auto f = s->receive();
    if (!f || f->header.type != wire::frame_type::challenge) return false;
    auto c = wire::decode_challenge(f->payload);
    if (!c || !auth::same_mac(c->proof, auth::prove(cluster_secret, updates_auth_context,
                                                    "update publisher", nonce, c->nonce)))
      return false;
    payload.clear();
    wire::encode(payload, wire::proof_frame{auth::prove(cluster_secret, updates_auth_context,
                                                        "update subscriber", c->nonce, nonce)});
    if (!s->send(wire::frame_type::proof, 0, payload)) return false;
    socket_ = std::make_unique<wire::frame_socket>(std::move(*s));
    return true;
  }
  update_publisher& p_;
  std::atomic<uint64_t>& keys_;
  std::unique_ptr<wire::frame_socket> socket_;
};

struct publisher_under_attack {
  std::atomic<uint64_t> keys{0};
  std::unique_ptr<update_publisher> publisher;

  publisher_under_attack() {
    auto pc = make_publisher(77, 1);
    pc.connections = small_settings();
    pc.max_retained_rows = 10000;
    pc.keepalive = 200ms;  // closed connections are noticed and reaped soon
    publisher = std::make_unique<update_publisher>(pc);
    EXPECT_TRUE(publisher->start().has_value());
  }
  ~publisher_under_attack() {
    publisher->stop();
    const auto st = publisher->stats();
    EXPECT_LE(st.retained_rows, 10000u);
    EXPECT_EQ(st.auth_failures, 0u);  // the attackers never got as far as a proof
  }

  hostile::target target() {
    hostile::target t;
    t.port = publisher->port();
    t.stats = [this] { return publisher->stats().connections; };
    t.settings = small_settings();
    t.client = [this] { return std::make_unique<subscriber_client>(*publisher, keys); };
    std::vector<std::byte> frame, payload;
    wire::encode(payload, wire::subscribe_request{"ads", 0, 0, *auth::fresh_nonce()});
    wire::append_frame(frame, wire::frame_type::subscribe, 0, payload);
    t.slow_request.assign(reinterpret_cast<const char*>(frame.data()), frame.size());
    return t;
  }
};

TEST(HostilePublisherPort, SlowlorisIsCutByTheHandshakeDeadline) {
  publisher_under_attack p;
  hostile::slowloris_is_cut(p.target());
}

TEST(HostilePublisherPort, IdleConnectionsAreCapped) {
  publisher_under_attack p;
  hostile::idle_connections_are_capped(p.target());
}

TEST(HostilePublisherPort, HeadersClaiming256MiBAllocateNothing) {
  publisher_under_attack p;
  hostile::huge_claims_allocate_nothing(p.target());
}

TEST(HostilePublisherPort, OutOfDescriptorsBacksOffAndRecovers) {
  publisher_under_attack p;
  hostile::out_of_descriptors_backs_off(p.target());
}

}  // namespace
}  // namespace strata::serving
