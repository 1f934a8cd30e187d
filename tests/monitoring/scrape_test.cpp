// A real training run (`strata launch` on a small generated data set) is
// scraped over HTTP while it trains and while it lingers: `promtool check
// metrics` accepts every checked scrape with no error and no lint warning,
// no series appears twice, counters never decrease from one scrape to the
// next, and histogram buckets are cumulative.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tests/monitoring/test_support.hpp"

namespace strata::monitoring::testing {
namespace {

using namespace std::chrono_literals;

// name -> TYPE from the "# TYPE" lines.
std::map<std::string, std::string> types_of(const std::string& text) {
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string name, type;
    words >> name >> type;
    types[name] = type;
  }
  return types;
}

std::string name_of(const std::string& series) { return series.substr(0, series.find('{')); }

// Whether a series only ever grows: counters, and histograms' buckets,
// counts and sums (every observation is non-negative).
bool grows(const std::string& name, const std::map<std::string, std::string>& types) {
  if (auto it = types.find(name); it != types.end()) return it->second == "counter";
  for (const char* suffix : {"_bucket", "_count", "_sum"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      auto it = types.find(name.substr(0, name.size() - s.size()));
      if (it != types.end()) return it->second == "histogram" || it->second == "summary";
    }
  }
  return false;
}

void expect_promtool_clean(const std::string& text, const std::filesystem::path& file) {
  {
    std::ofstream out(file);
    out << text;
  }
  const auto [status, output] = run_command("promtool check metrics < " + file.string());
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool lint: " << output;
}

// Every le bucket of a histogram series is >= the one before, and +Inf
// equals _count.
void expect_cumulative(const std::map<std::string, double>& series,
                       const std::map<std::string, std::string>& types) {
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // series -> (le, n)
  for (const auto& [s, v] : series) {
    const auto name = name_of(s);
    if (name.size() < 7 || name.compare(name.size() - 7, 7, "_bucket") != 0) continue;
    if (types.count(name.substr(0, name.size() - 7)) == 0) continue;
    const auto le_at = s.find(",le=\"");  // the serializer puts le last
    ASSERT_NE(le_at, std::string::npos) << s;
    const auto le_end = s.find('"', le_at + 5);
    const std::string le = s.substr(le_at + 5, le_end - le_at - 5);
    std::string rest = s.substr(0, le_at) + s.substr(le_end + 1);  // the series without le
    buckets[rest].emplace_back(le == "+Inf" ? 1.0 / 0.0 : std::stod(le), v);
  }
  EXPECT_FALSE(buckets.empty());
  for (auto& [s, list] : buckets) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i)
      EXPECT_LE(list[i - 1].second, list[i].second) << s << " le=" << list[i].first;
    // The last bucket is +Inf, and it counts every observation: _count.
    ASSERT_TRUE(std::isinf(list.back().first)) << s << " has no le=\"+Inf\" bucket";
    std::string count = s;
    const auto at = count.find("_bucket{");
    ASSERT_NE(at, std::string::npos) << s;
    count.replace(at, 8, "_count{");
    const auto it = series.find(count);
    ASSERT_NE(it, series.end()) << "no " << count << " beside " << s;
    EXPECT_EQ(list.back().second, it->second) << s << ": le=\"+Inf\" differs from " << count;
  }
}

TEST(Scrape, PromtoolAcceptsLiveAndFinalScrapesAndCountersNeverDecrease) {
  if (!on_path("promtool"))
    GTEST_SKIP() << "promtool is not installed (Debian package prometheus: make deps)";
  temp_dir dir("strata-scrape");
  const uint16_t port = free_port();
  const auto manifest = dir.path() / "manifest.yaml";
  std::ofstream(manifest) << small_manifest(dir.path(), port, "scrape-node", 60000, 30, 0.1);
  child_process strata(STRATA_BINARY, {"launch", manifest.string()}, {},
                       {dir.path() / "launch.log", {}});

  std::map<std::string, double> previous;
  size_t scrapes = 0, live_scrapes = 0, final_scrapes = 0;
  bool checked_live = false;
  bool saw_worker_mailbox = false;  // every actor kind reports its mailbox
  std::string last_text;
  const auto deadline = std::chrono::steady_clock::now() + 70s;
  while (std::chrono::steady_clock::now() < deadline && final_scrapes < 3) {
    const bool lingering = strata.output().find("serving the final values") != std::string::npos;
    ASSERT_TRUE(strata.running()) << strata.output();
    auto body = http_get(port, "/metrics");
    if (!body) {
      std::this_thread::sleep_for(100ms);
      continue;
    }
    ++scrapes;
    std::vector<std::string> duplicates;
    const auto series = parse_exposition(*body, &duplicates);
    EXPECT_TRUE(duplicates.empty()) << "series twice: " << duplicates.front();
    const auto types = types_of(*body);
    for (const auto& [s, before] : previous) {
      if (!grows(name_of(s), types)) continue;
      auto it = series.find(s);
      ASSERT_NE(it, series.end()) << "series vanished: " << s;
      EXPECT_GE(it->second, before) << "counter decreased: " << s;
    }
    const double active = series.at("strata_training_active{node=\"scrape-node\"}");
    if (active == 1 && series.count("strata_tier_lookups_total{cache=\"0\",node=\"scrape-node\","
                                    "table=\"ctr\",tier=\"cache\"}")) {
      ++live_scrapes;
      for (const auto& [key, value] : series)
        if (key.rfind("strata_actor_mailbox_depth_messages{", 0) == 0 &&
            key.find("actor=\"worker\"") != std::string::npos)
          saw_worker_mailbox = true;
      if (!checked_live) {
        expect_promtool_clean(*body, dir.path() / "live.prom");
        checked_live = true;
      }
    }
    if (lingering) ++final_scrapes;
    previous = series;
    last_text = *body;
    std::this_thread::sleep_for(lingering ? 300ms : 100ms);
  }
  ASSERT_EQ(final_scrapes, 3u) << "the run did not reach its linger period in time:\n"
                               << strata.output();
  EXPECT_GT(live_scrapes, 0u) << "no scrape while training (" << scrapes << " scrapes)";
  EXPECT_TRUE(saw_worker_mailbox) << "no worker mailbox depth while training";
  std::printf("%zu scrapes, %zu while training\n", scrapes, live_scrapes);
  expect_promtool_clean(last_text, dir.path() / "final.prom");
  const auto final_series = parse_exposition(last_text);
  expect_cumulative(final_series, types_of(last_text));
  EXPECT_GT(final_series.at("strata_training_examples_total{node=\"scrape-node\"}"), 0);
  EXPECT_EQ(final_series.at("strata_training_active{node=\"scrape-node\"}"), 0);
  EXPECT_EQ(final_series.count("strata_training_heldout_auc{node=\"scrape-node\"}"), 1u);
}

// Issue 15 item 9: a node scraped while it trains exits once training
// ends, with its report on stdout (a file here, so a report still buffered
// at exit would be lost). The scrape threads (the HTTP server's) used to
// keep CAF's logger alive through a scoped_actor's thread-local reference,
// and the actor system's destructor waited for it forever.
TEST(Scrape, AScrapedNodeExitsWithItsReport) {
  temp_dir dir("strata-scrape-exit");
  const uint16_t port = free_port();
  const auto manifest = dir.path() / "manifest.yaml";
  std::ofstream(manifest) << small_manifest(dir.path(), port, "scraped", 60000, 0, 0.1);
  child_process strata(STRATA_BINARY, {"launch", manifest.string()}, {},
                       {dir.path() / "launch.log", dir.path() / "launch.err"});
  size_t live_scrapes = 0;
  // Scrape as fast as the node answers until it exits (generous bound: a
  // hang shows as the deadline).
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (strata.running() && std::chrono::steady_clock::now() < deadline) {
    if (auto body = http_get(port, "/metrics");
        body && body->find("strata_training_active{node=\"scraped\"} 1") != std::string::npos)
      ++live_scrapes;
  }
  auto status = strata.wait_exit(1s);
  ASSERT_TRUE(status) << "the scraped node did not exit within 90 s of its start (" << live_scrapes
                      << " scrapes while training):\n"
                      << strata.output() << strata.err();
  EXPECT_EQ(*status, 0) << strata.output() << strata.err();
  EXPECT_GT(live_scrapes, 0u) << "no scrape while training:\n" << strata.output();
  EXPECT_NE(strata.output().find("== report: cluster monitoring-test"), std::string::npos)
      << strata.output();
}

}  // namespace
}  // namespace strata::monitoring::testing
