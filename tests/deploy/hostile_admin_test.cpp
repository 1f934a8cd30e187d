// Hostile clients against the admin API (issue 16 items 3 and 7), in front
// of a real training cluster: one idle connection, hundreds of idle
// connections, slowloris, a header claiming 256 MiB, running out of file
// descriptors. During and after each, an authenticated GET /status answers
// within 1 s, and stop() returns (it used to deadlock behind the reaping
// join of an idle connection's thread). The attacks and the scenarios are
// shared with the serving servers (tests/serving/hostile_scenarios.hpp).
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "deploy/admin_server.hpp"
#include "tests/deploy/admin_test_util.hpp"
#include "tests/serving/hostile_scenarios.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using namespace std::chrono_literals;
namespace hostile = testing::hostile;
constexpr const char* token = "hostile-admin-token-0123";

std::string status_request() {
  return std::string("GET /status HTTP/1.1\r\nHost: strata\r\nAuthorization: Bearer ") + token +
         "\r\n\r\n";
}

// GET /status with the token, 200 within 1 s; keeps its connection while
// the server keeps it open.
class status_client : public hostile::normal_client {
 public:
  explicit status_client(uint16_t port) : port_(port) {}
  bool request() override {
    if (!conn_.ok()) conn_ = hostile::raw_connection(port_);
    if (!conn_.send(status_request())) return drop();
    const auto res = hostile::read_http_response(conn_.fd(), 1s);
    if (res.rfind("HTTP/1.1 200", 0) != 0) return drop();
    if (res.find("Connection: close") != std::string::npos) conn_ = hostile::raw_connection();
    return true;
  }

 private:
  bool drop() {
    conn_ = hostile::raw_connection();
    return false;
  }
  uint16_t port_;
  hostile::raw_connection conn_;
};

serving::connection_settings small_settings() {
  serving::connection_settings s;
  s.max_connections = 64;
  s.idle_timeout = 1500ms;
  s.request_timeout = 2000ms;
  return s;
}

// The coordinator of a real (idle) training cluster behind an admin server.
struct admin_node {
  testing::temp_dir dir;
  threaded_config cfg;
  caf::actor_system system{cfg};
  std::optional<actors::training_cluster> cluster;
  std::unique_ptr<admin_server> server;

  admin_node() {
    auto c = actors::spawn_training_cluster(system, admin_cluster(dir.path()), admin_seams());
    EXPECT_TRUE(c) << c.err().to_string();
    if (!c) return;
    cluster.emplace(std::move(*c));
    admin_config ac;
    ac.token = token;
    ac.cluster = "admin-test";
    ac.nodes = {{"node0", "127.0.0.1"}};
    ac.request_timeout_seconds = 1;
    ac.connections = small_settings();
    auto s = admin_server::start(ac, system, cluster->coordinator);
    EXPECT_TRUE(s) << s.err().to_string();
    if (s) server = std::move(*s);
  }
  ~admin_node() {
    if (server) server->stop();
    if (cluster) cluster->stop();
  }

  hostile::target target() {
    hostile::target t;
    t.port = server->port();
    t.stats = [this] { return server->connections(); };
    t.settings = small_settings();
    t.client = [port = t.port] { return std::make_unique<status_client>(port); };
    t.http = true;
    t.slow_request = status_request();
    return t;
  }

  // stop() returns within 10 s (it deadlocked behind an idle connection);
  // a hung stop is released by closing `hold` so that the test can end.
  void stops_while(std::vector<hostile::raw_connection>& hold) {
    auto stopped = std::async(std::launch::async, [this] { server->stop(); });
    const bool in_time = stopped.wait_for(10s) == std::future_status::ready;
    EXPECT_TRUE(in_time) << "admin_server::stop() deadlocked behind idle connections";
    hold.clear();
    stopped.wait();
  }
};

TEST(HostileAdmin, OneIdleConnectionDoesNotHangTheApi) {
  admin_node n;
  ASSERT_TRUE(n.server);
  std::vector<hostile::raw_connection> idle;
  idle.emplace_back(n.server->port());
  ASSERT_TRUE(idle.back().ok());
  // Each on a new connection: the server reaps ended ones as it goes.
  for (int i = 0; i < 100; ++i) {
    status_client c(n.server->port());
    ASSERT_TRUE(c.request()) << "request " << i << " behind one idle connection";
  }
  // The idle one is closed by the server after idle_timeout.
  EXPECT_TRUE(idle.back().closed_by_peer(small_settings().idle_timeout + 2s));
  n.stops_while(idle);
}

TEST(HostileAdmin, IdleConnectionsAreCappedAndStopReturns) {
  admin_node n;
  ASSERT_TRUE(n.server);
  hostile::idle_connections_are_capped(n.target());
  // Idle connections held open while stopping.
  auto idle = hostile::open_idle(n.server->port(), 50);
  std::this_thread::sleep_for(100ms);
  n.stops_while(idle);
}

TEST(HostileAdmin, SlowlorisIsCut) {
  admin_node n;
  ASSERT_TRUE(n.server);
  hostile::slowloris_is_cut(n.target());
  std::vector<hostile::raw_connection> slow;
  slow.emplace_back(n.server->port());
  slow.back().send("GET /status HTTP/1.1\r\nHo");
  n.stops_while(slow);
}

TEST(HostileAdmin, HugeClaimsAllocateNothing) {
  admin_node n;
  ASSERT_TRUE(n.server);
  hostile::huge_claims_allocate_nothing(n.target());
  std::vector<hostile::raw_connection> none;
  n.stops_while(none);
}

TEST(HostileAdmin, OutOfDescriptorsBacksOff) {
  admin_node n;
  ASSERT_TRUE(n.server);
  hostile::out_of_descriptors_backs_off(n.target());
  std::vector<hostile::raw_connection> none;
  n.stops_while(none);
}

}  // namespace
}  // namespace strata::deploy
