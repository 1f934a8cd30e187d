// /status reports every node's health as the transport sees it (issue 22:
// the other nodes said "unknown" while they trained), each shard's and
// cache tier's node from the placement, and a placement error names the
// unknown node. The transport's view is a seam here (a real three-node
// cluster: tests/deploy/cluster_ops_test.cpp); the cluster, the HTTP
// server and client are real.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/coordinator_actor.hpp"
#include "deploy/admin_client.hpp"
#include "deploy/admin_server.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/deploy/admin_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using json = nlohmann::json;
using strata::testing::temp_dir;

TEST(AdminHealth, NodesShowTheTransportsViewAndShardsTheirNode) {
  temp_dir dir;
  const auto config = admin_cluster(dir.path());
  threaded_config cfg;
  caf::actor_system system(cfg);
  auto bad_rows = std::make_shared<uint64_t>(0);
  auto cluster = actors::spawn_training_cluster(system, config, admin_seams(bad_rows));
  ASSERT_TRUE(cluster) << cluster.err().to_string();

  admin_config ac;
  ac.token = "s3cret-token-for-tests";
  ac.cluster = config.name;
  ac.nodes = {{"n0", "10.0.0.1"}, {"n1", "10.0.0.2"}, {"n2", "10.0.0.3"}, {"n3", "10.0.0.4"}};
  ac.shard_nodes = {"n0", "n2"};
  ac.cache_nodes = {"n1"};
  ac.transport = [] {
    transport::transport_stats s;
    s.node = "n0";
    s.peers.push_back({.name = "n1", .up = true});
    s.peers.push_back({.name = "n2", .up = false, .down_reason = "no frame for 10000 ms"});
    return s;  // n3 never joined
  };
  auto server = admin_server::start(ac, system, cluster->coordinator);
  ASSERT_TRUE(server) << server.err().to_string();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());

  auto st = admin_request(address, "GET", "/status", ac.token);
  ASSERT_TRUE(st && st->status == 200u) << (st ? st->body : st.err().to_string());
  const auto status = json::parse(st->body);
  EXPECT_EQ(status["nodes"][0]["health"], "ok");
  EXPECT_EQ(status["nodes"][1]["health"], "ok");
  EXPECT_EQ(status["nodes"][2]["health"], "down: no frame for 10000 ms");
  EXPECT_EQ(status["nodes"][3]["health"], "not connected");
  EXPECT_EQ(status["shards"][0]["node"], "n0");
  EXPECT_EQ(status["shards"][1]["node"], "n2");
  EXPECT_EQ(status["caches"][0]["node"], "n1");
  EXPECT_TRUE(status["training"]["examples_per_second"].is_null()) << st->body;

  // The unknown node is named, whatever known nodes come before it.
  auto scale = admin_request(address, "POST", "/scale", ac.token,
                             R"({"shards": 3, "placement": ["n0", "n1", "n9"]})");
  ASSERT_TRUE(scale);
  EXPECT_EQ(scale->status, 400u);
  EXPECT_NE(scale->body.find(R"(unknown node \"n9\" (nodes: n0, n1, n2, n3))"),
            std::string::npos)
      << scale->body;
  // A new shard on a node that is down, or never joined: refused, naming
  // the node and its transport health (issue 19: other nodes take shards).
  scale = admin_request(address, "POST", "/scale", ac.token,
                        R"({"shards": 3, "placement": ["n0", "n2", "n2"]})");
  ASSERT_TRUE(scale);
  EXPECT_EQ(scale->status, 409u);
  EXPECT_NE(scale->body.find(R"(placement: shard 2 on node \"n2\": the node is down: no frame for 10000 ms)"),
            std::string::npos)
      << scale->body;
  scale = admin_request(address, "POST", "/scale", ac.token,
                        R"({"shards": 3, "placement": ["n0", "n2", "n3"]})");
  ASSERT_TRUE(scale);
  EXPECT_EQ(scale->status, 409u);
  EXPECT_NE(scale->body.find(R"(placement: shard 2 on node \"n3\": the node is not connected)"),
            std::string::npos)
      << scale->body;

  (*server)->stop();
  cluster->stop();
}

// Standby nodes (issue 19): "standby (not joined)" until they join, then
// the transport's view like any node.
TEST(AdminHealth, StandbyNodesShowWhetherTheyJoined) {
  temp_dir dir;
  const auto config = admin_cluster(dir.path());
  threaded_config cfg;
  caf::actor_system system(cfg);
  auto bad_rows = std::make_shared<uint64_t>(0);
  auto cluster = actors::spawn_training_cluster(system, config, admin_seams(bad_rows));
  ASSERT_TRUE(cluster) << cluster.err().to_string();

  admin_config ac;
  ac.token = "s3cret-token-for-tests";
  ac.cluster = config.name;
  ac.nodes = {{"n0", "10.0.0.1"},
              {"n1", "10.0.0.2"},
              {"n2", "10.0.0.3", true},
              {"n3", "10.0.0.4", true},
              {"n4", "10.0.0.5", true}};
  ac.transport = [] {
    transport::transport_stats s;
    s.node = "n0";
    s.peers.push_back({.name = "n1", .up = true});
    s.peers.push_back({.name = "n3", .up = true});
    s.peers.push_back({.name = "n4", .up = false, .down_reason = "connection error: reset"});
    return s;  // n2 never joined
  };
  auto server = admin_server::start(ac, system, cluster->coordinator);
  ASSERT_TRUE(server) << server.err().to_string();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto st = admin_request(address, "GET", "/status", ac.token);
  ASSERT_TRUE(st && st->status == 200u) << (st ? st->body : st.err().to_string());
  const auto status = json::parse(st->body);
  EXPECT_EQ(status["nodes"][1]["health"], "ok");
  EXPECT_EQ(status["nodes"][2]["health"], "standby (not joined)");
  EXPECT_EQ(status["nodes"][3]["health"], "ok");
  EXPECT_EQ(status["nodes"][4]["health"], "down: connection error: reset");
  (*server)->stop();
  cluster->stop();
}

}  // namespace
}  // namespace strata::deploy
