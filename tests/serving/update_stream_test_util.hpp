// Helpers of the online-update tests (update_stream_test.cpp,
// update_stream_auth_test.cpp): a served table loaded from a test
// checkpoint, publisher/subscriber configs with the test's cluster
// secret, and the subscriber's side of the handshake by hand.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <mutex>
#include <thread>
#include <vector>

#include "serving/service.hpp"
#include "serving/update_stream.hpp"
#include "tests/serving/serving_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::serving::update_test {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

inline constexpr uint32_t dim = 8;

template <class F>
inline bool eventually(F&& done, std::chrono::milliseconds deadline = 20s) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

inline auth::secret make_secret(const std::string& text) {
  return auth::secret{std::vector<uint8_t>(text.begin(), text.end())};
}
inline const auth::secret cluster_secret = make_secret("the-cluster-secret-of-this-test");

// A serving store loaded from a test checkpoint (2000 rows of table "ads").
struct served {
  testing::temp_dir dir;
  testing::checkpoint_rows rows;
  std::unique_ptr<serving_service> service;

  served() {
    rows = testing::write_test_checkpoint(dir.path() / "ckpt", "ads", dim, 2000, 2);
    auto store = testing::open_test_store(dir.path(), dim);
    if (!store) throw std::runtime_error("the test store did not open (see above)");
    service = std::make_unique<serving_service>(service_limits{1 << 20});
    service->add_table(std::move(store));
  }
  lookup_result lookup(std::span<const uint64_t> keys) {
    lookup_result out;
    EXPECT_TRUE(service->lookup("ads", keys, out).has_value());
    return out;
  }
  uint64_t version_of(uint64_t key) {
    return lookup(std::span<const uint64_t>(&key, 1)).versions[0];
  }
};

inline publisher_config make_publisher(uint64_t stream, uint32_t d = dim) {
  publisher_config pc;
  pc.table = "ads";
  pc.dim = d;
  pc.stream = stream;
  pc.interval = 10ms;
  pc.secret = cluster_secret;
  return pc;
}

inline subscriber_config make_subscriber(uint16_t port,
                                         const auth::secret& secret = cluster_secret) {
  subscriber_config sc;
  sc.publisher = {"127.0.0.1", port};
  sc.table = "ads";
  sc.retry = 20ms;
  sc.secret = secret;
  return sc;
}

// The subscriber's side of the handshake by hand (a test client that may
// lie): sends subscribe with `nonce`, reads the challenge, answers with a
// proof made with `secret`. The connection, or the frame it got instead.
struct raw_subscription {
  wire::frame_socket socket;
  wire::challenge_frame challenge;
  std::vector<std::byte> subscribe_payload, proof_payload;
};
inline raw_subscription raw_subscribe(uint16_t port, uint64_t stream, uint64_t after,
                                      const auth::secret& secret = cluster_secret,
                                      wire::auth_bytes nonce = *auth::fresh_nonce()) {
  raw_subscription out;
  auto s = wire::frame_socket::connect({"127.0.0.1", port}, 10s);
  EXPECT_TRUE(s.has_value());
  out.socket = std::move(*s);
  wire::encode(out.subscribe_payload, wire::subscribe_request{"ads", stream, after, nonce});
  EXPECT_TRUE(out.socket.send(wire::frame_type::subscribe, 0, out.subscribe_payload).has_value());
  auto f = out.socket.receive();
  EXPECT_TRUE(f.has_value());
  EXPECT_EQ(f->header.type, wire::frame_type::challenge);
  auto c = wire::decode_challenge(f->payload);
  EXPECT_TRUE(c.has_value());
  out.challenge = *c;
  wire::encode(out.proof_payload,
               wire::proof_frame{auth::prove(secret, updates_auth_context, "update subscriber",
                                             c->nonce, nonce)});
  EXPECT_TRUE(out.socket.send(wire::frame_type::proof, 0, out.proof_payload).has_value());
  return out;
}

// The next updates batch (skipping keepalives); an error frame fails.
inline wire::update_batch next_batch(wire::frame_socket& s) {
  for (;;) {
    auto f = s.receive();
    EXPECT_TRUE(f.has_value()) << (f ? "" : f.err().to_string());
    if (!f) return {};
    if (f->header.type == wire::frame_type::error) {
      ADD_FAILURE() << wire::decode_error(f->payload)->message;
      return {};
    }
    auto b = wire::decode_updates(f->payload);
    EXPECT_TRUE(b.has_value());
    if (!b->keys.empty()) return *b;
  }
}

// A TCP relay from its own port to `target` that the test can cut (every
// relayed connection shut down; new ones closed at once) and restore: a
// subscriber "away" for a while without the subscriber knowing.
class relay {
 public:
  explicit relay(uint16_t target) : target_(target) {
    acceptor_.open(tcp::v4());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    accept_ = std::thread([this] { accept_loop(); });
  }
  ~relay() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cut();
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    boost::system::error_code ec;
    accept_.join();
    acceptor_.close(ec);
    for (auto& t : pumps_) t.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  void cut() {
    std::lock_guard lock(mutex_);
    open_ = false;
    for (auto& s : sockets_) ::shutdown(s->native_handle(), SHUT_RDWR);
  }
  void restore() {
    std::lock_guard lock(mutex_);
    open_ = true;
  }

 private:
  void accept_loop() {
    for (;;) {
      auto in = std::make_shared<tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*in, ec);
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      if (ec || !open_) continue;  // closed at once
      auto out = std::make_shared<tcp::socket>(io_);
      out->connect({asio::ip::make_address("127.0.0.1"), target_}, ec);
      if (ec) continue;
      sockets_.push_back(in);
      sockets_.push_back(out);
      pumps_.emplace_back([in, out] { pump(*in, *out); });
      pumps_.emplace_back([in, out] { pump(*out, *in); });
    }
  }
  static void pump(tcp::socket& from, tcp::socket& to) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(from.native_handle(), buf, sizeof buf, 0);
      if (n <= 0 || ::send(to.native_handle(), buf, size_t(n), MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(from.native_handle(), SHUT_RDWR);
    ::shutdown(to.native_handle(), SHUT_RDWR);
  }

  uint16_t target_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::thread accept_;
  std::mutex mutex_;
  bool open_ = true, stopping_ = false;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> pumps_;
};

}  // namespace strata::serving::update_test
