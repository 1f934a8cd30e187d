// Hostile clients against a training gateway (issue 16): the gateway is a
// binary server over the cluster's shards, so it gets the same attacks as
// a serving node's binary port (tests/serving/hostile_scenarios.hpp) —
// slowloris, idle connections over the cap, headers claiming 256 MiB,
// payloads beyond the buffer budget, no descriptors left — and replies
// over its max_reply_bytes are refused before they are built. In one
// process on a real store cluster (two shards, no workers).
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "actors/local_cluster.hpp"
#include "serving/binary_server.hpp"
#include "serving/training_gateway.hpp"
#include "tests/actors/checkpoint_test_util.hpp"
#include "tests/serving/hostile_scenarios.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::serving {
namespace {

using namespace std::chrono_literals;
namespace hostile = testing::hostile;

connection_settings small_settings() {
  connection_settings s;
  s.max_connections = 64;
  s.idle_timeout = 2500ms;
  s.request_timeout = 500ms;
  s.max_buffered_bytes = 4u << 20;
  return s;
}

// Runs `body` with a gateway's binary server (small settings) in front of
// a two-shard store cluster; the store is stopped afterwards.
void with_gateway(uint64_t max_reply_bytes,
                  const std::function<void(binary_server&, const hostile::target&,
                                           const std::string& table)>& body) {
  testing::temp_dir dir;
  auto c = actors::count_cluster(dir.path() / "no-data.tsv", dir.path(),
                                 actors::training_mode::async);
  c.workers.clear();
  c.heldout = model::reader_config{};
  c.checkpoint = actors::checkpoint_settings{};
  actors::cluster_hooks hooks;
  hooks.started = [&](caf::actor_system& system, const actors::training_cluster& cluster) {
    struct stop_at_exit {
      actors::coordinator_actor coordinator;
      ~stop_at_exit() { caf::anon_send(coordinator, actors::stop_atom::value); }
    } stop{cluster.coordinator};
    gateway_config gc;
    gc.table = c.table.name;
    gc.layout = c.table.layout;
    gc.timeout = 10s;
    gc.max_reply_bytes = max_reply_bytes;
    training_gateway gateway(system, cluster.coordinator, gc);
    binary_server server(gateway, small_settings());
    ASSERT_TRUE(server.start("127.0.0.1", 0).has_value());
    hostile::target t;
    t.port = server.port();
    t.stats = [&server] { return server.stats(); };
    t.settings = small_settings();
    const std::vector<uint64_t> keys{1, 2, 3};
    t.client = [port = t.port, table = c.table.name, keys] {
      return std::make_unique<hostile::binary_client>(port, table, keys);
    };
    std::vector<std::byte> frame, payload;
    wire::encode(payload, wire::key_request{c.table.name, keys});
    wire::append_frame(frame, wire::frame_type::lookup, 7, payload);
    t.slow_request.assign(reinterpret_cast<const char*>(frame.data()), frame.size());
    body(server, t, c.table.name);
    server.stop();
  };
  auto r = actors::run_local_cluster(c, {}, hooks);
  EXPECT_TRUE(r) << (r ? "" : r.err().message());
}

TEST(HostileGateway, SlowlorisIsCutByTheDeadlines) {
  with_gateway(128u << 20, [](binary_server&, const hostile::target& t, const std::string&) {
    hostile::slowloris_is_cut(t);
  });
}

TEST(HostileGateway, IdleConnectionsAreCapped) {
  with_gateway(128u << 20, [](binary_server&, const hostile::target& t, const std::string&) {
    hostile::idle_connections_are_capped(t);
  });
}

TEST(HostileGateway, HeadersClaiming256MiBAllocateNothing) {
  with_gateway(128u << 20, [](binary_server&, const hostile::target& t, const std::string&) {
    hostile::huge_claims_allocate_nothing(t);
  });
}

TEST(HostileGateway, BufferedBytesStayUnderTheBudget) {
  with_gateway(128u << 20, [](binary_server&, const hostile::target& t, const std::string&) {
    hostile::buffered_bytes_stay_under_the_budget(t);
  });
}

TEST(HostileGateway, OutOfDescriptorsBacksOffAndRecovers) {
  with_gateway(128u << 20, [](binary_server&, const hostile::target& t, const std::string&) {
    hostile::out_of_descriptors_backs_off(t);
  });
}

// Repeated keys cannot make the gateway build a reply over its cap.
TEST(HostileGateway, RepliesOverTheCapAreRefusedBeforeTheyAreBuilt) {
  with_gateway(64 * 1024, [](binary_server& server, const hostile::target& t,
                             const std::string& table) {
    auto s = wire::frame_socket::connect({"127.0.0.1", t.port}, 5s);
    ASSERT_TRUE(s.has_value());
    std::vector<std::byte> payload;
    wire::encode(payload, wire::key_request{table, std::vector<uint64_t>(100000, 1)});
    ASSERT_TRUE(s->send(wire::frame_type::lookup, 3, payload).has_value());
    auto reply = s->receive();
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->header.type, wire::frame_type::error);
    auto e = wire::decode_error(reply->payload);
    ASSERT_TRUE(e.has_value());
    EXPECT_NE(e->message.find("over max_reply_bytes 65536"), std::string::npos) << e->message;
    EXPECT_LE(server.stats().buffered_bytes, 2u << 20) << "the refused reply was charged";
    EXPECT_TRUE(t.client()->request()) << "a normal lookup after it";
  });
}

}  // namespace
}  // namespace strata::serving
