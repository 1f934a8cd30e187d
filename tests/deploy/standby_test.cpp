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
//   while it holds one, it fails the run like any node.
// Real processes over the UCX transport on loopback; polls with deadlines.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "actors/checkpoint.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

// Generous: a loaded 2-core machine must finish, never hang the suite.
constexpr double deadline_s = 300;

// Three nodes that start (n0 coordinates) and `standby` standby nodes
// (n3, n4, ...), the count objective (exact sums), the admin API on n0;
// training runs far longer than the test (it is stopped): many epochs of
// a small file, or (`one_epoch`, for the exact-sum oracle, which reads each
// line once) one epoch of a large one.
fs::path write_manifest(const fs::path& d, uint16_t admin_port, int standby, bool one_epoch,
                        bool pass) {
  const fs::path file = d / "standby.yaml";
  std::ofstream m(file);
  m << "name: standby\nmode: " << (pass ? "pass\npass_batches: 20" : "async")
    << "\npartitions: 256\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "standby.secret").string()
    << "\n  create_if_missing: true\nnodes:\n";
  for (int i = 0; i < 3 + standby; ++i)
    m << "  - name: n" << i << "\n    host: 127.0.0.1\n    transport_port: " << testing::free_port()
      << "\n    ssd_path: " << (d / ("ssd-n" + std::to_string(i))).string() << "\n"
      << (i >= 3 ? "    standby: true\n" : "");
  m << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 3\n  dram_bytes: 256KiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n"
    << "caches:\n  count: 3\n  sets: 16\n"
    << "workers:\n  count: 3\n  batch_size: 64\n  epochs: " << (one_epoch ? 1 : 1000) << "\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: " << (one_epoch ? 300000 : 20000)
    << "\n    distinct_keys: 5000\n    seed: 3\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 10\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 10000\n"
    << "  join_timeout_seconds: 120\n"
    << "admin:\n  port: " << admin_port << "\n  token_file: " << (d / "standby.token").string()
    << "\n  create_if_missing: true\n";
  return file;
}

std::string read_text(const fs::path& f) {
  std::ifstream in(f);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A running three-node cluster with standby nodes, and the CLI around it.
class standby_cluster {
 public:
  standby_cluster(const fs::path& d, int standby, bool one_epoch = false, bool pass = false)
      : d_(d),
        manifest_(write_manifest(d, testing::free_port(), standby, one_epoch, pass)),
        launch_({"launch", manifest_.string()}, d / "out.txt", d / "err.txt") {}

  const fs::path& manifest() const { return manifest_; }
  strata_process& launch() { return launch_; }

  // Runs a CLI verb to its end; returns (exit code, stdout, stderr).
  std::tuple<int, std::string, std::string> cli(const std::vector<std::string>& args) {
    const auto n = std::to_string(calls_++);
    strata_process p(args, d_ / ("cli" + n + ".out"), d_ / ("cli" + n + ".err"));
    auto st = p.wait(120);
    const int rc = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
    return {rc, p.out(), p.err()};
  }
  // `strata status --json`, parsed (null when it fails).
  nlohmann::json status() {
    auto [rc, out, err] = cli({"status", "--manifest", manifest_.string(), "--json"});
    if (rc != 0) return nullptr;
    return nlohmann::json::parse(out, nullptr, false);
  }
  // The health `strata status --json` gives node `name` ("" if none).
  std::string health(const std::string& name) {
    auto doc = status();
    if (!doc.is_object()) return "";
    for (const auto& n : doc["nodes"])
      if (n["name"] == name) return n["health"].get<std::string>();
    return "";
  }
  // Waits until training has trained examples (the progress the standby
  // node joins after).
  void wait_for_training() {
    ASSERT_TRUE(poll_until(
        [&] {
          if (!launch_.running()) return true;
          auto doc = status();
          return doc.is_object() && doc["training"]["examples"].get<uint64_t>() > 0;
        },
        deadline_s))
        << launch_.out() << launch_.err();
    ASSERT_TRUE(launch_.running()) << "the cluster ended\n" << launch_.out() << launch_.err();
  }
  // `strata node` for node `name` of `manifest` (default: the cluster's).
  std::unique_ptr<strata_process> start_node(const std::string& name, fs::path manifest = {}) {
    if (manifest.empty()) manifest = manifest_;
    const auto n = std::to_string(calls_++);
    return std::make_unique<strata_process>(
        std::vector<std::string>{"node", "--manifest", manifest.string(), "--node", name},
        d_ / (name + "-" + n + ".out"), d_ / (name + "-" + n + ".err"));
  }
  // Waits until node `name` joined (the coordinator's node says so).
  void wait_joined(const std::string& name, strata_process& node) {
    ASSERT_TRUE(poll_until(
        [&] {
          return !node.running() || !launch_.running() ||
                 launch_.out().find("cluster: node " + name + " joined (standby)") !=
                     std::string::npos;
        },
        deadline_s))
        << launch_.out() << launch_.err() << node.out() << node.err();
    ASSERT_TRUE(node.running()) << node.out() << node.err();
    ASSERT_TRUE(launch_.running()) << launch_.out() << launch_.err();
  }
  // `strata stop`, then every node of the launch exits 0.
  void stop_cleanly() {
    auto [rc, out, err] = cli({"stop", "--manifest", manifest_.string()});
    EXPECT_EQ(rc, 0) << err;
    auto st = launch_.wait(deadline_s);
    ASSERT_TRUE(st) << "the cluster did not stop\n" << launch_.out() << launch_.err();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << launch_.out() << launch_.err();
  }

 private:
  fs::path d_;
  fs::path manifest_;
  strata_process launch_;
  int calls_ = 0;
};

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
  EXPECT_TRUE(poll_until([&] { return c.health("n3") == "ok"; }, deadline_s))
      << c.health("n3");
  const auto examples_at_join = c.status()["training"]["examples"].get<uint64_t>();
  // Training goes on with n3 in the cluster.
  ASSERT_TRUE(poll_until(
      [&] {
        auto doc = c.status();
        return !c.launch().running() ||
               (doc.is_object() &&
                doc["training"]["examples"].get<uint64_t>() > examples_at_join);
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
      << c.launch().err() << "\nn3:\n" << n3->out() << n3->err();
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
      << "training stopped after n3 was killed\n" << c.launch().err();
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
  auto [rc5, out5, err5] =
      c.cli({"scale", "--manifest", m, "--shards", "5", "--placement", "n0", "n1", "n2", "n3", "n3"});
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
  ASSERT_TRUE(poll_until(
      [&] {
        auto st = c.status();
        return !c.launch().running() ||
               (st.is_object() && st["training"]["examples"].get<uint64_t>() > before);
      },
      deadline_s));

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
  if (err.find("cluster: standby node n3 is gone (") != std::string::npos)
    EXPECT_NE(err.find(") with shards 3: their requests fail"), std::string::npos) << err;
  EXPECT_EQ(err.find("it held no shards"), std::string::npos) << err;
  EXPECT_EQ(c.launch().out().find("== report: cluster standby"), std::string::npos)
      << "training finished anyway";
}

}  // namespace
}  // namespace strata
