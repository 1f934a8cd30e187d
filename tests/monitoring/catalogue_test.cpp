// The metric catalogue on hand-made tier_stats: names follow the
// conventions, each series once, histogram buckets cumulative, shard chains
// cascade, and freezing never lowers a counter.
#include "monitoring/catalogue.hpp"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <set>

#include "common/latency_histogram.hpp"
#include "tests/monitoring/test_support.hpp"

namespace strata::monitoring {
namespace {

actors::latency_snapshot latency(const std::string& name, uint64_t scale) {
  actors::latency_snapshot s;
  s.name = name;
  s.counts.assign(latency_histogram::bounds.size() + 1, 0);
  for (size_t i = 0; i < s.counts.size(); ++i) s.counts[i] = (i % 3) * scale;
  s.sum_seconds = 0.5 * static_cast<double>(scale);
  return s;
}

actors::tier_stats shard(uint32_t index) {
  actors::tier_stats t;
  t.name = "shard " + std::to_string(index);
  t.kind = "shard";
  t.index = index;
  t.lookups = 100;
  t.hits = 60;
  t.misses = 40;
  t.chain_hits = {60, 10, 20};
  t.initialized = 10;
  t.evictions = 5;
  t.rows = 7;
  t.lmdb_rows = 30;
  t.latencies = {latency("pull", 1), latency("lmdb_read", 2), latency("flush", 3)};
  return t;
}

actors::tier_stats cache(uint32_t index) {
  actors::tier_stats t;
  t.name = "cache " + std::to_string(index);
  t.kind = "cache";
  t.index = index;
  t.lookups = 50;
  t.hits = 45;
  t.misses = 5;
  t.latencies = {latency("cache_lookup", 1)};
  return t;
}

node_snapshot sample() {
  node_snapshot s;
  s.node = "n1";
  s.table = "ctr";
  s.tiers = {shard(0), shard(1), cache(0), cache(1)};
  s.training.examples = 1000;
  s.training.heldout_auc = 0.7;
  s.build = {"0.1.0", "abc123", false};
  return s;
}

const prometheus::MetricFamily* find(const std::vector<prometheus::MetricFamily>& families,
                                     const std::string& name) {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

TEST(Catalogue, NamesFollowPrometheusConventions) {
  const auto families = to_families(sample());
  std::set<std::string> names;
  for (const auto& f : families) {
    EXPECT_TRUE(names.insert(f.name).second) << "family twice: " << f.name;
    EXPECT_EQ(f.name.rfind("strata_", 0), 0u) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    const bool total = f.name.size() > 6 && f.name.substr(f.name.size() - 6) == "_total";
    EXPECT_EQ(total, f.type == prometheus::MetricType::Counter) << f.name;
    if (f.type == prometheus::MetricType::Histogram) {
      EXPECT_NE(f.name.find("_seconds"), std::string::npos) << f.name;
    }
    for (const auto& m : f.metric)
      for (const auto& l : m.label) EXPECT_NE(l.name, "key") << f.name;
  }
  for (const char* expected :
       {"strata_build_info", "strata_training_examples_total", "strata_training_heldout_auc",
        "strata_tier_hits_total", "strata_tier_evictions_total", "strata_shard_flush_bytes_total",
        "strata_actor_mailbox_depth_messages", "strata_pull_latency_seconds",
        "strata_cache_lookup_latency_seconds"})
    EXPECT_NE(find(families, expected), nullptr) << expected;
}

TEST(Catalogue, TransportCountersPerPeer) {
  auto s = sample();
  transport::transport_stats t;
  t.node = "n1";
  t.rejected_frames = 2;
  t.peers_down = 1;
  t.unauthenticated_frames = 5;
  t.refused_handshakes = 3;
  transport::peer_stats up;
  up.name = "n2";
  up.up = true;
  up.bytes_sent = 4096;
  up.credit_waits = 11;
  up.window_peak_frames = 9;
  transport::peer_stats down;
  down.name = "n3";
  down.frames_received = 7;
  down.window_violations = 1;
  t.peers = {up, down};
  s.transport = t;
  const auto families = to_families(s);
  const auto* sent = find(families, "strata_transport_sent_bytes_total");
  ASSERT_NE(sent, nullptr);
  ASSERT_EQ(sent->metric.size(), 2u);
  EXPECT_EQ(sent->metric[0].counter.value, 4096);
  const auto* peer_up = find(families, "strata_transport_peer_up");
  ASSERT_NE(peer_up, nullptr);
  EXPECT_EQ(peer_up->metric[1].gauge.value, 0);  // n3 is down
  bool peer_label = false;
  for (const auto& l : peer_up->metric[1].label) peer_label |= l.name == "peer" && l.value == "n3";
  EXPECT_TRUE(peer_label);
  EXPECT_EQ(find(families, "strata_transport_rejected_frames_total")->metric[0].counter.value, 2);
  // Membership (issue 16): a non-member's dropped frames and refused hellos.
  ASSERT_NE(find(families, "strata_transport_unauthenticated_frames_total"), nullptr);
  EXPECT_EQ(
      find(families, "strata_transport_unauthenticated_frames_total")->metric[0].counter.value, 5);
  ASSERT_NE(find(families, "strata_transport_refused_handshakes_total"), nullptr);
  EXPECT_EQ(find(families, "strata_transport_refused_handshakes_total")->metric[0].counter.value,
            3);
  // Flow control (issue 16): credit waits, window peak and violations per peer.
  ASSERT_NE(find(families, "strata_transport_credit_waits_total"), nullptr);
  EXPECT_EQ(find(families, "strata_transport_credit_waits_total")->metric[0].counter.value, 11);
  ASSERT_NE(find(families, "strata_transport_window_peak_frames"), nullptr);
  EXPECT_EQ(find(families, "strata_transport_window_peak_frames")->metric[0].gauge.value, 9);
  ASSERT_NE(find(families, "strata_transport_window_violations_total"), nullptr);
  EXPECT_EQ(find(families, "strata_transport_window_violations_total")->metric[1].counter.value, 1);
  EXPECT_EQ(find(to_families(sample()), "strata_transport_peer_up"), nullptr);  // no transport
}

TEST(Catalogue, EverySeriesOnceAndBucketsCumulative) {
  const auto text = prometheus::TextSerializer().Serialize(to_families(sample()));
  std::vector<std::string> duplicates;
  const auto series = testing::parse_exposition(text, &duplicates);
  EXPECT_TRUE(duplicates.empty()) << duplicates.front();

  const auto families = to_families(sample());
  const auto* pull = find(families, "strata_pull_latency_seconds");
  ASSERT_NE(pull, nullptr);
  ASSERT_EQ(pull->metric.size(), 2u);  // one per shard
  const auto& h = pull->metric.front().histogram;
  ASSERT_EQ(h.bucket.size(), latency_histogram::bounds.size());
  uint64_t previous = 0;
  for (const auto& b : h.bucket) {
    EXPECT_GE(b.cumulative_count, previous);
    previous = b.cumulative_count;
  }
  const auto raw = latency("pull", 1);
  uint64_t total = 0;
  for (uint64_t c : raw.counts) total += c;
  EXPECT_EQ(h.sample_count, total);
  const std::string owner = "node=\"n1\",shard=\"0\",table=\"ctr\"";
  EXPECT_EQ(series.at("strata_pull_latency_seconds_bucket{" + owner + ",le=\"+Inf\"}"),
            series.at("strata_pull_latency_seconds_count{" + owner + "}"));
  EXPECT_EQ(series.at("strata_pull_latency_seconds_count{" + owner + "}"),
            static_cast<double>(total));
}

TEST(Catalogue, ShardChainCascades) {
  const auto text = prometheus::TextSerializer().Serialize(to_families(sample()));
  const auto series = testing::parse_exposition(text);
  const std::string owner = "node=\"n1\",shard=\"0\",table=\"ctr\"";
  EXPECT_EQ(series.at("strata_tier_lookups_total{" + owner + ",tier=\"dram\"}"), 100);
  EXPECT_EQ(series.at("strata_tier_misses_total{" + owner + ",tier=\"dram\"}"), 40);
  EXPECT_EQ(series.at("strata_tier_lookups_total{" + owner + ",tier=\"write_behind\"}"), 40);
  EXPECT_EQ(series.at("strata_tier_hits_total{" + owner + ",tier=\"write_behind\"}"), 10);
  EXPECT_EQ(series.at("strata_tier_lookups_total{" + owner + ",tier=\"lmdb\"}"), 30);
  EXPECT_EQ(series.at("strata_tier_misses_total{" + owner + ",tier=\"lmdb\"}"), 10);
  EXPECT_EQ(series.at("strata_shard_initialized_rows_total{" + owner + "}"), 10);
  EXPECT_EQ(series.at("strata_tier_rows{" + owner + ",tier=\"lmdb\"}"), 30);
}

TEST(Catalogue, MonotonicMergeNeverLowersACounter) {
  auto before = shard(0);
  auto after = shard(0);
  after.hits = 50;    // lower: keep 60
  after.misses = 90;  // higher: take it
  after.rows = 1;     // gauge: take the later value
  after.latencies[0].counts[1] = 0;
  const auto merged = monotonic_merge(before, after);
  EXPECT_EQ(merged.hits, 60u);
  EXPECT_EQ(merged.misses, 90u);
  EXPECT_EQ(merged.rows, 1u);
  EXPECT_EQ(merged.latencies[0].counts[1], before.latencies[0].counts[1]);
}

}  // namespace
}  // namespace strata::monitoring
