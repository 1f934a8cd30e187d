// Issue 19, long: scaling across nodes does not change what the model
// learns. Two runs of three real `strata node` processes (UCX loopback)
// train the CTR objective on the same generated data (fixed seeds), one
// epoch: one without scaling, one scaled 3 -> 5 mid-training with shards 3
// and 4 placed on n1 and n2. Their held-out AUCs (the launch report) agree
// within 0.01. Labelled long: it runs in `make test-long`, not `make test`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

constexpr double deadline_s = 900;  // generous: a loaded 2-core machine

// The same cluster for both runs except the directories and ports.
fs::path write_manifest(const fs::path& d, const fs::path& data) {
  const fs::path file = d / "auc.yaml";
  std::ofstream m(file);
  m << "name: scaleauc\nmode: async\npartitions: 64\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "auc.secret").string()
    << "\n  create_if_missing: true\nnodes:\n";
  for (int i = 0; i < 3; ++i)
    m << "  - name: n" << i << "\n    host: 127.0.0.1\n    transport_port: " << testing::free_port()
      << "\n    ssd_path: " << (d / ("ssd-n" + std::to_string(i))).string() << "\n";
  m << "table:\n  name: ctr\n  seed: 7\n"
    << "  optimizer: {kind: adagrad, learning_rate: 0.1, initial_accumulator: 0.1}\n"
    << "  initializer: {kind: normal, stddev: 0.01}\n"
    << "model:\n  embedding_dim: 8\n  hidden: [16]\n  seed: 1\n"
    << "shards:\n  count: 3\n  dram_bytes: 256KiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
    << "caches:\n  count: 3\n  sets: 64\n  staleness: 4\n"
    << "workers:\n  count: 3\n  batch_size: 128\n  epochs: 1\n"
    << "data:\n  path: " << data.string() << "\n  heldout_fraction: 0.2\n"
    << "  generate:\n    rows: 200000\n    distinct_keys: 20000\n    seed: 11\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 2\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 30000\n"
    << "  join_timeout_seconds: 300\n"
    << "admin:\n  port: " << testing::free_port() << "\n  token_file: "
    << (d / "auc.token").string() << "\n  create_if_missing: true\n";
  return file;
}

double heldout_auc(const std::string& out) {
  const auto at = out.find("held-out AUC: ");
  if (at == std::string::npos) return -1;
  return std::atof(out.c_str() + at + 14);
}

// One run; scales 3 -> 5 once a fifth of the examples are trained if asked.
double run(const fs::path& d, const fs::path& data, bool scale) {
  fs::create_directories(d);
  const std::string m = write_manifest(d, data).string();
  strata_process cluster({"launch", m}, d / "out.txt", d / "err.txt");
  if (scale) {
    int calls = 0;
    auto cli = [&](std::vector<std::string> args) {
      const auto n = std::to_string(calls++);
      strata_process p(args, d / ("cli" + n + ".out"), d / ("cli" + n + ".err"));
      auto st = p.wait(deadline_s);
      const int rc = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
      return std::make_pair(rc, p.out() + p.err());
    };
    const bool training = poll_until(
        [&] {
          if (!cluster.running()) return true;
          auto [rc, out] = cli({"status", "--manifest", m, "--json"});
          if (rc != 0) return false;
          auto st = nlohmann::json::parse(out, nullptr, false);
          return !st.is_discarded() && st["state"] == "training" &&
                 st["training"]["examples"].get<uint64_t>() > 30000;
        },
        deadline_s);
    EXPECT_TRUE(training && cluster.running()) << "no training to scale\n" << cluster.out();
    auto [rc, out] =
        cli({"scale", "--manifest", m, "--shards", "5", "--placement", "n0", "n1", "n2", "n1",
             "n2"});
    EXPECT_EQ(rc, 0) << out << cluster.err();
  }
  auto st = cluster.wait(deadline_s);
  EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << cluster.out() << cluster.err();
  return heldout_auc(cluster.out());
}

TEST(ScaleAuc, ThreeNodesScaledMidTrainingMatchTheHeldOutAucOfNoScaling) {
  temp_dir dir;
  // Each run generates its data from the same seed: the same examples.
  const double plain = run(dir.path() / "plain", dir.path() / "plain" / "data.tsv", false);
  const double scaled = run(dir.path() / "scaled", dir.path() / "scaled" / "data.tsv", true);
  ASSERT_GT(plain, 0.5) << "no held-out AUC from the run without scaling";
  ASSERT_GT(scaled, 0.5) << "no held-out AUC from the scaled run";
  std::printf("held-out AUC: %.4f without scaling, %.4f scaled 3 -> 5\n", plain, scaled);
  EXPECT_NEAR(scaled, plain, 0.01);
}

}  // namespace
}  // namespace strata
