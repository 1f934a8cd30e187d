// The subscribe handshake proves the cluster secret both ways (issue 16
// items 1-2; docs/serving.md, "Online updates"): a subscriber without the
// secret or with a wrong one gets no rows, a process posing as the
// publisher cannot change a served row (its updates, even at version
// 2^64-1, are refused), and a recorded handshake replayed fails on the
// fresh nonce of the other side.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <thread>

#include "tests/serving/update_stream_test_util.hpp"

namespace strata::serving {
namespace {

using namespace update_test;
using namespace std::chrono_literals;

// The publisher answers nothing but an error to an unproven subscriber:
// true when the connection ends (error frame or close) without one
// updates frame.
bool gets_no_rows(wire::frame_socket& s) {
  for (;;) {
    auto f = s.receive();
    if (!f) return true;
    if (f->header.type == wire::frame_type::updates) return false;
    if (f->header.type == wire::frame_type::error) return true;
  }
}

TEST(UpdateAuth, ASubscriberWithAWrongSecretGetsNoRows) {
  update_publisher publisher(make_publisher(9, 1));
  ASSERT_TRUE(publisher.start().has_value());
  publisher.publish(std::vector<uint64_t>{1, 2}, std::vector<float>{1, 2},
                    std::vector<uint64_t>{1, 2});
  auto wrong = raw_subscribe(publisher.port(), 0, 0, make_secret("not-the-cluster-secret!!"));
  EXPECT_TRUE(gets_no_rows(wrong.socket));
  EXPECT_EQ(publisher.stats().auth_failures, 1u);
  // A real subscriber with a wrong secret: refused, nothing applied.
  served n;
  update_subscriber subscriber(
      make_subscriber(publisher.port(), make_secret("not-the-cluster-secret!!")), *n.service);
  ASSERT_TRUE(subscriber.start().has_value());
  // The publisher proved itself to a subscriber that holds another secret:
  // to the subscriber, that is a publisher that did not prove its secret.
  ASSERT_TRUE(eventually([&] { return subscriber.auth_failures() > 0; }));
  EXPECT_EQ(subscriber.batches_applied(), 0u);
  subscriber.stop();
  // The right secret gets the rows: the refusals were about the secret.
  auto right = raw_subscribe(publisher.port(), 0, 0);
  EXPECT_EQ(next_batch(right.socket).keys, (std::vector<uint64_t>{1, 2}));
  publisher.stop();
}

TEST(UpdateAuth, ASubscriberWithoutTheSecretGetsNoRows) {
  update_publisher publisher(make_publisher(9, 1));
  ASSERT_TRUE(publisher.start().has_value());
  publisher.publish(std::vector<uint64_t>{1}, std::vector<float>{1}, std::vector<uint64_t>{1});
  // The subscribe of a client before authentication (no nonce), then one
  // that never answers the challenge, then one that answers garbage.
  {
    auto s = wire::frame_socket::connect({"127.0.0.1", publisher.port()}, 10s);
    ASSERT_TRUE(s.has_value());
    std::vector<std::byte> payload;
    wire::writer w(payload);
    w.text16("ads");
    w.u64(0);
    w.u64(0);
    ASSERT_TRUE(s->send(wire::frame_type::subscribe, 0, payload).has_value());
    EXPECT_TRUE(gets_no_rows(*s));
  }
  {
    auto s = wire::frame_socket::connect({"127.0.0.1", publisher.port()}, 10s);
    ASSERT_TRUE(s.has_value());
    std::vector<std::byte> payload;
    wire::encode(payload, wire::subscribe_request{"ads", 0, 0, *auth::fresh_nonce()});
    ASSERT_TRUE(s->send(wire::frame_type::subscribe, 0, payload).has_value());
    auto challenge = s->receive();
    ASSERT_TRUE(challenge.has_value());
    EXPECT_EQ(challenge->header.type, wire::frame_type::challenge);
    // An updates-looking frame instead of the proof.
    payload.clear();
    wire::encode(payload, wire::proof_frame{});
    ASSERT_TRUE(s->send(wire::frame_type::proof, 0, payload).has_value());
    EXPECT_TRUE(gets_no_rows(*s));
  }
  EXPECT_EQ(publisher.stats().auth_failures, 1u);
  // A subscriber object without a secret does not start.
  served n;
  update_subscriber none(make_subscriber(publisher.port(), auth::secret{}), *n.service);
  auto started = none.start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.err().message().find("cluster_secret"), std::string::npos);
  // Nor does a publisher.
  auto pc = make_publisher(1);
  pc.secret = {};
  update_publisher open(pc);
  auto opened = open.start();
  ASSERT_FALSE(opened.has_value());
  EXPECT_NE(opened.err().message().find("cluster_secret"), std::string::npos);
  publisher.stop();
}

// A test process listening where the subscriber expects its publisher: it
// answers the subscribe with `challenge` (or nothing) and then sends an
// updates frame of `key` at version 2^64-1.
class fake_publisher {
 public:
  enum class mode { no_challenge, garbage_proof, replayed_challenge };
  fake_publisher(mode m, uint64_t key, wire::challenge_frame replay = {})
      : mode_(m), key_(key), replay_(replay) {
    acceptor_.open(tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    thread_ = std::thread([this] { run(); });
  }
  ~fake_publisher() {
    stopping_ = true;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::atomic<int> updates_sent{0};

 private:
  void run() {
    while (!stopping_) {
      tcp::socket peer(io_);
      boost::system::error_code ec;
      acceptor_.accept(peer, ec);
      if (ec || stopping_) return;
      auto s = wire::frame_socket::adopt(peer.release(), "subscriber");
      auto sub = s.receive();
      if (!sub) continue;
      std::vector<std::byte> payload;
      if (mode_ != mode::no_challenge) {
        wire::challenge_frame c = replay_;
        if (mode_ == mode::garbage_proof) {
          c.nonce = *auth::fresh_nonce();
          c.proof = *auth::fresh_nonce();
        }
        wire::encode(payload, c);
        if (!s.send(wire::frame_type::challenge, 0, payload)) continue;
      }
      payload.clear();
      wire::encode(payload,
                   wire::update_batch{
                       "ads", 1, 1, dim, {key_}, {~uint64_t{0}}, std::vector<float>(dim, 666.0f)});
      if (s.send(wire::frame_type::updates, 0, payload)) ++updates_sent;
      (void)s.receive();  // until the subscriber hangs up
    }
  }
  mode mode_;
  uint64_t key_;
  wire::challenge_frame replay_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

TEST(UpdateAuth, AFakePublisherCannotChangeAServedRow) {
  served n;
  const uint64_t key = n.rows.keys[7];
  const uint64_t before = n.version_of(key);
  for (auto m : {fake_publisher::mode::no_challenge, fake_publisher::mode::garbage_proof}) {
    fake_publisher fake(m, key);
    update_subscriber subscriber(make_subscriber(fake.port()), *n.service);
    ASSERT_TRUE(subscriber.start().has_value());
    ASSERT_TRUE(eventually([&] { return fake.updates_sent >= 2; }));
    subscriber.stop();
    EXPECT_EQ(subscriber.batches_applied(), 0u);
    EXPECT_EQ(n.version_of(key), before) << "a fake publisher changed a served row";
    EXPECT_EQ(n.lookup(std::vector<uint64_t>{key}).weights[0], n.rows.weights.at(key)[0]);
    EXPECT_GE(subscriber.auth_failures(), 1u);  // no challenge, or a wrong proof
  }
}

TEST(UpdateAuth, AReplayedHandshakeFails) {
  update_publisher publisher(make_publisher(9, dim));
  ASSERT_TRUE(publisher.start().has_value());
  served n;
  const uint64_t key = n.rows.keys[3];
  publisher.publish(std::vector<uint64_t>{key}, std::vector<float>(dim, 1.0f),
                    std::vector<uint64_t>{n.rows.versions.at(key) + 1});
  // A member's handshake, recorded (it gets the rows)...
  const auto nonce = *auth::fresh_nonce();
  auto recorded = raw_subscribe(publisher.port(), 0, 0, cluster_secret, nonce);
  EXPECT_EQ(next_batch(recorded.socket).keys, std::vector<uint64_t>{key});
  // ...replayed byte for byte by someone without the secret: the publisher
  // challenged with a fresh nonce, so the old proof fails.
  {
    auto s = wire::frame_socket::connect({"127.0.0.1", publisher.port()}, 10s);
    ASSERT_TRUE(s.has_value());
    ASSERT_TRUE(s->send(wire::frame_type::subscribe, 0, recorded.subscribe_payload).has_value());
    auto challenge = s->receive();
    ASSERT_TRUE(challenge.has_value());
    EXPECT_NE(wire::decode_challenge(challenge->payload)->nonce, recorded.challenge.nonce);
    ASSERT_TRUE(s->send(wire::frame_type::proof, 0, recorded.proof_payload).has_value());
    EXPECT_TRUE(gets_no_rows(*s));
  }
  EXPECT_EQ(publisher.stats().auth_failures, 1u);
  // The publisher's recorded challenge replayed to a real subscriber: its
  // own nonce is fresh, so the recorded proof fails and nothing applies.
  fake_publisher fake(fake_publisher::mode::replayed_challenge, key, recorded.challenge);
  update_subscriber subscriber(make_subscriber(fake.port()), *n.service);
  ASSERT_TRUE(subscriber.start().has_value());
  ASSERT_TRUE(eventually([&] { return subscriber.auth_failures() >= 1; }));
  subscriber.stop();
  EXPECT_EQ(subscriber.batches_applied(), 0u);
  EXPECT_EQ(n.version_of(key), n.rows.versions.at(key));
  publisher.stop();
}

}  // namespace
}  // namespace strata::serving
