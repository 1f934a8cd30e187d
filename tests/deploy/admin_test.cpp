// The admin API over real HTTP on a free loopback port, in front of a real
// training cluster (threaded scheduler, LMDB shards): the token is
// required (401), /status reports shards, partitions, the map's epoch and
// rows per tier, /scale moves partitions while training runs (and refuses
// malformed, unknown and impossible requests with 4xx and a message),
// /checkpoint writes a complete checkpoint, /stop ends the run gracefully.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/coordinator_actor.hpp"
#include "deploy/admin_client.hpp"
#include "deploy/admin_server.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/deploy/admin_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using json = nlohmann::json;
using namespace strata::actors;
using strata::testing::temp_dir;

TEST(AdminApi, StatusScaleCheckpointStopOverHttp) {
  temp_dir dir;
  const auto config = admin_cluster(dir.path());
  threaded_config cfg;
  caf::actor_system system(cfg);
  // Far more data than the test lets it train: only /stop ends the run.
  auto bad_rows = std::make_shared<uint64_t>(0);
  auto seams = admin_seams(bad_rows);
  auto cluster = spawn_training_cluster(system, config, seams);
  ASSERT_TRUE(cluster) << cluster.err().to_string();

  admin_config ac;
  ac.port = 0;  // a free loopback port
  ac.token = "s3cret-token-for-tests";
  ac.cluster = config.name;
  ac.nodes = {{"node0", "127.0.0.1"}, {"node1", "127.0.0.2"}};
  auto server = admin_server::start(ac, system, cluster->coordinator);
  ASSERT_TRUE(server) << server.err().to_string();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto call = [&](const std::string& method, const std::string& target,
                  const std::string& body = "",
                  const std::string& token = "s3cret-token-for-tests") {
    auto r = admin_request(address, method, target, token, body);
    EXPECT_TRUE(r) << r.err().to_string();
    return r ? *r : admin_reply{};
  };

  // No token, a wrong token: 401 and nothing else.
  EXPECT_EQ(call("GET", "/status", "", "").status, 401u);
  auto wrong = call("POST", "/stop", "{}", "s3cret-token-for-tesTs");
  EXPECT_EQ(wrong.status, 401u);
  EXPECT_NE(wrong.body.find("missing or wrong admin token"), std::string::npos) << wrong.body;

  // Before training: two shards of 32 partitions, epoch 1.
  auto st = call("GET", "/status");
  ASSERT_EQ(st.status, 200u) << st.body;
  auto status = json::parse(st.body);
  EXPECT_EQ(status["state"], "idle");
  EXPECT_EQ(status["partition_map"]["epoch"], 1);
  ASSERT_EQ(status["shards"].size(), 2u);
  EXPECT_EQ(status["shards"][0]["partition_count"], 32);
  EXPECT_EQ(status["shards"][1]["partitions"][0], 1);
  EXPECT_EQ(status["nodes"][0]["health"], "ok");
  EXPECT_EQ(status["nodes"][1]["name"], "node1");

  // Train (the run answers only after the stop below).
  caf::scoped_actor runner{system};
  auto run = std::async(std::launch::async, [&] {
    caf::scoped_actor self{system};
    std::optional<training_summary> out;
    self->request(cluster->coordinator, caf::infinite, run_atom::value)
        .receive([&](training_summary& s) { out = s; },
                 [&](caf::error& e) { ADD_FAILURE() << system.render(e); });
    return out;
  });
  // Progress shows up in /status (poll with a deadline).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t batches = 0;
  while (batches < 50 && std::chrono::steady_clock::now() < deadline) {
    auto s = call("GET", "/status");
    if (s.status == 200) batches = json::parse(s.body)["training"]["batches"].get<uint64_t>();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(batches, 50u) << "no training progress in /status";

  // Bad requests: 4xx with a message naming the problem.
  struct bad_case {
    std::string body;
    unsigned status;
    std::string message;
  };
  const bad_case bad[] = {
      {"{\"shards\": 3", 400, "malformed JSON"},
      {"[3]", 400, "expected a JSON object"},
      {"{\"shard\": 3}", 400, "unknown field 'shard'"},
      {"{\"shards\": 0}", 400, "shards: expected a positive integer, got 0"},
      {"{\"shards\": \"3\"}", 400, "shards: expected a positive integer, got \"3\""},
      {"{\"shards\": 65}", 409, "only 64 partitions to spread"},
      {"{\"shards\": 2, \"placement\": [\"node0\", \"nodeX\"]}", 400, "unknown node \"nodeX\""},
      {"{\"shards\": 2, \"placement\": [\"node0\"]}", 400, "1 node names for 2 shards"},
      {"{\"shards\": 2, \"placement\": \"packed\"}", 400, "expected \"spread\""},
  };
  for (const auto& b : bad) {
    auto r = call("POST", "/scale", b.body);
    EXPECT_EQ(r.status, b.status) << b.body << " -> " << r.body;
    const auto message = json::parse(r.body, nullptr, false).value("error", std::string());
    EXPECT_NE(message.find(b.message), std::string::npos) << b.body << " -> " << r.body;
  }
  EXPECT_EQ(call("GET", "/nothing").status, 404u);
  EXPECT_EQ(call("GET", "/scale").status, 405u);

  // Scale 2 -> 3 while training runs: answered once committed.
  auto scaled = call("POST", "/scale", "{\"shards\": 3, \"placement\": \"spread\"}");
  ASSERT_EQ(scaled.status, 200u) << scaled.body;
  auto result = json::parse(scaled.body);
  EXPECT_EQ(result["epoch"], 2);
  EXPECT_EQ(result["shards"], 3);
  EXPECT_EQ(result["moved_partitions"], 21);
  st = call("GET", "/status");
  status = json::parse(st.body);
  EXPECT_EQ(status["state"], "training");
  EXPECT_EQ(status["partition_map"]["epoch"], 2);
  ASSERT_EQ(status["shards"].size(), 3u);
  EXPECT_EQ(status["shards"][2]["partition_count"], 21);
  EXPECT_GT(status["rows"]["dram"].get<uint64_t>() + status["rows"]["lmdb"].get<uint64_t>(), 0u);

  // An on-demand checkpoint, complete (FILES written) when answered.
  auto ck = call("POST", "/checkpoint", "{}");
  ASSERT_EQ(ck.status, 200u) << ck.body;
  const std::filesystem::path ck_dir = json::parse(ck.body)["checkpoint"].get<std::string>();
  EXPECT_TRUE(std::filesystem::exists(ck_dir / "FILES")) << ck_dir;
  EXPECT_EQ(ck_dir.parent_path(), config.checkpoint.directory);

  // Graceful stop: the run ends at the next cut, stopped before its data did.
  auto stop = call("POST", "/stop", "{}");
  EXPECT_EQ(stop.status, 202u) << stop.body;
  ASSERT_EQ(run.wait_for(std::chrono::seconds(120)), std::future_status::ready)
      << "the run did not stop";
  auto summary = run.get();
  ASSERT_TRUE(summary);
  EXPECT_TRUE(summary->stopped);
  EXPECT_EQ(*bad_rows, 0u);
  // After the run: a checkpoint request is refused with the reason.
  auto late = call("POST", "/checkpoint", "{}");
  EXPECT_EQ(late.status, 409u) << late.body;
  EXPECT_NE(late.body.find("training has ended"), std::string::npos) << late.body;

  (*server)->stop();
  cluster->stop();
}

TEST(AdminApi, ClientNamesTheAddressItCannotReach) {
  auto r = admin_request("127.0.0.1", "GET", "/status", "t");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message().find("expected HOST:PORT"), std::string::npos);
  temp_dir dir;
  EXPECT_FALSE(read_token_file((dir.path() / "absent").string()));
}

// Issue 16 item 6: a token file others can read, and the placeholder an
// older `strata render k8s` put into the Secret, worked as tokens.
TEST(AdminApi, TokenFilesReadableByOthersAndPlaceholdersAreRefused) {
  temp_dir dir;
  const auto file = dir.path() / "token";
  std::ofstream(file) << "a-token-of-twenty-characters\n";
  std::filesystem::permissions(file, std::filesystem::perms(0644));
  auto open = read_token_file(file.string());
  ASSERT_FALSE(open);
  EXPECT_NE(open.err().message().find("--token-file: " + file.string()), std::string::npos)
      << open.err().message();
  EXPECT_NE(open.err().message().find("chmod 600 " + file.string()), std::string::npos)
      << open.err().message();
  std::filesystem::permissions(file, std::filesystem::perms(0600));
  auto ok = read_token_file(file.string());
  ASSERT_TRUE(ok) << ok.err().message();
  EXPECT_EQ(*ok, "a-token-of-twenty-characters");

  threaded_config cfg;
  caf::actor_system system{cfg};
  for (const char* token :
       {"REPLACE-WITH-THE-ADMIN-TOKEN", "change-me-change-me", "<admin token>"}) {
    admin_config ac;
    ac.token = token;
    auto server = admin_server::start(ac, system, actors::coordinator_actor{});
    ASSERT_FALSE(server) << token;
    EXPECT_NE(server.err().message().find("admin API: the token holds a placeholder"),
              std::string::npos)
        << server.err().message();
  }
}

}  // namespace
}  // namespace strata::deploy
