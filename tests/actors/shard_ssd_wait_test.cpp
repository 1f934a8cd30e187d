// How often a pull still waits on LMDB (strata_shard_lookup_ssd_wait_rows_total,
// bench e2e's e2e_ssd_wait_rate): a pull's positions whose rows no tier
// above LMDB held count as SSD waits; a shard prefetch of cold keys reads
// them from LMDB into DRAM ahead (strata_shard_prefetch_ssd_rows_total), so
// the pull after it counts none. Both read paths: on the shard's thread
// (the default) and off it (the reader, on with a read gate). A cache
// tier's prefetch fill reaches the shard as (pull_atom, prefetch_atom): its
// rows count as prefetched, so the lookup after it counts no wait.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "actors/cache_tier_actor.hpp"
#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
#include "actors/shard_reader.hpp"
#include "monitoring/catalogue.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/monitoring/test_support.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::actor_harness;
using strata::testing::exact_sum_table;
using strata::testing::temp_dir;

// GetParam(): the reads run off the shard's thread (a read gate turns the
// reader on).
struct ssd_wait_fixture : ::testing::TestWithParam<bool> {
  temp_dir dir;
  actor_harness h;
  table_config table = exact_sum_table(2);
  std::shared_ptr<shard_read_gate> gate;
  shard_actor shard;
  void SetUp() override {
    if (GetParam()) gate = std::make_shared<shard_read_gate>();
    auto cfg = strata::testing::test_shard_config(dir.path(), 0, table, 16);
    auto s = spawn_shard(h.system(), cfg, gate);
    ASSERT_TRUE(s) << s.err().to_string();
    shard = *s;
  }
  void TearDown() override {
    if (gate) gate->release();
    h.sched().run();
  }
  std::vector<uint64_t> range(uint64_t first, uint64_t count) {
    std::vector<uint64_t> keys;
    for (uint64_t k = first; k < first + count; ++k) keys.push_back(k);
    return keys;
  }
  pull_reply pull(const std::vector<uint64_t>& keys) {
    return h.call<pull_reply>(shard, pull_atom::value, keys);
  }
  float weight(const pull_reply& r, size_t i) {
    return weights_of(rows_of(r.rows, table.layout)[i])[0];
  }
  void prefetch(const std::vector<uint64_t>& keys) {
    h.system().spawn([s = shard, keys](caf::event_based_actor* self) {
      self->send(s, prefetch_atom::value, keys);
    });
    h.sched().run();
  }
  tier_stats stats() { return h.call<tier_stats>(shard, stats_atom::value); }
  // Keys 0..63 at 3.0 in LMDB; DRAM (16 rows) holds 48..63.
  void cold_rows() {
    push_request req;
    req.keys = range(0, 64);
    req.grads.assign(req.keys.size() * table.layout.dim, -3.0f);
    h.call<push_reply>(shard, push_atom::value, req);
    h.call<ok_atom>(shard, drain_atom::value);
    pull(range(48, 16));
  }
};

// A pull of cold keys waits on LMDB for each of them; the same pull after
// a prefetch of those keys finds them in DRAM: no waits, the prefetch
// counted the LMDB reads instead.
TEST_P(ssd_wait_fixture, PrefetchOfColdKeysLeavesThePullNoSsdWaits) {
  cold_rows();
  auto before = stats();
  auto r = pull(range(0, 4));  // not prefetched
  EXPECT_EQ(weight(r, 3), 3.0f);
  auto cold = stats();
  EXPECT_EQ(cold.lookup_rows, before.lookup_rows + 4);
  EXPECT_EQ(cold.lookup_ssd_wait_rows, before.lookup_ssd_wait_rows + 4);
  EXPECT_EQ(cold.prefetch_ssd_rows, before.prefetch_ssd_rows);

  prefetch(range(4, 4));
  auto fetched = stats();
  EXPECT_EQ(fetched.prefetch_ssd_rows, cold.prefetch_ssd_rows + 4);
  EXPECT_EQ(fetched.lookup_rows, cold.lookup_rows);  // a prefetch is not a pull
  r = pull(range(4, 4));
  EXPECT_EQ(weight(r, 0), 3.0f);
  EXPECT_EQ(weight(r, 3), 3.0f);
  auto warm = stats();
  EXPECT_EQ(warm.lookup_rows, fetched.lookup_rows + 4);
  EXPECT_EQ(warm.lookup_ssd_wait_rows, fetched.lookup_ssd_wait_rows)
      << "a pull of prefetched rows waited on LMDB";
}

// Only the cold positions of a pull count (duplicates as positions), and a
// key never stored counts too: LMDB is asked before the initializer.
TEST_P(ssd_wait_fixture, OnlyThePositionsBelowDramCount) {
  cold_rows();
  auto before = stats();
  auto r = pull({60, 8, 61, 8, 1000});
  EXPECT_EQ(weight(r, 1), 3.0f);
  EXPECT_EQ(weight(r, 4), 0.0f);
  auto after = stats();
  EXPECT_EQ(after.lookup_rows, before.lookup_rows + 5);
  EXPECT_EQ(after.lookup_ssd_wait_rows, before.lookup_ssd_wait_rows + 3);
}

// The counters reach /metrics under their documented names.
TEST_P(ssd_wait_fixture, CountersAreExported) {
  cold_rows();
  const auto before = stats();
  pull(range(0, 3));
  prefetch(range(10, 2));
  pull(range(10, 2));
  monitoring::node_snapshot snap;
  snap.node = "n1";
  snap.table = "ctr";
  snap.tiers = {stats()};
  const auto text = prometheus::TextSerializer().Serialize(monitoring::to_families(snap));
  const auto series = monitoring::testing::parse_exposition(text);
  const std::string owner = "{node=\"n1\",shard=\"0\",table=\"ctr\"}";
  const auto& s = snap.tiers[0];
  EXPECT_EQ(series.at("strata_shard_lookup_rows_total" + owner), double(s.lookup_rows));
  EXPECT_EQ(s.lookup_rows, before.lookup_rows + 5);
  EXPECT_EQ(series.at("strata_shard_lookup_ssd_wait_rows_total" + owner),
            double(before.lookup_ssd_wait_rows + 3));
  EXPECT_EQ(series.at("strata_shard_prefetch_ssd_rows_total" + owner),
            double(before.prefetch_ssd_rows + 2));
}

// A prefetch fill's pull (pull_atom, prefetch_atom) answers the rows like a
// pull, but counts them as prefetched: no lookup rows, no SSD waits.
TEST_P(ssd_wait_fixture, AFillAheadCountsItsColdRowsAsPrefetchedNotAsWaits) {
  cold_rows();
  const auto before = stats();
  auto r = h.call<pull_reply>(shard, pull_atom::value, prefetch_atom::value, range(0, 4));
  ASSERT_EQ(r.rows.keys.size(), 4u);
  EXPECT_EQ(weight(r, 0), 3.0f);
  EXPECT_EQ(weight(r, 3), 3.0f);
  const auto after = stats();
  EXPECT_EQ(after.lookup_rows, before.lookup_rows);
  EXPECT_EQ(after.lookup_ssd_wait_rows, before.lookup_ssd_wait_rows);
  EXPECT_EQ(after.prefetch_ssd_rows, before.prefetch_ssd_rows + 4);
  EXPECT_EQ(after.prefetch_rows, before.prefetch_rows + 4);
  EXPECT_EQ(after.prefetch_requests, before.prefetch_requests + 1);
}

// Through a cache tier: its prefetch's fill is read ahead (the shard counts
// it so), and the lookup of the same keys after it is served by the cache
// without a pull; a lookup of keys never prefetched waits on LMDB. Before
// the fill went as its own message, the shard counted the prefetch's cold
// rows as a lookup's waits (bench e2e's wait rate was the same with
// prefetch_depth 2 and 0).
TEST_P(ssd_wait_fixture, ACacheTiersPrefetchIsReadAheadAndItsLookupWaitsOnNothing) {
  cold_rows();
  cache_config c;
  c.table = table;
  c.geometry.sets = 16;
  auto cache = spawn_cache_tier(h.system(), c, training_mode::async, {shard}, partition_map(8, 1));
  ASSERT_TRUE(cache) << cache.err().to_string();
  const auto before = stats();
  h.system().spawn([c = *cache, keys = range(0, 8)](caf::event_based_actor* self) {
    self->send(c, prefetch_atom::value, keys);
  });
  h.sched().run();
  const auto fetched = stats();
  EXPECT_EQ(fetched.prefetch_ssd_rows, before.prefetch_ssd_rows + 8);
  EXPECT_EQ(fetched.lookup_rows, before.lookup_rows);
  EXPECT_EQ(fetched.lookup_ssd_wait_rows, before.lookup_ssd_wait_rows);

  auto hit = h.call<lookup_reply>(*cache, lookup_atom::value, range(0, 8));
  ASSERT_EQ(hit.rows.keys.size(), 8u);
  EXPECT_EQ(weights_of(rows_of(hit.rows, table.layout)[7])[0], 3.0f);
  const auto looked = stats();
  EXPECT_EQ(looked.lookup_ssd_wait_rows, fetched.lookup_ssd_wait_rows)
      << "a lookup of prefetched rows waited on LMDB";

  auto miss = h.call<lookup_reply>(*cache, lookup_atom::value, range(20, 3));
  EXPECT_EQ(weights_of(rows_of(miss.rows, table.layout)[2])[0], 3.0f);
  const auto missed = stats();
  EXPECT_EQ(missed.lookup_rows, looked.lookup_rows + 3);
  EXPECT_EQ(missed.lookup_ssd_wait_rows, looked.lookup_ssd_wait_rows + 3);
}

INSTANTIATE_TEST_SUITE_P(Reads, ssd_wait_fixture, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Reader" : "ShardThread"; });

// With the reader on, a pull that arrives while a prefetch's read of its
// keys is still out waits for that read: it counts as a wait (the
// prefetch came too late to hide it).
struct ssd_wait_reader_fixture : ssd_wait_fixture {};

TEST_P(ssd_wait_reader_fixture, PullBehindAnUnfinishedPrefetchReadWaits) {
  cold_rows();
  gate->hold = true;
  prefetch({20, 21});
  auto before = stats();
  auto r = h.ask<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{20, 21});
  h.sched().run();
  EXPECT_FALSE(r->value) << "the pull did not wait for the prefetch's read";
  gate->release();
  h.sched().run();
  ASSERT_TRUE(r->value);
  EXPECT_EQ(weight(*r->value, 1), 3.0f);
  auto after = stats();
  EXPECT_EQ(after.lookup_ssd_wait_rows, before.lookup_ssd_wait_rows + 2);
}

INSTANTIATE_TEST_SUITE_P(Reads, ssd_wait_reader_fixture, ::testing::Values(true),
                         [](const auto&) { return "Reader"; });

}  // namespace
}  // namespace strata::actors
