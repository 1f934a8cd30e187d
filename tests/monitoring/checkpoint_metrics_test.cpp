// Checkpoint metrics (issue 22): a real run with checkpoints, scraped over
// HTTP while it lingers, exports strata_checkpoint_* that match the
// checkpoints on disk. And the catalogue: a node that does not run the
// coordinator exports no training or checkpoint series (it knows none).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <thread>

#include "actors/checkpoint.hpp"
#include "monitoring/catalogue.hpp"
#include "tests/monitoring/test_support.hpp"

namespace strata::monitoring::testing {
namespace {

using namespace std::chrono_literals;

TEST(CheckpointMetrics, AScrapeAfterACheckpointShowsItsTimeDurationAndBytes) {
  temp_dir dir("strata-ckpt-metrics");
  const uint16_t port = free_port();
  const auto manifest = dir.path() / "manifest.yaml";
  const auto ckpt = dir.path() / "ckpt";
  {
    std::ofstream m(manifest);
    m << small_manifest(dir.path(), port, "ck", 20000, 30, 0.1);
    m << "checkpoint:\n  dir: " << ckpt.string() << "\n  interval_batches: 20\n  keep: 10\n";
  }
  const double started = static_cast<double>(std::time(nullptr));
  child_process strata(STRATA_BINARY, {"launch", manifest.string()}, {},
                       {dir.path() / "launch.log", dir.path() / "launch.err"});
  // The final values: served while the node lingers after its report.
  std::optional<std::string> body;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (strata.running() && std::chrono::steady_clock::now() < deadline) {
    body = http_get(port, "/metrics");
    if (body && body->find("strata_training_active{node=\"ck\"} 0") != std::string::npos &&
        strata.output().find("== report") != std::string::npos)
      break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(body) << strata.output() << strata.err();
  const auto series = parse_exposition(*body);
  const auto all = actors::complete_checkpoints(ckpt);
  ASSERT_FALSE(all.empty()) << strata.output();
  const auto at = [&](const std::string& name) {
    auto it = series.find(name + "{node=\"ck\"}");
    EXPECT_NE(it, series.end()) << name << " missing:\n" << *body;
    return it == series.end() ? -1.0 : it->second;
  };
  // keep: 10 keeps every one of this run's.
  EXPECT_EQ(at("strata_checkpoint_completed_total"), static_cast<double>(all.size()));
  EXPECT_EQ(at("strata_checkpoint_failures_total"), 0);
  const double last = at("strata_checkpoint_last_success_timestamp_seconds");
  EXPECT_GE(last, started - 1);
  EXPECT_LE(last, static_cast<double>(std::time(nullptr)) + 1);
  EXPECT_GT(at("strata_checkpoint_last_duration_seconds"), 0);
  // The last checkpoint's files, as on disk.
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(all.back()))
    if (e.is_regular_file()) bytes += e.file_size();
  EXPECT_EQ(at("strata_checkpoint_last_bytes"), static_cast<double>(bytes));
  EXPECT_GE(at("strata_checkpoint_written_bytes_total"), static_cast<double>(bytes));
}

bool has_family(const std::vector<prometheus::MetricFamily>& families, const std::string& name) {
  for (const auto& f : families)
    if (f.name == name) return true;
  return false;
}

TEST(CheckpointMetrics, ANodeWithoutTheCoordinatorExportsNoTrainingOrCheckpointSeries) {
  node_snapshot s;
  s.node = "n1";
  s.training.active = true;
  s.trains = false;
  const auto member = to_families(s);
  for (const char* name :
       {"strata_training_examples_total", "strata_training_active", "strata_training_loss",
        "strata_checkpoint_completed_total", "strata_checkpoint_failures_total"})
    EXPECT_FALSE(has_family(member, name)) << name;
  EXPECT_TRUE(has_family(member, "strata_build_info"));
  s.trains = true;
  const auto coordinator = to_families(s);
  EXPECT_TRUE(has_family(coordinator, "strata_training_active"));
  EXPECT_TRUE(has_family(coordinator, "strata_checkpoint_completed_total"));
  // The last_* gauges only once a checkpoint is complete.
  EXPECT_FALSE(has_family(coordinator, "strata_checkpoint_last_success_timestamp_seconds"));
  s.checkpoints.last_unix_seconds = 1.7e9;
  EXPECT_TRUE(has_family(to_families(s), "strata_checkpoint_last_success_timestamp_seconds"));
}

}  // namespace
}  // namespace strata::monitoring::testing
