// Shards spawned at run time are exported on /metrics by the node that
// hosts them, and retired ones leave it (issue 19 follow-up): three real
// `strata node` processes (strata launch) over UCX on loopback, each serving
// /metrics; `strata scale --shards 5 --placement n0 n1 n2 n1 n0` spawns
// shard 3 on n1 (a member node's spawner) and shard 4 on n0 (the
// coordinator's own node); a scrape of each node shows the new shard's
// series (label shard="3" / shard="4") there and nowhere else; a scale back
// to 3 retires them and their series are gone. The same in one process
// (strata launch of a single-node manifest): 2 -> 4 -> 2. A cache tier a
// drain relocates to the coordinator's node is exported there.
// Polls with deadlines; no fixed sleeps.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/deploy/process_util.hpp"
#include "tests/monitoring/test_support.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

// Generous: a loaded 2-core machine must finish, never hang the suite.
// Below the test's ctest TIMEOUT (600 s), so a step that waits too long
// fails with the cluster's output instead of being killed silently (a
// fresh clone's make test on a machine overloaded by other builds and
// process tests once hit ctest's limit, with nothing to say where).
constexpr double deadline_s = 240;

// `nodes` nodes (count objective) with /metrics each, admin API on the first;
// one long epoch (the test stops the run).
fs::path write_manifest(const fs::path& d, uint16_t admin_port,
                        const std::vector<uint16_t>& metrics_ports) {
  const fs::path file = d / "scale.yaml";
  std::ofstream m(file);
  m << "name: mscale\nmode: async\npartitions: 64\nthreads: 2\n";
  if (metrics_ports.size() > 1) {
    m << "cluster_secret:\n  file: " << (d / "scale.secret").string()
      << "\n  create_if_missing: true\nnodes:\n";
    for (size_t i = 0; i < metrics_ports.size(); ++i)
      m << "  - name: n" << i
        << "\n    host: 127.0.0.1\n    transport_port: " << testing::free_port()
        << "\n    metrics_port: " << metrics_ports[i]
        << "\n    ssd_path: " << (d / ("ssd-n" + std::to_string(i))).string() << "\n";
    m << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 10000\n"
      << "  join_timeout_seconds: 120\n";
  }
  m << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: " << (metrics_ports.size() > 1 ? 3 : 2)
    << "\n  dram_bytes: 64KiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
    << "caches:\n  count: 2\n  sets: 16\n"
    << "workers:\n  count: 2\n  batch_size: 64\n  epochs: 1\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: 300000\n    distinct_keys: 50000\n    seed: 5\n"
    << "metrics:\n  port: " << metrics_ports.front() << "\n  node: n0\n  linger_seconds: 0\n"
    << "admin:\n  port: " << admin_port << "\n  token_file: " << (d / "scale.token").string()
    << "\n  create_if_missing: true\n";
  return file;
}

// Whether node `port`'s scrape has a series labelled <kind>="<index>".
bool exports_tier(uint16_t port, const std::string& kind, uint32_t index) {
  auto body = monitoring::testing::http_get(port, "/metrics");
  return body && body->find(kind + "=\"" + std::to_string(index) + "\"") != std::string::npos;
}

bool exports_shard(uint16_t port, uint32_t index) { return exports_tier(port, "shard", index); }

struct run {
  fs::path dir;
  std::string manifest;
  int calls = 0;
  // Runs a CLI verb; (exit code, stdout, stderr).
  std::tuple<int, std::string, std::string> cli(std::vector<std::string> args) {
    const auto n = std::to_string(calls++);
    strata_process p(args, dir / ("cli" + n + ".out"), dir / ("cli" + n + ".err"));
    auto st = p.wait(deadline_s);
    const int rc = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
    return {rc, p.out(), p.err()};
  }
  nlohmann::json status() {
    auto [rc, out, err] = cli({"status", "--manifest", manifest, "--json"});
    return rc == 0 ? nlohmann::json::parse(out) : nlohmann::json{};
  }
};

// Scales to `up` (placement `where`, empty: none) and back to `down` while
// training; `hosts[i]` is the metrics port of the node that must export
// shard `down + i`.
// Waits until the cluster trains.
void wait_for_training(run& r, strata_process& cluster) {
  ASSERT_TRUE(poll_until(
      [&] {
        if (!cluster.running()) return true;
        auto st = r.status();
        return !st.is_null() && st["state"] == "training" &&
               st["training"]["examples"].get<uint64_t>() > 0;
      },
      deadline_s))
      << cluster.out() << cluster.err();
  ASSERT_TRUE(cluster.running()) << "the cluster ended\n" << cluster.out() << cluster.err();
}

void scrape_around_scale(size_t nodes, uint32_t up, std::vector<std::string> where,
                         std::vector<size_t> hosts) {
  temp_dir dir;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < nodes; ++i) ports.push_back(testing::free_port());
  run r{dir.path(), write_manifest(dir.path(), testing::free_port(), ports).string()};
  const uint32_t down = nodes > 1 ? 3 : 2;
  strata_process cluster({"launch", r.manifest}, r.dir / "out.txt", r.dir / "err.txt");
  ASSERT_NO_FATAL_FAILURE(wait_for_training(r, cluster));
  // Before: the first shards only.
  for (auto port : ports) ASSERT_TRUE(monitoring::testing::http_get(port, "/metrics"));
  for (uint32_t s = down; s < up; ++s)
    for (auto port : ports) EXPECT_FALSE(exports_shard(port, s)) << "shard " << s;

  std::vector<std::string> args = {"scale", "--manifest", r.manifest, "--shards",
                                   std::to_string(up)};
  if (!where.empty()) {
    args.push_back("--placement");
    args.insert(args.end(), where.begin(), where.end());
  }
  auto [rcu, outu, erru] = r.cli(args);
  ASSERT_EQ(rcu, 0) << outu << erru << cluster.err();
  // The new shards' series on the node that hosts each (polled: a scrape
  // serves a shard once it has answered within metrics' stats timeout, which
  // a loaded machine may miss once), and only there.
  for (uint32_t s = down; s < up; ++s) {
    const size_t host = hosts[s - down];
    EXPECT_TRUE(poll_until([&] { return exports_shard(ports[host], s); }, 60))
        << "shard " << s << " is not on node n" << host << "'s /metrics";
    for (size_t n = 0; n < nodes; ++n) {
      if (n != host) {
        EXPECT_FALSE(exports_shard(ports[n], s)) << "shard " << s << " on node n" << n;
      }
    }
  }

  auto [rcd, outd, errd] =
      r.cli({"scale", "--manifest", r.manifest, "--shards", std::to_string(down)});
  ASSERT_EQ(rcd, 0) << outd << errd << cluster.err();
  // Retired: their series leave (a retire finishes once the shard exited).
  for (uint32_t s = down; s < up; ++s)
    EXPECT_TRUE(poll_until([&] { return !exports_shard(ports[hosts[s - down]], s); }, 60))
        << "retired shard " << s << " is still on node n" << hosts[s - down] << "'s /metrics";
  // The first shards are still scraped (polled, as above: one scrape may
  // miss a shard that answered late).
  for (uint32_t s = 0; s < down; ++s) {
    EXPECT_TRUE(poll_until(
        [&] {
          for (auto port : ports)
            if (exports_shard(port, s)) return true;
          return false;
        },
        60))
        << "shard " << s;
  }

  auto [rcx, outx, errx] = r.cli({"stop", "--manifest", r.manifest});
  EXPECT_EQ(rcx, 0) << errx;
  auto st = cluster.wait(deadline_s);
  ASSERT_TRUE(st) << "the cluster did not stop\n" << cluster.out() << cluster.err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << cluster.out() << cluster.err();
}

TEST(ScaleMetrics, ThreeNodesExportTheShardsSpawnedOnThemAndDropRetiredOnes) {
  // Shard 3 on n1 (a member's spawner), shard 4 on n0 (the coordinator's node).
  scrape_around_scale(3, 5, {"n0", "n1", "n2", "n1", "n0"}, {1, 0});
}

TEST(ScaleMetrics, OneProcessExportsTheShardsAScaleSpawnsAndDropsRetiredOnes) {
  scrape_around_scale(1, 4, {}, {0, 0});
}

// Draining n1 relocates its cache tier 1 to n0 (the coordinator's node):
// n0's /metrics exports it from then on (label cache="1"), n1 having left.
TEST(ScaleMetrics, ACacheTierADrainRelocatesIsExportedByItsNewNode) {
  temp_dir dir;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < 3; ++i) ports.push_back(testing::free_port());
  run r{dir.path(), write_manifest(dir.path(), testing::free_port(), ports).string()};
  strata_process cluster({"launch", r.manifest}, r.dir / "out.txt", r.dir / "err.txt");
  ASSERT_NO_FATAL_FAILURE(wait_for_training(r, cluster));
  EXPECT_TRUE(poll_until([&] { return exports_tier(ports[1], "cache", 1); }, 60))
      << "cache tier 1 is not on n1's /metrics";
  EXPECT_FALSE(exports_tier(ports[0], "cache", 1)) << "cache tier 1 on n0 before the drain";

  auto [rcd, outd, errd] = r.cli({"drain", "--manifest", r.manifest, "--node", "n1"});
  ASSERT_EQ(rcd, 0) << outd << errd << cluster.out() << cluster.err();
  EXPECT_TRUE(poll_until([&] { return exports_tier(ports[0], "cache", 1); }, 60))
      << "the relocated cache tier 1 is not on n0's /metrics";

  auto [rcx, outx, errx] = r.cli({"stop", "--manifest", r.manifest});
  EXPECT_EQ(rcx, 0) << errx;
  auto st = cluster.wait(deadline_s);
  ASSERT_TRUE(st) << "the cluster did not stop\n" << cluster.out() << cluster.err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << cluster.out() << cluster.err();
}

}  // namespace
}  // namespace strata
