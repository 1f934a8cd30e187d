// The hostile-client scenarios (issue 16) run against each thread-per-
// connection server built on serving/connection_limits.hpp: the serving
// binary port, the serving HTTP port and the training gateway. Each takes
// a `target`: its port, its counters, its settings and a normal client
// that must keep getting answers within 1 s during and after the attack.
//
// GoogleTest assertions; the attacks are from hostile_clients.hpp.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/frame_socket.hpp"
#include "serving/connection_limits.hpp"
#include "tests/serving/hostile_clients.hpp"

namespace strata::testing::hostile {

using namespace std::chrono_literals;

// One request and its answer on a connection of its own; false when it
// failed or took over the client's 1 s timeout.
class normal_client {
 public:
  virtual ~normal_client() = default;
  virtual bool request() = 0;
};

// Binary protocol: a lookup of `keys` of `table`, rows expected.
class binary_client : public normal_client {
 public:
  binary_client(uint16_t port, std::string table, std::vector<uint64_t> keys)
      : port_(port), table_(std::move(table)), keys_(std::move(keys)) {}
  bool request() override {
    if (!socket_ || !socket_->is_open()) {
      auto s = wire::frame_socket::connect({"127.0.0.1", port_}, 1s);
      if (!s) return false;
      socket_ = std::make_unique<wire::frame_socket>(std::move(*s));
    }
    std::vector<std::byte> payload;
    wire::encode(payload, wire::key_request{table_, keys_});
    // The answer must come within 1 s: the socket's receive timeout, and
    // measured.
    const auto start = std::chrono::steady_clock::now();
    if (!socket_->send(wire::frame_type::lookup, ++id_, payload)) return drop();
    auto reply = socket_->receive();
    if (!reply || reply->header.type != wire::frame_type::rows || reply->header.request != id_)
      return drop();
    return std::chrono::steady_clock::now() - start <= 1s;
  }

 private:
  bool drop() {
    socket_.reset();
    return false;
  }
  uint16_t port_;
  std::string table_;
  std::vector<uint64_t> keys_;
  std::unique_ptr<wire::frame_socket> socket_;
  uint64_t id_ = 0;
};

// Reads one HTTP response (Content-Length framed) from `fd` within
// `timeout`; empty when it did not come.
inline std::string read_http_response(int fd, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::string in;
  char buf[65536];
  for (;;) {
    const auto head_end = in.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const auto cl = in.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end) {
        const size_t length = std::stoull(in.substr(cl + 16));
        if (in.size() >= head_end + 4 + length) return in.substr(0, head_end + 4 + length);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return {};
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return {};
    in.append(buf, size_t(n));
  }
}

inline std::string http_lookup_request(const std::string& body) {
  return "POST /lookup HTTP/1.1\r\nHost: strata\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// HTTP: POST /lookup of `body` (keep-alive), 200 expected.
class http_client : public normal_client {
 public:
  http_client(uint16_t port, std::string body) : port_(port), body_(std::move(body)) {}
  bool request() override {
    if (!conn_.ok()) conn_ = raw_connection(port_);
    if (!conn_.send(http_lookup_request(body_))) return drop();
    const auto res = read_http_response(conn_.fd(), 1s);
    if (res.rfind("HTTP/1.1 200", 0) != 0) return drop();
    return true;
  }

 private:
  bool drop() {
    conn_ = raw_connection();
    return false;
  }
  uint16_t port_;
  std::string body_;
  raw_connection conn_;
};

struct target {
  uint16_t port = 0;
  std::function<serving::connection_stats()> stats;
  serving::connection_settings settings;
  std::function<std::unique_ptr<normal_client>()> client;
  bool http = false;
  // A request dripped by the slowloris attack (its first bytes suffice).
  std::string slow_request;
};

// Runs `attack` on another thread while a normal client keeps asking
// (every 50 ms) until the attack ends; every answer must come within the
// client's 1 s timeout. Returns how many requests were answered.
template <class F>
int while_normal_client_asks(const target& t, F&& attack) {
  auto c = t.client();
  EXPECT_TRUE(c->request()) << "the normal client before the attack";
  std::atomic<bool> done{false};
  std::thread attacker([&] {
    attack();
    done = true;
  });
  int answered = 0, failed = 0;
  while (!done) {
    if (c->request())
      ++answered;
    else
      ++failed;
    std::this_thread::sleep_for(50ms);
  }
  attacker.join();
  EXPECT_EQ(failed, 0) << "normal requests failed during the attack (" << answered
                       << " answered)";
  EXPECT_TRUE(c->request()) << "the normal client after the attack";
  return answered;
}

// Slowloris: a request dripped a byte every 50 ms is cut by the server's
// deadlines (idle + request timeout), not held forever.
inline void slowloris_is_cut(const target& t) {
  const auto before = t.stats().timeouts;
  std::chrono::milliseconds held{};
  const auto limit = 3 * (t.settings.idle_timeout + t.settings.request_timeout) + 2s;
  while_normal_client_asks(t, [&] {
    raw_connection c(t.port);
    ASSERT_TRUE(c.ok());
    held = slowloris(c, t.slow_request, 50ms, limit);
  });
  EXPECT_LT(held, limit) << "the server held a slowloris connection for " << held.count()
                         << " ms and never closed it";
  EXPECT_GE(t.stats().timeouts, before + 1);
}

// 300 idle connections against a cap of 64: the open connections (and the
// server's threads) stay under the cap, the rest are closed at once, and
// the idle ones are closed after idle_timeout.
inline void idle_connections_are_capped(const target& t) {
  ASSERT_LE(t.settings.max_connections, 64u);
  const uint64_t threads_before = proc_status("Threads");
  uint64_t threads_during = 0, open_during = 0;
  std::string refusal;
  while_normal_client_asks(t, [&] {
    auto idle = open_idle(t.port, 300);
    ASSERT_EQ(idle.size(), 300u) << "connect failed";
    // The refused ones are closed at once (HTTP: after a 503).
    size_t closed = 0;
    for (auto& c : idle) {
      std::string said;
      if (c.closed_by_peer(20ms, &said)) {
        ++closed;
        if (refusal.empty()) refusal = said;
      }
    }
    threads_during = proc_status("Threads");
    open_during = t.stats().open;
    EXPECT_GE(closed, 300u - t.settings.max_connections);
  });
  EXPECT_LE(open_during, t.settings.max_connections);
  EXPECT_LE(threads_during, threads_before + t.settings.max_connections + 4)
      << "a thread per connection, uncapped";
  EXPECT_GE(t.stats().refused_over_cap, 300u - t.settings.max_connections);
  if (t.http) {
    EXPECT_NE(refusal.find("503"), std::string::npos) << refusal;
  }
}

// Connections that each send a header claiming 256 MiB (binary: a frame
// header; HTTP: Content-Length) hold no more than what arrived: the
// server's buffered bytes stay small, and so does the process's peak RSS.
inline void huge_claims_allocate_nothing(const target& t) {
  const uint64_t hwm_before = proc_status("VmHWM");
  uint64_t buffered_during = 0;
  std::vector<raw_connection> attackers;
  while_normal_client_asks(t, [&] {
    for (int i = 0; i < 6; ++i) {
      raw_connection c(t.port);
      ASSERT_TRUE(c.ok());
      if (t.http) {
        ASSERT_TRUE(c.send("POST /lookup HTTP/1.1\r\nHost: x\r\nContent-Length: 268435456\r\n\r\n"
                           "{\"table\":"));
      } else {
        auto head = header_claiming(wire::frame_type::lookup, 256u << 20);
        ASSERT_TRUE(c.send(std::span<const std::byte>(head)));
        ASSERT_TRUE(c.send(std::string(1000, 'x')));
      }
      attackers.push_back(std::move(c));
    }
    std::this_thread::sleep_for(300ms);
    buffered_during = t.stats().buffered_bytes;
  });
  // Each holds at most the first 64 KiB chunk; the normal client's small
  // request and reply are on top.
  EXPECT_LE(buffered_during, uint64_t{7} * 64 * 1024);
  EXPECT_LT(proc_status("VmHWM"), hwm_before + 100 * 1024)
      << "peak RSS grew by " << (proc_status("VmHWM") - hwm_before) / 1024 << " MiB";
}

// Real bytes beyond the server's buffer budget: payloads that really
// arrive are charged; over max_buffered_bytes a frame is refused, the
// connection closed, the budget never exceeded.
inline void buffered_bytes_stay_under_the_budget(const target& t) {
  const uint64_t cap = t.settings.max_buffered_bytes;
  uint64_t peak = 0;
  std::string refusals;
  while_normal_client_asks(t, [&] {
    std::vector<raw_connection> attackers;
    const uint32_t claim = uint32_t(cap / 2 + cap / 4);  // two of them do not fit
    const std::string body(cap / 2, 'x');
    for (int i = 0; i < 4; ++i) {
      raw_connection c(t.port);
      ASSERT_TRUE(c.ok());
      if (t.http) {
        c.send("POST /lookup HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(claim) +
               "\r\n\r\n");
      } else {
        auto head = header_claiming(wire::frame_type::lookup, claim);
        c.send(std::span<const std::byte>(head));
      }
      // Blocks until the server read it all, or fails once it refused.
      (void)::send(c.fd(), body.data(), body.size(), MSG_NOSIGNAL);
      attackers.push_back(std::move(c));
      peak = std::max(peak, t.stats().buffered_bytes);
    }
    for (int i = 0; i < 10; ++i) {
      peak = std::max(peak, t.stats().buffered_bytes);
      std::this_thread::sleep_for(30ms);
    }
    // The refused ones were told why (HTTP 503; binary: an error frame).
    for (auto& c : attackers) c.closed_by_peer(50ms, &refusals);
  });
  if (t.http) {
    EXPECT_NE(refusals.find("HTTP/1.1 503"), std::string::npos) << refusals;
  } else {
    EXPECT_NE(refusals.find("receive buffers"), std::string::npos) << refusals;
  }
  EXPECT_LE(peak, cap);
  EXPECT_GE(t.stats().buffer_refusals, 1u) << "4 x " << cap / 2 << " bytes all fit in " << cap;
}

// Out of descriptors: the accept loop backs off instead of spinning (CPU
// time over a second stays low), counts it, and accepts again once
// descriptors are free; connections already open keep being answered.
inline void out_of_descriptors_backs_off(const target& t) {
  auto c = t.client();
  ASSERT_TRUE(c->request());
  // The client sockets are made first: connecting them takes no
  // descriptor, so under the lowered limit only the server's accepts do.
  std::vector<raw_connection> clients;
  for (int i = 0; i < 20; ++i) clients.push_back(raw_connection::unconnected());
  std::chrono::milliseconds cpu{};
  uint64_t backoffs = 0;
  {
    fd_limit limit(4);
    for (auto& r : clients) {
      const uint64_t open = t.stats().open, errors = t.stats().accept_errors;
      ASSERT_TRUE(r.connect(t.port)) << std::strerror(errno);
      for (int w = 0; w < 200 && t.stats().open == open && t.stats().accept_errors == errors; ++w)
        std::this_thread::sleep_for(5ms);
      if (t.stats().accept_errors > 0) break;
    }
    ASSERT_GE(t.stats().accept_errors, 1u) << "accept never ran out of descriptors";
    const auto cpu_before = cpu_time();
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(100ms);
      EXPECT_TRUE(c->request()) << "an open connection during the shortage";
    }
    cpu = cpu_time() - cpu_before;
    backoffs = t.stats().accept_backoffs;
    clients.erase(clients.begin(), clients.begin() + 3);  // frees descriptors
  }
  EXPECT_LT(cpu, 400ms) << "the accept loop spun on EMFILE";
  EXPECT_GE(backoffs, 1u);
  // Recovered: the waiting connection is accepted, new ones are answered.
  auto fresh = t.client();
  EXPECT_TRUE(fresh->request()) << "a new connection after the shortage";
}

}  // namespace strata::testing::hostile
