// Clusters of several nodes with real processes: `strata launch` starts one
// `strata node` per node of the manifest, the nodes join over the UCX
// transport on loopback (each on its own port), and shards, cache tiers and
// workers are spread over them. The tests check what a user relies on:
// - the exact-sum invariant holds across processes (count objective: every
//   key's weights equal its sightings), in async and pass mode, through the
//   final checkpoint that the coordinator cuts over every node;
// - training reaches the single-node run's held-out AUC on the same data;
// - killing one node's process mid-training stops the cluster with an error
//   naming the node, within the heartbeat timeout plus a margin, and no
//   process hangs.
// Polls with deadlines; no fixed sleeps.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "actors/checkpoint.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

namespace fs = std::filesystem;
using strata::testing::temp_dir;

// Generous: a loaded 2-core CI machine must finish, never hang the suite.
constexpr double run_deadline_s = 300;

struct cluster_spec {
  std::string name = "multi";
  uint32_t nodes = 3;  // 1: no nodes list (the single-node baseline)
  bool count = false;  // count objective (exact sums) instead of the CTR model
  bool pass = false;
  uint64_t rows = 40000;
  uint32_t epochs = 1;
  uint32_t shards = 3, caches = 3, workers = 3;
  uint64_t checkpoint_every = 0;     // batches per worker (0: at the end only)
  std::string on_failure = "stop";
};

// Writes the manifest; data and checkpoints under `d` (the data file is
// shared by every manifest of a test).
fs::path write_manifest(const fs::path& d, const cluster_spec& spec) {
  const fs::path file = d / (spec.name + ".yaml");
  std::ofstream m(file);
  m << "name: " << spec.name << "\nmode: " << (spec.pass ? "pass" : "async")
    << "\npartitions: 256\nthreads: 2\n";
  if (spec.pass) m << "pass_batches: 40\n";
  if (spec.nodes > 1) {
    m << "cluster_secret:\n  file: " << (d / (spec.name + ".secret")).string()
      << "\n  create_if_missing: true\nnodes:\n";
    for (uint32_t i = 0; i < spec.nodes; ++i)
      m << "  - name: n" << i << "\n    host: 127.0.0.1\n    transport_port: " << testing::free_port()
        << "\n    ssd_path: " << (d / (spec.name + "-n" + std::to_string(i))).string() << "\n";
  }
  if (spec.count) {
    m << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n";
  } else {
    m << "table:\n  name: ctr\n  seed: 7\n  optimizer:\n    kind: adagrad\n"
      << "    learning_rate: 0.1\n  initializer:\n    kind: normal\n    stddev: 0.01\n"
      << "model:\n  embedding_dim: 8\n  hidden: [32]\n";
  }
  m << "shards:\n  count: " << spec.shards << "\n  dram_bytes: 256KiB\n  ssd_path: "
    << (d / (spec.name + "-state")).string() << "\n  map_bytes: 256MiB\n"
    << "  flush_batch_rows: 512\n"
    << "caches:\n  count: " << spec.caches << "\n  sets: 16\n"
    << "workers:\n  count: " << spec.workers << "\n  batch_size: 64\n  epochs: " << spec.epochs
    << "\n"
    << "data:\n  path: " << (d / "data.tsv").string()
    << "\n  heldout_fraction: " << (spec.count ? "0" : "0.1") << "\n"
    << "  generate:\n    rows: " << spec.rows << "\n    distinct_keys: 20000\n    seed: 11\n"
    << "checkpoint:\n  dir: " << (d / (spec.name + "-ckpt")).string()
    << "\n  keep: 1000\n  interval_batches: " << spec.checkpoint_every
    << "\n  on_failure: " << spec.on_failure << "\n  max_restarts: 2\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 10000\n"
    << "  join_timeout_seconds: 120\n";
  return file;
}

struct run_result {
  int status = -1;
  std::string out, err;
};

run_result launch(const fs::path& manifest, const fs::path& logs) {
  strata_process p({"launch", manifest.string()}, logs / "out.txt", logs / "err.txt");
  run_result r;
  auto st = p.wait(run_deadline_s);
  EXPECT_TRUE(st) << "launch of " << manifest << " did not finish in " << run_deadline_s << " s";
  if (st) r.status = *st;
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::optional<double> number_after(const std::string& text, const std::string& label) {
  std::smatch m;
  const std::regex re(label + ": ([0-9.]+)");
  if (!std::regex_search(text, m, re)) return std::nullopt;
  return std::stod(m[1]);
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The exact sums over every worker's whole stream, in the final checkpoint
// (cut by the coordinator across every node's shards at the end).
void expect_exact_sums_after(const fs::path& manifest, const fs::path& checkpoints) {
  auto latest = actors::latest_checkpoint(checkpoints);
  ASSERT_TRUE(latest) << "no complete checkpoint under " << checkpoints;
  auto positions = check_exact_sums(manifest, *latest);
  auto m = deploy::load_manifest(manifest);
  ASSERT_TRUE(m);
  ASSERT_TRUE(deploy::resolve_data_split(*m));
  ASSERT_EQ(positions.size(), m->cluster.workers.size());
  for (size_t w = 0; w < positions.size(); ++w) {
    const auto& wc = m->cluster.workers[w];
    EXPECT_EQ(positions[w], (wc.data.limit + wc.batch_size - 1) / wc.batch_size)
        << "worker " << w << " did not train its whole window";
  }
}

TEST(MultiNode, ThreeProcessesKeepExactSumsInAsyncMode) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "exact";
  spec.count = true;
  const auto manifest = write_manifest(dir.path(), spec);
  auto r = launch(manifest, dir.path());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("cluster: all 3 nodes ready"), std::string::npos) << r.out;
  // Every member reports its own part; the coordinator the whole run.
  EXPECT_NE(r.out.find("== report: node n1 of cluster exact =="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("== report: node n2 of cluster exact =="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("== report: cluster exact (async mode) =="), std::string::npos) << r.out;
  expect_exact_sums_after(manifest, dir.path() / "exact-ckpt");
  // Each node's shard lives in that node's own ssd_path.
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(fs::exists(dir.path() / ("exact-n" + std::to_string(i)) /
                           ("shard-" + std::to_string(i)) / "data.mdb"))
        << "shard " << i << " not under node n" << i << "'s ssd_path";
}

TEST(MultiNode, TwoProcessesKeepExactSumsInPassMode) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "pass";
  spec.count = true;
  spec.pass = true;
  spec.nodes = 2;
  spec.shards = 2;
  spec.caches = 2;
  spec.workers = 2;
  spec.rows = 20000;
  const auto manifest = write_manifest(dir.path(), spec);
  auto r = launch(manifest, dir.path());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  expect_exact_sums_after(manifest, dir.path() / "pass-ckpt");
}

TEST(MultiNode, ThreeProcessesReachTheSingleNodeAuc) {
  temp_dir dir;
  cluster_spec single;
  single.name = "single";
  single.nodes = 1;
  cluster_spec multi;
  multi.name = "three";
  const auto single_manifest = write_manifest(dir.path(), single);
  const auto multi_manifest = write_manifest(dir.path(), multi);
  fs::create_directories(dir.path() / "single-logs");
  fs::create_directories(dir.path() / "three-logs");
  auto one = launch(single_manifest, dir.path() / "single-logs");
  ASSERT_EQ(one.status, 0) << one.out << one.err;
  auto three = launch(multi_manifest, dir.path() / "three-logs");
  ASSERT_EQ(three.status, 0) << three.out << three.err;
  const auto auc_one = number_after(one.out, "held-out AUC");
  const auto auc_three = number_after(three.out, "held-out AUC");
  ASSERT_TRUE(auc_one && auc_three) << one.out << three.out;
  EXPECT_GT(*auc_one, 0.55) << "the single-node run did not learn";
  EXPECT_NEAR(*auc_three, *auc_one, 0.01) << three.out;
  // The same examples trained, and every key stored once over the nodes.
  EXPECT_EQ(number_after(one.out, "examples"), number_after(three.out, "examples"));
  EXPECT_EQ(number_after(one.out, "stored keys"), number_after(three.out, "stored keys"));
}

TEST(MultiNode, KilledNodeStopsTheClusterNamingIt) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "kill";
  spec.epochs = 200;  // minutes of training: it is killed long before the end
  const auto manifest = write_manifest(dir.path(), spec);
  strata_process p({"launch", manifest.string()}, dir.path() / "out.txt", dir.path() / "err.txt");
  std::optional<pid_t> victim;
  ASSERT_TRUE(poll_until(
      [&] {
        std::smatch m;
        const std::string out = p.out();
        static const std::regex re("\\(node n1, pid ([0-9]+)\\)");
        if (std::regex_search(out, m, re)) victim = static_cast<pid_t>(std::stoi(m[1]));
        return victim && out.find("cluster: all 3 nodes ready") != std::string::npos;
      },
      run_deadline_s))
      << p.out() << p.err();
  ASSERT_EQ(::kill(*victim, SIGKILL), 0);
  // Heartbeat timeout (10 s) plus a generous margin for a loaded machine.
  auto st = p.wait(10 + 50);
  ASSERT_TRUE(st) << "the launcher hung after node n1 was killed\n" << p.out() << p.err();
  const std::string err = p.err();
  EXPECT_NE(*st, 0);
  EXPECT_NE(err.find("node 'n1' (pid " + std::to_string(*victim) + ") was killed by signal 9"),
            std::string::npos)
      << err;
  // The coordinator's node saw it go down, or the launcher's stop (after it
  // saw the death) came first: then n0 says goodbye to n1 among the rest.
  // (It logged "node 'n1' down: this node stopped" for both before.)
  EXPECT_TRUE(err.find("[n0]: node 'n1' down") != std::string::npos ||
              std::regex_search(err, std::regex("\\[n0\\]: stopping: goodbye to nodes .*'n1'")))
      << err;
  EXPECT_EQ(occurrences(p.out(), "== report: cluster kill"), 0u) << "training finished anyway";
}

// Policy restart: node n1 is killed after a checkpoint; the launcher
// restarts every node from the latest complete checkpoint (each node
// restores the shards it hosts), and training ends with every key's exact
// total: nothing lost, nothing applied twice. The restarted nodes reuse
// their fixed ports at once (docs/multi-node.md, Failures).
TEST(MultiNode, KilledNodeRestartsTheClusterFromACheckpointWithExactSums) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "restart";
  spec.count = true;
  spec.rows = 60000;
  spec.checkpoint_every = 40;
  spec.on_failure = "restart";
  const auto manifest = write_manifest(dir.path(), spec);
  const auto checkpoints = dir.path() / "restart-ckpt";
  strata_process p({"launch", manifest.string()}, dir.path() / "out.txt", dir.path() / "err.txt");
  ASSERT_TRUE(poll_until([&] { return actors::complete_checkpoints(checkpoints).size() >= 2; },
                         run_deadline_s))
      << p.out() << p.err();
  std::smatch m;
  const std::string out = p.out();
  static const std::regex re("\\(node n1, pid ([0-9]+)\\)");
  ASSERT_TRUE(std::regex_search(out, m, re)) << out;
  const pid_t victim = static_cast<pid_t>(std::stoi(m[1]));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  auto st = p.wait(run_deadline_s);
  ASSERT_TRUE(st) << "the launcher did not finish\n" << p.out() << p.err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << p.out() << p.err();
  EXPECT_NE(p.err().find("node 'n1' (pid " + std::to_string(victim) +
                         ") was killed by signal 9 (Killed); restarting the cluster from checkpoint"),
            std::string::npos)
      << p.err();
  // Three nodes resumed, each restoring its own shard.
  EXPECT_EQ(occurrences(p.out(), "resumed from checkpoint"), 3u) << p.out();
  expect_exact_sums_after(manifest, checkpoints);
}

// Nodes started from different manifests (here: one extra comment line)
// never train together: the coordinator's node fails naming the node and
// the mismatch, and the other node exits too instead of waiting forever.
TEST(MultiNode, NodesOfDifferentManifestsRefuseToJoin) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "mixed";
  spec.nodes = 2;
  spec.shards = spec.caches = spec.workers = 2;
  const auto manifest = write_manifest(dir.path(), spec);
  const auto other = dir.path() / "mixed-edited.yaml";
  {
    std::ifstream in(manifest);
    std::ofstream out(other);
    out << in.rdbuf() << "# edited on one host only\n";
  }
  // The coordinator's node first: it generates the data the other reads.
  strata_process n0({"node", "--manifest", manifest.string(), "--node", "n0"},
                    dir.path() / "n0.out", dir.path() / "n0.err");
  ASSERT_TRUE(poll_until([&] { return n0.out().find("transport: node n0 listening") !=
                                      std::string::npos; },
                         run_deadline_s))
      << n0.out() << n0.err();
  strata_process n1({"node", "--manifest", other.string(), "--node", "n1"},
                    dir.path() / "n1.out", dir.path() / "n1.err");
  auto st0 = n0.wait(120);
  auto st1 = n1.wait(60);
  ASSERT_TRUE(st0 && st1) << n0.err() << n1.err();
  EXPECT_NE(*st0, 0);
  EXPECT_NE(*st1, 0);
  EXPECT_NE(n0.err().find("node 'n1' runs another manifest than node 'n0'"), std::string::npos)
      << n0.err();
  EXPECT_EQ(n0.out().find("cluster: all 2 nodes ready"), std::string::npos) << n0.out();
}

// Membership (issue 16 item 1): two nodes whose cluster secrets differ
// never form a cluster, and each says why. The joining node fails at once
// naming the node it dialled and the wrong proof; the node it dialled
// names the refusal when its join times out. (The manifests differ only in
// the secret file's path: the hello exchange fails before the manifest
// fingerprints are compared.)
TEST(MultiNode, NodesWithDifferentClusterSecretsRefuseEachOtherNamingWhy) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "secrets";
  spec.nodes = 2;
  spec.shards = spec.caches = spec.workers = 2;
  const auto manifest = write_manifest(dir.path(), spec);
  std::string text;
  {
    std::ifstream in(manifest);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  // n0 waits this long for n1, which starts after n0 listens and must dial
  // it meanwhile (15 s: room for a slow start on a loaded machine).
  text = replace(text, "join_timeout_seconds: 120", "join_timeout_seconds: 15");
  const auto secret = (dir.path() / "secrets.secret").string();
  const auto other_secret = (dir.path() / "other-host.secret").string();
  const auto m0 = dir.path() / "n0.yaml";
  const auto m1 = dir.path() / "n1.yaml";
  std::ofstream(m0) << text;
  std::ofstream(m1) << replace(text, secret, other_secret);
  strata_process n0({"node", "--manifest", m0.string(), "--node", "n0"}, dir.path() / "n0.out",
                    dir.path() / "n0.err");
  ASSERT_TRUE(poll_until([&] { return n0.out().find("transport: node n0 listening") !=
                                      std::string::npos; },
                         run_deadline_s))
      << n0.out() << n0.err();
  strata_process n1({"node", "--manifest", m1.string(), "--node", "n1"}, dir.path() / "n1.out",
                    dir.path() / "n1.err");
  auto st1 = n1.wait(60);
  auto st0 = n0.wait(60);
  ASSERT_TRUE(st0 && st1) << n0.err() << n1.err();
  EXPECT_NE(*st0, 0);
  EXPECT_NE(*st1, 0);
  // Each node created its own secret: they differ.
  EXPECT_NE(n0.out().find("cluster: created the cluster secret " + secret), std::string::npos)
      << n0.out();
  EXPECT_NE(n1.out().find("cluster: created the cluster secret " + other_secret),
            std::string::npos)
      << n1.out();
  EXPECT_NE(n1.err().find("strata node: node 'n1': cannot join node 'n0' at 127.0.0.1:"),
            std::string::npos)
      << n1.err();
  EXPECT_NE(n1.err().find("wrong proof for node 'n0'"), std::string::npos) << n1.err();
  EXPECT_NE(n1.err().find("cluster_secret files differ"), std::string::npos) << n1.err();
  EXPECT_NE(n0.err().find("node 'n1' did not connect within 15 s"), std::string::npos) << n0.err();
  EXPECT_NE(n0.err().find("refused by node 'n1'"), std::string::npos) << n0.err();
  EXPECT_EQ(n0.out().find("cluster: all 2 nodes ready"), std::string::npos) << n0.out();
}

}  // namespace
}  // namespace strata
