// Operating a cluster of several `strata node` processes (issue 22): what
// `strata status` prints (a short summary; the full document behind
// --json; every node's real health from the transport), the admin verbs
// finding the admin API and its token through --manifest, a placement
// error that names the unknown node, and node logs that say what is true,
// once: no UCX CUDA line on a cluster without devices, one "listening"
// line per node, peers that leave at the end "left" (not "down" with a
// connection error), and each node's own LMDB path in its start line.
// Real processes over the UCX transport on loopback; polls with deadlines.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

// Generous: a loaded 2-core machine must finish, never hang the suite.
constexpr double deadline_s = 300;

// A three-node manifest (count objective) with the admin API on node n0;
// each node keeps its shard under its own ssd_path d/ssd-nX.
fs::path write_manifest(const fs::path& d, uint16_t admin_port, uint64_t rows, uint32_t epochs) {
  const fs::path file = d / "ops.yaml";
  std::ofstream m(file);
  m << "name: ops\nmode: async\npartitions: 256\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "ops.secret").string()
    << "\n  create_if_missing: true\nnodes:\n";
  for (int i = 0; i < 3; ++i)
    m << "  - name: n" << i << "\n    host: 127.0.0.1\n    transport_port: " << testing::free_port()
      << "\n    ssd_path: " << (d / ("ssd-n" + std::to_string(i))).string() << "\n";
  m << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 3\n  dram_bytes: 256KiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n"
    << "caches:\n  count: 3\n  sets: 16\n"
    << "workers:\n  count: 3\n  batch_size: 64\n  epochs: " << epochs << "\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: " << rows << "\n    distinct_keys: 5000\n    seed: 3\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 10\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 10000\n"
    << "  join_timeout_seconds: 120\n";
  if (admin_port != 0)
    m << "admin:\n  port: " << admin_port << "\n  token_file: " << (d / "ops.token").string()
      << "\n  create_if_missing: true\n";
  return file;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool matches(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

// What a clean end of a three-node run logs (both tests end cleanly).
void expect_true_logs_once(const fs::path& d, const std::string& out, const std::string& err) {
  // (a) no devices, cache backend cpu: nothing about CUDA.
  EXPECT_EQ(err.find("CUDA memory"), std::string::npos) << err;
  // (b) one "listening" line per node, over stdout and stderr together.
  const std::string all = out + err;
  for (const char* node : {"n0", "n1", "n2"})
    EXPECT_EQ(occurrences(all, std::string("transport: node ") + node + " listening on"), 1u)
        << all;
  EXPECT_EQ(occurrences(all, "listening on"), 3u) << all;
  // (c) peers leaving at the end are not failures. (Nodes stop at
  // about the same time: a peer's goodbye may come before or after a
  // node's own.)
  EXPECT_EQ(err.find("' down"), std::string::npos) << err;
  EXPECT_EQ(err.find("connection error"), std::string::npos) << err;
  // Each node says once, for each peer, that the peer left or that it
  // said goodbye to it itself (whichever came first).
  for (int x = 0; x < 3; ++x)
    for (int y = 0; y < 3; ++y) {
      if (x == y) continue;
      const std::string me = "n" + std::to_string(x), peer = "n" + std::to_string(y);
      size_t said = 0;
      std::istringstream lines(err);
      for (std::string line; std::getline(lines, line);)
        if (line.find("[" + me + "]: node '" + peer + "' left") != std::string::npos ||
            (line.find("[" + me + "]: stopping: goodbye to node") != std::string::npos &&
             line.find("'" + peer + "'") != std::string::npos))
          ++said;
      EXPECT_EQ(said, 1u) << me << " about " << peer << ":\n" << err;
    }
  // (d) each node names the LMDB path its shards really use.
  for (int i = 0; i < 3; ++i) {
    const std::string ssd = (d / ("ssd-n" + std::to_string(i))).string();
    EXPECT_NE(out.find("LMDB under " + ssd + ")"), std::string::npos) << "node n" << i << ": " << out;
  }
  EXPECT_EQ(out.find("LMDB under " + (d / "state").string()), std::string::npos) << out;
}

TEST(ClusterOps, ACleanEndLogsWhatIsTrueOnce) {
  temp_dir dir;
  const fs::path d = dir.path();
  const auto manifest = write_manifest(d, 0, 6000, 1);
  strata_process p({"launch", manifest.string()}, d / "out.txt", d / "err.txt");
  auto st = p.wait(deadline_s);
  ASSERT_TRUE(st) << "launch did not finish\n" << p.out() << p.err();
  ASSERT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << p.out() << p.err();
  expect_true_logs_once(d, p.out(), p.err());
}

TEST(ClusterOps, StatusSummaryHealthAndAdminVerbsByManifest) {
  temp_dir dir;
  const fs::path d = dir.path();
  const uint16_t port = testing::free_port();
  const std::string admin = "127.0.0.1:" + std::to_string(port);
  const auto manifest = write_manifest(d, port, 20000, 1000);  // stopped long before its end
  strata_process cluster({"launch", manifest.string()}, d / "out.txt", d / "err.txt");

  int calls = 0;
  // Runs a CLI verb; returns (exit code, stdout, stderr).
  auto cli = [&](std::vector<std::string> args) {
    const auto n = std::to_string(calls++);
    strata_process p(args, d / ("cli" + n + ".out"), d / ("cli" + n + ".err"));
    auto st = p.wait(120);
    const int rc = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
    return std::make_tuple(rc, p.out(), p.err());
  };
  const std::string m = manifest.string();

  // Every node trains; the summary names each node's health.
  std::string summary;
  ASSERT_TRUE(poll_until(
      [&] {
        if (!cluster.running()) return true;  // failed to start: said below
        auto [rc, out, err] = cli({"status", "--manifest", m});
        summary = out + err;
        return rc == 0 && matches(out, "training") && matches(out, "examples/s") &&
               matches(out, "\\bn2 +127\\.0\\.0\\.1 +ok");
      },
      deadline_s))
      << "no training status through " << m << ": " << summary << "\n"
      << cluster.out() << cluster.err();
  ASSERT_TRUE(cluster.running()) << "the cluster ended\n" << cluster.out() << cluster.err();
  // Short: nodes, shards with partition counts, training; no partition ids.
  EXPECT_LT(occurrences(summary, "\n"), 25u) << summary;
  EXPECT_EQ(summary.find('['), std::string::npos) << summary;
  EXPECT_EQ(summary.find('{'), std::string::npos) << summary;
  EXPECT_TRUE(matches(summary, "cluster ops: training")) << summary;
  for (const char* node : {"n0", "n1", "n2"})
    EXPECT_TRUE(matches(summary, std::string("\\b") + node + " +127\\.0\\.0\\.1 +ok")) << summary;
  EXPECT_EQ(summary.find("unknown"), std::string::npos) << summary;
  // Shard i lives on node ni, with its partitions counted (256 over 3).
  EXPECT_TRUE(matches(summary, "shard 0 +n0 +86 partitions")) << summary;
  EXPECT_TRUE(matches(summary, "shard 1 +n1 +85 partitions")) << summary;
  EXPECT_TRUE(matches(summary, "shard 2 +n2 +85 partitions")) << summary;
  EXPECT_TRUE(matches(summary, "training: [0-9]+ of [0-9]+ examples \\([0-9]+%\\), epoch [0-9]+ of "
                               "1000, [0-9]+ examples/s"))
      << summary;
  EXPECT_TRUE(matches(summary, "checkpoints: none yet")) << summary;

  // The full document, as before, with the transport's health per node.
  auto [rcj, doc, errj] = cli({"status", "--manifest", m, "--json"});
  ASSERT_EQ(rcj, 0) << errj;
  const auto status = nlohmann::json::parse(doc);
  ASSERT_EQ(status["nodes"].size(), 3u) << doc;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(status["nodes"][i]["health"], "ok") << doc;
    EXPECT_EQ(status["shards"][i]["node"], "n" + std::to_string(i)) << doc;
    EXPECT_TRUE(status["shards"][i]["partitions"].is_array()) << doc;
  }

  // The other verbs read the manifest too; explicit options still work and win.
  auto [rcc, ck, errc] = cli({"checkpoint", "create", "--manifest", m});
  EXPECT_EQ(rcc, 0) << errc;
  EXPECT_NE(ck.find("ckpt-"), std::string::npos) << ck;
  auto [rcs, after, errs] = cli({"status", "--admin", admin, "--token-file",
                                 (d / "ops.token").string()});
  EXPECT_EQ(rcs, 0) << errs;
  EXPECT_TRUE(matches(after, "checkpoints: 1, last epoch 1, [0-9]+ s ago: .*ckpt-")) << after;
  auto [rcw, outw, errw] = cli({"status", "--manifest", m, "--admin", "127.0.0.1:1"});
  EXPECT_EQ(rcw, 1);
  EXPECT_NE(errw.find("admin API at 127.0.0.1:1"), std::string::npos) << errw;

  // A placement naming an unknown node names it (not the first other node).
  auto [rcp, outp, errp] =
      cli({"scale", "--manifest", m, "--shards", "3", "--placement", "n0", "n1", "n9"});
  EXPECT_EQ(rcp, 1) << outp;
  EXPECT_NE(errp.find("strata scale: HTTP 400: placement: unknown node \"n9\" (nodes: n0, n1, n2)"),
            std::string::npos)
      << errp;
  EXPECT_EQ(errp.find("\"n1\""), std::string::npos) << errp;

  auto [rcx, stopped, errx] = cli({"stop", "--manifest", m});
  EXPECT_EQ(rcx, 0) << errx;
  auto st = cluster.wait(deadline_s);
  ASSERT_TRUE(st) << "the cluster did not stop\n" << cluster.out() << cluster.err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << cluster.out() << cluster.err();
  expect_true_logs_once(d, cluster.out(), cluster.err());
}

}  // namespace
}  // namespace strata
