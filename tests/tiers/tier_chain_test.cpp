#include "tiers/tier_chain.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using testing::exact_sum_table;
using testing::temp_dir;

struct chain_fixture {
  temp_dir dir;
  table_config table;
  std::unique_ptr<tier_chain> chain;

  chain_fixture(table_config t, size_t dram_rows, tier_chain_config cc = {},
                dram_tier_config dc = {})
      : table(std::move(t)) {
    // Budget for roughly dram_rows rows (the tier derives its exact count).
    dc.capacity_bytes = dram_rows * (table.layout.record_bytes() + 32) + 4096;
    auto dram = std::make_unique<dram_tier>(table.layout, dc);
    lmdb_tier_config lc;
    lc.directory = dir.path() / "shard0";
    lc.table = table.name;
    lc.partitions = 16;
    lc.map_bytes = size_t{1} << 30;
    auto lmdb = lmdb_tier::open(table.layout, lc);
    EXPECT_TRUE(lmdb) << lmdb.err().to_string();
    chain = std::make_unique<tier_chain>(table, cc, std::move(dram), std::move(*lmdb));
  }

  std::vector<float> weights(uint64_t key) {
    std::vector<std::byte> rec(table.layout.record_bytes());
    EXPECT_TRUE(chain->lookup({&key, 1}, {rec.data(), rec.size()}, nullptr));
    const float* w = weights_of(rec.data());
    return {w, w + table.layout.dim};
  }

  // Delivers every pending write-behind batch to the LMDB tier.
  void flush_all() {
    row_buffer batch;
    uint64_t seq;
    while (chain->take_flush(batch, seq)) {
      row_buffer none(table.layout);
      ASSERT_TRUE(chain->durable()->store(batch.keys(), batch.rows(), true, none));
      chain->flushed(seq);
    }
  }
};

TEST(TierChain, UnknownKeyGetsItsInitializerRow) {
  auto table = testing::make_table(8);
  chain_fixture f(table, 64);
  std::vector<uint64_t> keys{5, 6, 5};
  std::vector<std::byte> out(3 * table.layout.record_bytes());
  ASSERT_TRUE(f.chain->lookup(keys, {out.data(), table.layout.record_bytes()}, nullptr));
  std::vector<std::byte> expect(table.layout.record_bytes());
  table.initial_row(5, expect.data());
  EXPECT_TRUE(same_row(table.layout, out.data(), expect.data()));
  EXPECT_TRUE(same_row(table.layout, out.data() + 2 * table.layout.record_bytes(), expect.data()));
  EXPECT_EQ(f.chain->stats().initialized, 2u);  // key 5 once, key 6 once
  EXPECT_TRUE(f.chain->dram().contains(5));
}

// The exact-sum test under heavy eviction: 4000 keys through a DRAM tier of
// ~64 rows, batches with duplicates, flushes delivered late and in bursts.
TEST(TierChain, ExactSumUnderEvictionPressure) {
  chain_fixture f(exact_sum_table(4), 64);
  std::mt19937_64 rng(1);
  std::map<uint64_t, int64_t> expected;
  for (int batch = 0; batch < 300; ++batch) {
    std::vector<uint64_t> keys(96);
    std::vector<float> grads(keys.size() * 4);
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] = rng() % 4000;
      const int inc = static_cast<int>(rng() % 5) + 1;
      expected[keys[i]] += inc;
      for (int j = 0; j < 4; ++j) grads[i * 4 + j] = -static_cast<float>(inc * (j + 1));
    }
    ASSERT_TRUE(f.chain->push(keys, grads.data(), 4, nullptr));
    if (batch % 7 == 0) f.flush_all();
  }
  EXPECT_GT(f.chain->dram().stats().dirty_evictions, 1000u);
  for (const auto& [key, sum] : expected) {
    auto w = f.weights(key);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(w[j], static_cast<float>(sum * (j + 1))) << key;
  }
  // After a drain everything is in LMDB, exactly.
  ASSERT_TRUE(f.chain->drain());
  std::vector<std::byte> rec(f.table.layout.record_bytes());
  for (const auto& [key, sum] : expected) {
    std::vector<uint32_t> misses;
    ASSERT_TRUE(f.chain->durable()->lookup({&key, 1}, {rec.data(), rec.size()}, misses));
    ASSERT_TRUE(misses.empty()) << key;
    ASSERT_EQ(weights_of(rec.data())[0], static_cast<float>(sum)) << key;
  }
}

// Read-your-writes while a flush is in flight: the write-behind copy is
// served, never the older LMDB one.
TEST(TierChain, ReadYourWritesAcrossInFlightFlush) {
  chain_fixture f(exact_sum_table(2), 16);
  std::vector<uint64_t> keys(16);
  for (uint64_t round = 1; round <= 20; ++round) {
    std::vector<float> grads;
    for (uint64_t k = 0; k < 16; ++k) {
      keys[k] = round * 1000 + k;  // new keys each round push the old ones out
      grads.push_back(-1.0f);
      grads.push_back(-1.0f);
    }
    ASSERT_TRUE(f.chain->push(keys, grads.data(), 2, nullptr));
    // Push key 7 again every round, flush in flight but not confirmed.
    uint64_t hot = 7;
    float g[2] = {-1.0f, -1.0f};
    ASSERT_TRUE(f.chain->push({&hot, 1}, g, 2, nullptr));
    row_buffer batch;
    uint64_t seq = 0;
    bool has = f.chain->take_flush(batch, seq);
    EXPECT_EQ(f.weights(7)[0], static_cast<float>(round));
    if (has) {
      row_buffer none(f.table.layout);
      ASSERT_TRUE(f.chain->durable()->store(batch.keys(), batch.rows(), true, none));
      EXPECT_EQ(f.weights(7)[0], static_cast<float>(round));
      f.chain->flushed(seq);
    }
    EXPECT_EQ(f.weights(7)[0], static_cast<float>(round));
  }
}

TEST(TierChain, PushReturnsNewVersionsPerPosition) {
  chain_fixture f(exact_sum_table(1), 64);
  std::vector<uint64_t> keys{3, 4, 3};
  std::vector<float> g{-1, -1, -1};
  std::vector<uint64_t> versions;
  ASSERT_TRUE(f.chain->push(keys, g.data(), 1, &versions));
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(versions[0], 1u);  // duplicates reduced: one optimizer step
  EXPECT_EQ(versions[2], 1u);
  EXPECT_EQ(f.weights(3)[0], 2.0f);
  ASSERT_TRUE(f.chain->push(keys, g.data(), 1, &versions));
  EXPECT_EQ(versions[0], 2u);
  EXPECT_EQ(f.weights(3)[0], 4.0f);
}

TEST(TierChain, AdmissionAfterNSightings) {
  tier_chain_config cc;
  cc.admission_threshold = 3;
  cc.sketch_width = 1024;
  chain_fixture f(exact_sum_table(1), 64, cc);
  uint64_t key = 11;
  float g = -5.0f;
  std::vector<std::byte> rec(f.table.layout.record_bytes());
  std::vector<uint8_t> admitted;
  ASSERT_TRUE(f.chain->lookup({&key, 1}, {rec.data(), rec.size()}, &admitted));  // sighting 1
  EXPECT_EQ(admitted[0], 0);
  ASSERT_TRUE(f.chain->push({&key, 1}, &g, 1, nullptr));  // sighting 2: dropped
  EXPECT_EQ(f.chain->stats().dropped_pushes, 1u);
  EXPECT_FALSE(f.chain->dram().contains(key));
  ASSERT_TRUE(f.chain->lookup({&key, 1}, {rec.data(), rec.size()}, &admitted));  // sighting 3
  EXPECT_EQ(admitted[0], 1);
  EXPECT_EQ(weights_of(rec.data())[0], 0.0f);
  ASSERT_TRUE(f.chain->push({&key, 1}, &g, 1, nullptr));
  EXPECT_EQ(f.weights(key)[0], 5.0f);
  EXPECT_EQ(f.chain->stats().dropped_pushes, 1u);
}

TEST(TierChain, OlderWriteBackIsIgnored) {
  chain_fixture f(exact_sum_table(1), 64);
  uint64_t key = 9;
  float g = -1.0f;
  ASSERT_TRUE(f.chain->push({&key, 1}, &g, 1, nullptr));
  ASSERT_TRUE(f.chain->push({&key, 1}, &g, 1, nullptr));  // version 2, weight 2
  std::vector<std::byte> old(f.table.layout.record_bytes());
  meta_of(old.data()) = row_meta{1, 0, 0};
  weights_of(old.data())[0] = 100.0f;
  ASSERT_TRUE(f.chain->write_back({&key, 1}, {old.data(), old.size()}));
  EXPECT_EQ(f.weights(key)[0], 2.0f);
  meta_of(old.data()).version = 3;
  ASSERT_TRUE(f.chain->write_back({&key, 1}, {old.data(), old.size()}));
  EXPECT_EQ(f.weights(key)[0], 100.0f);
}

TEST(TierChain, TtlExpiryWritesTombstones) {
  dram_tier_config dc;
  dc.ttl_ticks = 5;
  chain_fixture f(exact_sum_table(1), 64, {}, dc);
  uint64_t key = 21;
  float g = -3.0f;
  f.chain->set_tick(1);
  ASSERT_TRUE(f.chain->push({&key, 1}, &g, 1, nullptr));
  ASSERT_TRUE(f.chain->drain());  // now in LMDB too
  EXPECT_EQ(f.chain->durable()->size(), 1u);
  f.chain->set_tick(100);
  ASSERT_TRUE(f.chain->expire());
  EXPECT_FALSE(f.chain->dram().contains(key));
  EXPECT_EQ(f.chain->durable()->size(), 0u);  // tombstoned, the old copy never comes back
  EXPECT_EQ(f.weights(key)[0], 0.0f);
  EXPECT_EQ(f.chain->stats().tombstones, 1u);
}

TEST(TierChain, DrainMakesEveryUpdateDurableAcrossReopen) {
  auto table = exact_sum_table(2);
  temp_dir dir;
  lmdb_tier_config lc;
  lc.directory = dir.path();
  lc.table = table.name;
  lc.partitions = 8;
  lc.map_bytes = size_t{1} << 28;
  {
    dram_tier_config dc;
    dc.capacity_bytes = 1 << 20;
    auto lmdb = lmdb_tier::open(table.layout, lc);
    ASSERT_TRUE(lmdb);
    tier_chain chain(table, {}, std::make_unique<dram_tier>(table.layout, dc), std::move(*lmdb));
    std::vector<uint64_t> keys{1, 2, 3};
    std::vector<float> g{-1, -2, -3, -4, -5, -6};
    ASSERT_TRUE(chain.push(keys, g.data(), 2, nullptr));
    ASSERT_TRUE(chain.drain());
  }
  auto lmdb = lmdb_tier::open(table.layout, lc);
  ASSERT_TRUE(lmdb);
  EXPECT_EQ((*lmdb)->size(), 3u);
  std::vector<std::byte> rec(table.layout.record_bytes());
  uint64_t key = 3;
  std::vector<uint32_t> misses;
  ASSERT_TRUE((*lmdb)->lookup({&key, 1}, {rec.data(), rec.size()}, misses));
  ASSERT_TRUE(misses.empty());
  EXPECT_EQ(weights_of(rec.data())[0], 5.0f);
  EXPECT_EQ(weights_of(rec.data())[1], 6.0f);
}

}  // namespace
}  // namespace strata
