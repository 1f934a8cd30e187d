// Nodes that join a running cluster (issue 19, "standby"): a manifest's
// nodes[i].standby node is not started by `strata launch`, the cluster
// trains without it, and `strata node --node NAME` brings it in mid-run:
// - it joins (the coordinator's node logs it), `strata status` shows it
//   "standby (not joined)" before and "ok" after, and the run ends cleanly
//   with every process exiting 0 (training runs many epochs and is
//   stopped; the exact-sum oracle covers one epoch, so the sums are left
//   to the scale tests, where rows move onto a joined node);
// - a standby node with another cluster secret, or another manifest, is
//   refused naming why (the fingerprints), and training goes on;
// - a joined standby node that is killed (it holds nothing) is logged and
//   training goes on to a clean end;
// - once joined, a scale places shards on it (exact sums at the end); killed
//   while it holds one, it fails the run like any node;
// - a spawn on it that hangs (the node stopped) leaves the coordinator
//   answering, and is abandoned when the node is marked down.
// Real processes over the UCX transport on loopback; polls with deadlines.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "actors/checkpoint.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/deploy/standby_cluster.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

TEST(Standby, NodeJoinsMidTrainingShowsInStatusAndTheRunEndsCleanly) {
  temp_dir dir;
  standby_cluster c(dir.path(), 1);
  c.wait_for_training();
  // Training started without n3: launch did not start it, nobody waited.
  EXPECT_NE(c.launch().out().find("launch: starting 3 nodes (n0, n1, n2)"), std::string::npos)
      << c.launch().out();
  EXPECT_NE(c.launch().out().find("launch: standby nodes n3 are not started"), std::string::npos)
      << c.launch().out();
  EXPECT_NE(c.launch().out().find("cluster: all 3 nodes ready (standby nodes that may join "
                                  "later: n3)"),
            std::string::npos)
      << c.launch().out();
  EXPECT_EQ(c.health("n3"), "standby (not joined)");
  EXPECT_EQ(c.health("n1"), "ok");
  auto [rc, summary, err] = c.cli({"status", "--manifest", c.manifest().string()});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_NE(summary.find("n3  127.0.0.1  standby (not joined)"), std::string::npos) << summary;

  auto n3 = c.start_node("n3");
  c.wait_joined("n3", *n3);
  EXPECT_NE(n3->out().find("node n3 of 4: hosts shards none; cache tiers none; workers none "
                           "(standby: joins the running cluster)"),
            std::string::npos)
      << n3->out();
  EXPECT_NE(n3->out().find("transport: node n3 connected to 3 peers"), std::string::npos)
      << n3->out();
  EXPECT_NE(n3->out().find("cluster: node n3 joined the running cluster"), std::string::npos)
      << n3->out();
  EXPECT_TRUE(poll_until([&] { return c.health("n3") == "ok"; }, deadline_s)) << c.health("n3");
  const auto examples_at_join = c.status()["training"]["examples"].get<uint64_t>();
  // Training goes on with n3 in the cluster.
  ASSERT_TRUE(poll_until(
      [&] {
        auto doc = c.status();
        return !c.launch().running() ||
               (doc.is_object() && doc["training"]["examples"].get<uint64_t>() > examples_at_join);
      },
      deadline_s));

  c.stop_cleanly();
  // n3 is told the run is over and exits 0 like any member.
  auto st = n3->wait(deadline_s);
  ASSERT_TRUE(st) << "node n3 did not end\n" << n3->out() << n3->err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << n3->out() << n3->err();
  EXPECT_EQ(c.launch().err().find("standby node n3 is gone"), std::string::npos)
      << c.launch().err();
  EXPECT_EQ(c.launch().err().find("did not acknowledge"), std::string::npos)
      << c.launch().err() << "\nn3:\n"
      << n3->out() << n3->err();
  // The final checkpoint was cut over every shard (n3 held none).
  EXPECT_TRUE(actors::latest_checkpoint(dir.path() / "ckpt")) << c.launch().out();
}

TEST(Standby, RefusedStandbyNodesAndAKilledOneLeaveTrainingAlone) {
  temp_dir dir;
  const fs::path d = dir.path();
  standby_cluster c(d, 2);
  c.wait_for_training();
  const std::string text = read_text(c.manifest());

  // n4 with another cluster secret: refused at the hello, naming why.
  const auto secret = (d / "standby.secret").string();
  std::string other_secret_text = text;
  other_secret_text.replace(other_secret_text.find(secret), secret.size(),
                            (d / "other.secret").string());
  const auto other_secret = d / "other-secret.yaml";
  std::ofstream(other_secret) << other_secret_text;
  {
    auto n4 = c.start_node("n4", other_secret);
    auto st = n4->wait(deadline_s);
    ASSERT_TRUE(st) << n4->out() << n4->err();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << n4->err();
    EXPECT_NE(n4->err().find("node 'n4': cannot join node 'n0' at 127.0.0.1:"), std::string::npos)
        << n4->err();
    EXPECT_NE(n4->err().find("cluster_secret files differ"), std::string::npos) << n4->err();
  }
  // n4 with another manifest (one comment more): refused by the
  // coordinator's node, naming both fingerprints.
  const auto edited = d / "edited.yaml";
  std::ofstream(edited) << text << "# edited on one host only\n";
  {
    auto n4 = c.start_node("n4", edited);
    auto st = n4->wait(deadline_s);
    ASSERT_TRUE(st) << n4->out() << n4->err();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << n4->err();
    EXPECT_NE(n4->err().find("node 'n4': node 'n0' refused it: node 'n4' runs another manifest "
                             "than node 'n0' (" +
                             c.manifest().string() + ": fingerprint "),
              std::string::npos)
        << n4->err();
    EXPECT_NE(n4->err().find(", theirs "), std::string::npos) << n4->err();
    EXPECT_NE(c.launch().err().find("cluster: refused standby node n4: node 'n4' runs another "
                                    "manifest"),
              std::string::npos)
        << c.launch().err();
    EXPECT_EQ(c.launch().out().find("cluster: node n4 joined"), std::string::npos);
  }
  ASSERT_TRUE(c.launch().running()) << c.launch().out() << c.launch().err();

  // n3 joins and is killed: holding nothing, it is logged and training goes on.
  auto n3 = c.start_node("n3");
  c.wait_joined("n3", *n3);
  n3->signal(SIGKILL);
  ASSERT_TRUE(n3->wait(deadline_s));
  ASSERT_TRUE(poll_until(
      [&] {
        return !c.launch().running() ||
               c.launch().err().find("cluster: standby node n3 is gone") != std::string::npos;
      },
      deadline_s))
      << c.launch().err();
  ASSERT_TRUE(c.launch().running()) << c.launch().out() << c.launch().err();
  const auto examples_after_kill = c.status()["training"]["examples"].get<uint64_t>();
  ASSERT_TRUE(poll_until(
      [&] {
        auto doc = c.status();
        return !c.launch().running() ||
               (doc.is_object() &&
                doc["training"]["examples"].get<uint64_t>() > examples_after_kill);
      },
      deadline_s))
      << "training stopped after n3 was killed\n"
      << c.launch().err();
  EXPECT_EQ(c.health("n3").rfind("down: ", 0), 0u) << c.health("n3");
  c.stop_cleanly();
  EXPECT_TRUE(actors::latest_checkpoint(d / "ckpt")) << c.launch().out();
}

// With remote scaling (strata scale --placement on any connected node): a
// scale places two new shards on the standby node once it joined (refused,
// naming it, before), training goes on, and the final checkpoint holds the
// exact sums: rows migrated onto the joined node and back through its
// shards' checkpoint copies lost nothing. Async and pass mode.
void scale_onto_standby(bool pass) {
  temp_dir dir;
  const fs::path d = dir.path();
  standby_cluster c(d, 1, /*one_epoch=*/true, pass);
  c.wait_for_training();
  const std::string m = c.manifest().string();

  // Before it joined: refused, and training goes on.
  auto [rcr, outr, errr] =
      c.cli({"scale", "--manifest", m, "--shards", "4", "--placement", "n0", "n1", "n2", "n3"});
  EXPECT_EQ(rcr, 1) << outr;
  EXPECT_NE(errr.find("placement: shard 3 on node \"n3\": the node is standby (not joined)"),
            std::string::npos)
      << errr;
  ASSERT_TRUE(c.launch().running()) << c.launch().out() << c.launch().err();
  auto refused = c.status();
  ASSERT_TRUE(refused.is_object());
  EXPECT_EQ(refused["shards"].size(), 3u) << refused.dump();

  auto n3 = c.start_node("n3");
  c.wait_joined("n3", *n3);
  // 3 -> 5: shards 3 and 4 on n3, under its own ssd_path.
  auto [rc5, out5, err5] = c.cli(
      {"scale", "--manifest", m, "--shards", "5", "--placement", "n0", "n1", "n2", "n3", "n3"});
  ASSERT_EQ(rc5, 0) << out5 << err5 << c.launch().err() << n3->err();
  auto st5 = c.status();
  ASSERT_EQ(st5["shards"].size(), 5u) << st5.dump();
  for (size_t i = 3; i < 5; ++i) {
    EXPECT_EQ(st5["shards"][i]["node"], "n3") << st5.dump();
    EXPECT_EQ(st5["shards"][i]["health"], "ok") << st5.dump();
    EXPECT_GT(st5["shards"][i]["partition_count"].get<uint64_t>(), 0u) << st5.dump();
  }
  EXPECT_TRUE(fs::exists(d / "ssd-n3" / "shard-3" / "data.mdb"));
  EXPECT_TRUE(fs::exists(d / "ssd-n3" / "shard-4" / "data.mdb"));
  const uint64_t before = st5["training"]["examples"].get<uint64_t>();
  ASSERT_NO_FATAL_FAILURE(c.wait_for_more_training(before));

  c.stop_cleanly();
  auto st = n3->wait(deadline_s);
  ASSERT_TRUE(st) << "node n3 did not end\n" << n3->out() << n3->err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << n3->out() << n3->err();
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no checkpoint\n" << c.launch().out();
  auto positions = check_exact_sums(c.manifest(), *latest);
  ASSERT_EQ(positions.size(), 3u);
  for (auto p : positions) EXPECT_GT(p, 0u);
}

TEST(Standby, ScalePlacesShardsOnAJoinedStandbyNodeWithExactSums) { scale_onto_standby(false); }

TEST(Standby, ScalePlacesShardsOnAJoinedStandbyNodeWithExactSumsPassMode) {
  scale_onto_standby(true);
}

// A spawn on a node that is alive but does not answer (stopped with
// SIGSTOP: its transport peers see it up until the heartbeat timeout)
// waits off the coordinator's thread: while it waits, `strata status`
// answers and shows the scale in progress. Once the heartbeat marks the
// node down, the scale is abandoned naming it and training goes on.
// (Before, the coordinator blocked inside the scale until the spawn
// answered or failed: no status showed a scale in progress.)
TEST(Standby, AStuckSpawnOnAStoppedNodeLeavesTheCoordinatorAnswering) {
  // Stopping n3 once froze another node's transport as well (n2 heard no
  // frame from anyone for 20 s): n3 stopped inside a send into n2's
  // shared-memory FIFO. Nodes on one host no longer use shared memory
  // (FailureTest.APeerStoppedInsideASendSilencesNoOtherPeer).
  temp_dir dir;
  const fs::path d = dir.path();
  standby_placements placed;
  placed.heartbeat_timeout_ms = 20000;
  standby_cluster c(d, 1, /*one_epoch=*/false, /*pass=*/false, placed);
  c.wait_for_training();
  const std::string m = c.manifest().string();
  auto n3 = c.start_node("n3");
  c.wait_joined("n3", *n3);
  n3->signal(SIGSTOP);
  auto scale = c.start_cli(
      {"scale", "--manifest", m, "--shards", "4", "--placement", "n0", "n1", "n2", "n3"});
  bool answered_while_scaling = false;
  poll_until(
      [&] {
        auto doc = c.status();
        answered_while_scaling = scale->running() && doc.is_object() &&
                                 doc["scaling_to"].is_number() && doc["scaling_to"] == 4;
        return answered_while_scaling || !scale->running();
      },
      deadline_s);
  EXPECT_TRUE(answered_while_scaling) << scale->out() << scale->err() << c.launch().err();

  auto ended = scale->wait(deadline_s);
  ASSERT_TRUE(ended) << "the scale did not end\n" << c.launch().err();
  EXPECT_TRUE(WIFEXITED(*ended) && WEXITSTATUS(*ended) == 1) << scale->out() << scale->err();
  EXPECT_NE(scale->err().find("spawning shard 3 failed (the scale is abandoned; 3 shards keep "
                              "training): "),
            std::string::npos)
      << scale->err();
  ASSERT_TRUE(c.launch().running()) << c.launch().out() << c.launch().err();
  auto after = c.status();
  ASSERT_TRUE(after.is_object());
  EXPECT_EQ(after["shards"].size(), 3u) << after.dump();
  EXPECT_TRUE(after["scaling_to"].is_null()) << after.dump();
  ASSERT_NO_FATAL_FAILURE(c.wait_for_more_training(after["training"]["examples"].get<uint64_t>()));

  n3->signal(SIGKILL);
  ASSERT_TRUE(n3->wait(deadline_s));
  c.stop_cleanly();
}

// The other side of the line: a joined standby node holding shards (a
// scale put one there) that dies is lost like any node: its shard's
// requests fail, training fails naming it, and the launcher (policy stop)
// exits non-zero; no process hangs.
TEST(Standby, AKilledStandbyNodeHoldingAShardFailsTheRun) {
  temp_dir dir;
  const fs::path d = dir.path();
  standby_cluster c(d, 1, /*one_epoch=*/true);
  c.wait_for_training();
  const std::string m = c.manifest().string();
  auto n3 = c.start_node("n3");
  c.wait_joined("n3", *n3);
  auto [rc4, out4, err4] =
      c.cli({"scale", "--manifest", m, "--shards", "4", "--placement", "n0", "n1", "n2", "n3"});
  ASSERT_EQ(rc4, 0) << out4 << err4 << c.launch().err() << n3->err();
  n3->signal(SIGKILL);
  ASSERT_TRUE(n3->wait(deadline_s));
  auto st = c.launch().wait(deadline_s);
  ASSERT_TRUE(st) << "the launcher hung after n3 was killed\n" << c.launch().err();
  EXPECT_FALSE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << c.launch().out() << c.launch().err();
  // Whichever node lost it first names it: a worker's request to shard 3,
  // or the coordinator's node (when it notices before it stops).
  const std::string err = c.launch().err();
  EXPECT_TRUE(err.find("node 'n3' is down (") != std::string::npos ||
              err.find("cluster: standby node n3 is gone (") != std::string::npos)
      << err;
  if (err.find("cluster: standby node n3 is gone (") != std::string::npos) {
    EXPECT_NE(err.find(") with shards 3: their requests fail"), std::string::npos) << err;
  }
  EXPECT_EQ(err.find("it held no shards"), std::string::npos) << err;
  EXPECT_EQ(c.launch().out().find("== report: cluster standby"), std::string::npos)
      << "training finished anyway";
}

}  // namespace
}  // namespace strata
