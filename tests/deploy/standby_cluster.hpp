// A running cluster of three nodes (n0 coordinates) with standby nodes
// n3, n4, ... that a test starts with `strata node` (its manifest, the CLI
// around it): shared by the standby and drain tests (tests/deploy/).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

// Generous: a loaded 2-core machine must finish, never hang the suite.
constexpr double deadline_s = 300;

// Three nodes that start (n0 coordinates) and `standby` standby nodes
// (n3, n4, ...), the count objective (exact sums), the admin API on n0;
// training runs far longer than the test (it is stopped): many epochs of
// a small file, or (`one_epoch`, for the exact-sum oracle, which reads each
// line once) one epoch of a large one.
// Where cache tiers and workers go ("[n0, n1, n0]"; empty: dealt over
// the starting nodes).
struct standby_placements {
  std::string caches, workers;
  // shards.migration_rows_per_s (0: unlimited): a slow copy leaves a window
  // to inject a failure in (drain_failure_test).
  uint64_t migration_rows_per_s = 0;
  // transport.heartbeat_timeout_ms: how long a stopped node stays "up".
  uint32_t heartbeat_timeout_ms = 10000;
};

fs::path write_manifest(const fs::path& d, uint16_t admin_port, int standby, bool one_epoch,
                        bool pass, const standby_placements& placed = {}) {
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
    << (placed.migration_rows_per_s == 0
            ? ""
            : "  migration_rows_per_s: " + std::to_string(placed.migration_rows_per_s) + "\n")
    << "caches:\n  count: 3\n  sets: 16\n"
    << (placed.caches.empty() ? "" : "  placement: " + placed.caches + "\n")
    << "workers:\n  count: 3\n  batch_size: 64\n  epochs: " << (one_epoch ? 1 : 1000) << "\n"
    << (placed.workers.empty() ? "" : "  placement: " + placed.workers + "\n")
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: " << (one_epoch ? 300000 : 20000)
    << "\n    distinct_keys: 5000\n    seed: 3\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 10\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: "
    << placed.heartbeat_timeout_ms << "\n"
    << "  join_timeout_seconds: 120\n"
    << "admin:\n  port: " << admin_port << "\n  token_file: " << (d / "standby.token").string()
    << "\n  create_if_missing: true\n";
  return file;
}

[[maybe_unused]] std::string read_text(const fs::path& f) {
  std::ifstream in(f);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A running three-node cluster with standby nodes, and the CLI around it.
class standby_cluster {
 public:
  standby_cluster(const fs::path& d, int standby, bool one_epoch = false, bool pass = false,
                  const standby_placements& placed = {})
      : d_(d),
        manifest_(write_manifest(d, testing::free_port(), standby, one_epoch, pass, placed)),
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
  // A CLI verb running in the background (a drain to interrupt); the
  // caller waits for it.
  std::unique_ptr<strata_process> start_cli(const std::vector<std::string>& args) {
    const auto n = std::to_string(calls_++);
    return std::make_unique<strata_process>(args, d_ / ("cli" + n + ".out"),
                                            d_ / ("cli" + n + ".err"));
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
  // Waits until node `name` joined: the coordinator's node says so, and
  // then the node itself (it prints its line once the coordinator's answer
  // reaches it, which on a loaded machine can be a while after the
  // coordinator's line: checking the node's output at once was a flake).
  void wait_joined(const std::string& name, strata_process& node) {
    ASSERT_TRUE(poll_until(
        [&] {
          return !node.running() || !launch_.running() ||
                 (launch_.out().find("cluster: node " + name + " joined (standby)") !=
                      std::string::npos &&
                  node.out().find("cluster: node " + name + " joined the running cluster") !=
                      std::string::npos);
        },
        deadline_s))
        << launch_.out() << launch_.err() << node.out() << node.err();
    ASSERT_TRUE(node.running()) << node.out() << node.err();
    ASSERT_TRUE(launch_.running()) << launch_.out() << launch_.err();
  }
  // Waits until training has trained more than `before` examples (status),
  // or the launch ended (the caller says whether that may be).
  void wait_for_more_training(uint64_t before) {
    ASSERT_TRUE(poll_until(
        [&] {
          auto now = status();
          return !launch_.running() ||
                 (now.is_object() && now["training"]["examples"].get<uint64_t>() > before);
        },
        deadline_s));
  }
  // `strata stop`, then every node of the launch exits 0. A one-epoch run
  // may end by itself before the stop reaches it (CI's ASan stage once
  // took 118 s for a drain test whose epoch lasts about that long): its
  // admin API is then gone, which is the only failure of the stop
  // accepted here, and the launch must still have exited 0.
  void stop_cleanly() {
    auto [rc, out, err] = cli({"stop", "--manifest", manifest_.string()});
    if (rc != 0) {
      EXPECT_NE(err.find("Connection refused"), std::string::npos) << "strata stop: " << err;
    }
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

}  // namespace
}  // namespace strata
