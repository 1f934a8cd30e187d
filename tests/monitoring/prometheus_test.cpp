// Integration with a stock Prometheus server (Debian's package): the test
// starts `prometheus` on loopback with a scrape configuration for the free
// ports it picked (scrape interval 1 s), runs a small real training with
// `strata launch`, and once the run has printed its report and lingers,
// queries Prometheus' HTTP API: the node is `up`, and the counters
// Prometheus holds equal the run's own final report exactly.
//
// Targets first appear 10-14 s after Prometheus starts, so it is started
// first; the run lingers long enough for scrapes after training, and the
// test stops both processes as soon as it has checked.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/monitoring/test_support.hpp"

namespace strata::monitoring::testing {
namespace {

using namespace std::chrono_literals;

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

struct sample {
  double timestamp = 0;
  double value = 0;
};

// The value of the single sample an instant query returns, or nullopt (no
// result yet). (The query's own time is when it was evaluated, not when the
// sample was scraped.)
std::optional<double> instant(uint16_t port, const std::string& promql) {
  auto body = http_get(port, "/api/v1/query?query=" + url_encode(promql));
  if (!body) return std::nullopt;
  static const std::regex value(R"re("value":\[([0-9.e+]+),"([^"]+)"\])re");
  std::smatch m;
  if (!std::regex_search(*body, m, value)) return std::nullopt;
  return std::stod(m[2]);
}

// The single sample of `promql` and the time of the scrape it came from, or
// nullopt. The scrape time (timestamp()) is asked first: the value is then
// from that scrape or a later one, never an older one.
std::optional<sample> query(uint16_t port, const std::string& promql) {
  auto scraped = instant(port, "timestamp(" + promql + ")");
  if (!scraped) return std::nullopt;
  auto value = instant(port, promql);
  if (!value) return std::nullopt;
  return sample{*scraped, *value};
}

// How many series an instant query returns (0 for an empty result), or
// nullopt when the query itself failed (no answer, not "success").
std::optional<size_t> series_count(uint16_t port, const std::string& promql) {
  auto body = http_get(port, "/api/v1/query?query=" + url_encode(promql));
  if (!body || body->find("\"status\":\"success\"") == std::string::npos) return std::nullopt;
  if (body->find("\"resultType\":\"vector\"") == std::string::npos) return std::nullopt;
  size_t n = 0;
  for (size_t at = body->find("\"metric\":"); at != std::string::npos;
       at = body->find("\"metric\":", at + 1))
    ++n;
  return n;
}

struct tier_line {
  std::string kind;
  std::string index;
  uint64_t hits, misses, evictions, flushed;
};

// The report's "examples: N in" and tier lines: "  shard 0: DRAM hits H,
// write-behind hits W, LMDB hits L, misses to the initializer I, ..." (the
// DRAM tier's misses are W + L + I) and "  cache 0: cache hits H, misses to
// the shards M, ...".
uint64_t report_examples(const std::string& out) {
  std::smatch m;
  static const std::regex examples(R"(\nexamples: ([0-9]+) in )");
  return std::regex_search(out, m, examples) ? std::stoull(m[1]) : 0;
}
std::vector<tier_line> report_tiers(const std::string& out) {
  static const std::regex shard(
      R"(\n  shard ([0-9]+): DRAM hits ([0-9]+), write-behind hits ([0-9]+), LMDB hits ([0-9]+), misses to the initializer ([0-9]+), evictions ([0-9]+), flushed rows ([0-9]+))");
  static const std::regex cache(
      R"(\n  cache ([0-9]+): cache hits ([0-9]+), misses to the shards ([0-9]+), evictions ([0-9]+), flushed rows ([0-9]+))");
  std::vector<tier_line> tiers;
  for (std::sregex_iterator it(out.begin(), out.end(), shard), end; it != end; ++it)
    tiers.push_back({"shard", (*it)[1], std::stoull((*it)[2]),
                     std::stoull((*it)[3]) + std::stoull((*it)[4]) + std::stoull((*it)[5]),
                     std::stoull((*it)[6]), std::stoull((*it)[7])});
  for (std::sregex_iterator it(out.begin(), out.end(), cache), end; it != end; ++it)
    tiers.push_back({"cache", (*it)[1], std::stoull((*it)[2]), std::stoull((*it)[3]),
                     std::stoull((*it)[4]), std::stoull((*it)[5])});
  return tiers;
}

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A stock Prometheus on loopback scraping the nodes on `ports` every second.
std::unique_ptr<child_process> start_prometheus(const std::filesystem::path& dir,
                                                const std::vector<uint16_t>& ports,
                                                uint16_t prom_port) {
  std::ofstream config(dir / "prometheus.yml");
  config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: strata\n    static_configs:\n      - targets: [";
  for (size_t i = 0; i < ports.size(); ++i)
    config << (i ? ", " : "") << "'127.0.0.1:" << ports[i] << "'";
  config << "]\n";
  config.close();
  return std::make_unique<child_process>(
      "prometheus",
      std::vector<std::string>{"--config.file=" + (dir / "prometheus.yml").string(),
                               "--storage.tsdb.path=" + (dir / "tsdb").string(),
                               "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
      std::vector<std::string>{}, child_output{dir / "prometheus.log", {}});
}

// When (unix seconds) the run printed its report and froze its final
// values; 0 if it exited or did not within `limit`.
double wait_for_final_values(child_process& strata, std::chrono::seconds limit) {
  for (auto deadline = std::chrono::steady_clock::now() + limit;
       std::chrono::steady_clock::now() < deadline;) {
    if (!strata.running()) return 0;
    if (strata.output().find("serving the final values") != std::string::npos) return now_unix();
    std::this_thread::sleep_for(100ms);
  }
  return 0;
}

TEST(PrometheusServer, ScrapesTheNodeAndHoldsTheRunsFinalReport) {
  if (!on_path("prometheus"))
    GTEST_SKIP() << "prometheus is not installed (Debian package prometheus: make deps)";
  temp_dir dir("strata-prometheus");
  const uint16_t node_port = free_port();
  const uint16_t prom_port = free_port();
  const std::string node = "prom-node";
  auto prometheus = start_prometheus(dir.path(), {node_port}, prom_port);
  // With a held-out window: the report's tier counters are read after the
  // evaluation's pulls, so they are the shards' final values.
  const auto manifest = dir.path() / "manifest.yaml";
  std::ofstream(manifest) << small_manifest(dir.path(), node_port, node, 40000, 60, 0.1);
  child_process strata(STRATA_BINARY, {"launch", manifest.string()}, {},
                       {dir.path() / "launch.log", {}});

  // Training ends: the report is printed, the final values frozen.
  const double report_seen = wait_for_final_values(strata, 60s);
  ASSERT_GT(report_seen, 0) << "training did not finish in time:\n" << strata.output();
  const std::string out = strata.output();
  const uint64_t examples = report_examples(out);
  const auto tiers = report_tiers(out);
  ASSERT_GT(examples, 0u) << out;
  ASSERT_EQ(tiers.size(), 4u) << out;

  // Wait for a scrape that started after the freeze (samples carry the
  // scrape's start time).
  const std::string sel = "{node=\"" + node + "\"}";
  std::optional<sample> s;
  for (auto deadline = std::chrono::steady_clock::now() + 40s;
       std::chrono::steady_clock::now() < deadline;) {
    ASSERT_TRUE(prometheus->running()) << prometheus->output();
    s = query(prom_port, "strata_training_examples_total" + sel);
    if (s && s->timestamp > report_seen) break;
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_TRUE(s && s->timestamp > report_seen) << "Prometheus holds no scrape after training:\n"
                                               << prometheus->output();
  EXPECT_EQ(s->value, static_cast<double>(examples));

  auto up = query(prom_port, "up{job=\"strata\"}");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->value, 1);
  auto active = query(prom_port, "strata_training_active" + sel);
  ASSERT_TRUE(active);
  EXPECT_EQ(active->value, 0);

  for (const auto& t : tiers) {
    const std::string owner = "node=\"" + node + "\"," + t.kind + "=\"" + t.index + "\"";
    const std::string tier = t.kind == "shard" ? "dram" : "cache";
    auto expect = [&](const std::string& metric, const std::string& labels, uint64_t want) {
      auto got = query(prom_port, metric + "{" + labels + "}");
      ASSERT_TRUE(got) << metric << "{" << labels << "}: no sample";
      EXPECT_EQ(got->value, static_cast<double>(want)) << metric << "{" << labels << "}";
    };
    expect("strata_tier_hits_total", owner + ",tier=\"" + tier + "\"", t.hits);
    expect("strata_tier_misses_total", owner + ",tier=\"" + tier + "\"", t.misses);
    expect("strata_tier_evictions_total", owner + ",tier=\"" + tier + "\"", t.evictions);
    expect(
        t.kind == "shard" ? "strata_shard_flush_rows_total" : "strata_cache_write_back_rows_total",
        owner, t.flushed);
  }
}

// A cluster of two node processes: Prometheus scrapes both, every node is
// `up`, each shard's and cache tier's counters are exported by the node
// that hosts it and equal the coordinator's final report, and each node
// exports its transport counters for the other.
TEST(PrometheusServer, ScrapesEveryNodeOfAMultiNodeCluster) {
  if (!on_path("prometheus"))
    GTEST_SKIP() << "prometheus is not installed (Debian package prometheus: make deps)";
  temp_dir dir("strata-prometheus-nodes");
  const std::vector<std::string> names = {"pn0", "pn1"};
  const std::vector<uint16_t> ports = {free_port(), free_port()};
  const uint16_t prom_port = free_port();
  auto prometheus = start_prometheus(dir.path(), ports, prom_port);
  const auto manifest = dir.path() / "manifest.yaml";
  std::ofstream(manifest) << small_multi_node_manifest(dir.path(), names, ports, 40000, 60, 0.1);
  child_process strata(STRATA_BINARY, {"launch", manifest.string()}, {},
                       {dir.path() / "launch.log", {}});

  const double report_seen = wait_for_final_values(strata, 90s);
  ASSERT_GT(report_seen, 0) << "training did not finish in time:\n" << strata.output();
  const std::string out = strata.output();
  const auto tiers = report_tiers(out.substr(out.find("== report: cluster")));
  ASSERT_EQ(tiers.size(), 4u) << out;

  // A scrape of each node that started after the coordinator's report.
  for (size_t i = 0; i < names.size(); ++i) {
    std::optional<sample> s;
    for (auto deadline = std::chrono::steady_clock::now() + 40s;
         std::chrono::steady_clock::now() < deadline;) {
      ASSERT_TRUE(prometheus->running()) << prometheus->output();
      s = query(prom_port, "up{instance=\"127.0.0.1:" + std::to_string(ports[i]) + "\"}");
      if (s && s->timestamp > report_seen) break;
      std::this_thread::sleep_for(250ms);
    }
    ASSERT_TRUE(s && s->timestamp > report_seen) << "no scrape of node " << names[i] << " after "
                                                 << "training:\n" << prometheus->output();
    EXPECT_EQ(s->value, 1) << "node " << names[i] << " is not up";
  }
  // Shard i and cache i live on node i % 2 (placement: spread).
  for (const auto& t : tiers) {
    const std::string& host = names[std::stoul(t.index) % names.size()];
    const std::string owner = "node=\"" + host + "\"," + t.kind + "=\"" + t.index + "\"";
    const std::string tier = t.kind == "shard" ? "dram" : "cache";
    auto got = query(prom_port, "strata_tier_hits_total{" + owner + ",tier=\"" + tier + "\"}");
    ASSERT_TRUE(got) << t.kind << " " << t.index << " is not exported by node " << host;
    EXPECT_EQ(got->value, static_cast<double>(t.hits)) << t.kind << " " << t.index;
    auto misses =
        query(prom_port, "strata_tier_misses_total{" + owner + ",tier=\"" + tier + "\"}");
    ASSERT_TRUE(misses);
    EXPECT_EQ(misses->value, static_cast<double>(t.misses)) << t.kind << " " << t.index;
    // ... and only by that node.
    const std::string other = names[(std::stoul(t.index) + 1) % names.size()];
    const auto elsewhere = series_count(prom_port, "strata_tier_hits_total{node=\"" + other +
                                                       "\"," + t.kind + "=\"" + t.index + "\"}");
    ASSERT_TRUE(elsewhere) << "the query for " << t.kind << " " << t.index << " on " << other
                           << " failed";
    EXPECT_EQ(*elsewhere, 0u) << t.kind << " " << t.index << " is exported twice";
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string peer = names[1 - i];
    const std::string labels = "{node=\"" + names[i] + "\",peer=\"" + peer + "\"}";
    auto sent = query(prom_port, "strata_transport_sent_messages_total" + labels);
    ASSERT_TRUE(sent) << "no transport counters of " << names[i] << " for " << peer;
    EXPECT_GT(sent->value, 0);
    auto received = query(prom_port, "strata_transport_received_bytes_total" + labels);
    ASSERT_TRUE(received);
    EXPECT_GT(received->value, 0);
  }
  // Training and checkpoint series only from the coordinator's node (pn0):
  // pn1 exported strata_training_examples_total 0 beside
  // strata_training_active 1.
  for (const char* metric : {"strata_training_examples_total", "strata_training_active",
                             "strata_checkpoint_completed_total"}) {
    const auto coordinator =
        series_count(prom_port, std::string(metric) + "{node=\"" + names[0] + "\"}");
    const auto member = series_count(prom_port, std::string(metric) + "{node=\"" + names[1] + "\"}");
    ASSERT_TRUE(coordinator && member) << metric;
    EXPECT_EQ(*coordinator, 1u) << metric << " of " << names[0];
    EXPECT_EQ(*member, 0u) << metric << " of " << names[1];
  }
}

}  // namespace
}  // namespace strata::monitoring::testing
