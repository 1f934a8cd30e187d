// DRAM tier: hits and misses, sizing from the byte budget, the exact
// resident sets CLOCK and LFU leave after scripted sequences, dirty-row
// accounting (spilled or taken exactly once), push, TTL, erase, dump, and a
// randomized run against a plain map model.
#include "tiers/dram_tier.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

constexpr row_layout sgd_layout{4, optimizer_kind::sgd, true};

// A record of `layout` whose value words all equal `value`.
std::vector<std::byte> make_row(const row_layout& layout, float value, uint64_t version = 1) {
  std::vector<std::byte> rec(layout.record_bytes());
  meta_of(rec.data()) = row_meta{version, 0, 0};
  float* v = weights_of(rec.data());
  for (uint32_t j = 0; j < layout.value_words(); ++j) v[j] = value;
  return rec;
}

dram_tier make_tier(size_t rows, eviction_policy policy = eviction_policy::lru, uint32_t ttl = 0,
                    row_layout layout = sgd_layout) {
  dram_tier_config config;
  config.capacity_bytes = dram_tier::budget_for_rows(layout, policy, rows);
  config.policy = policy;
  config.ttl_ticks = ttl;
  return dram_tier(layout, config);  // not movable: returned as a prvalue
}

// Stores each key with value = key, one batch per call.
status put(dram_tier& tier, std::vector<uint64_t> keys, bool dirty, row_buffer& spilled) {
  std::vector<std::byte> recs(keys.size() * tier.layout().record_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = make_row(tier.layout(), static_cast<float>(keys[i]));
    std::copy(r.begin(), r.end(), recs.begin() + static_cast<ptrdiff_t>(i * r.size()));
  }
  return tier.store(keys, const_rows_span(recs.data(), tier.layout().record_bytes()), dirty,
                    spilled);
}
void put(dram_tier& tier, std::vector<uint64_t> keys, bool dirty = false) {
  row_buffer spilled(tier.layout());
  ASSERT_TRUE(put(tier, std::move(keys), dirty, spilled));
}

std::vector<uint32_t> get(dram_tier& tier, std::vector<uint64_t> keys,
                          std::vector<std::byte>* out = nullptr) {
  std::vector<std::byte> local;
  if (out == nullptr) out = &local;
  out->assign(keys.size() * tier.layout().record_bytes(), std::byte{0});
  std::vector<uint32_t> misses;
  EXPECT_TRUE(tier.lookup(keys, rows_span{out->data(), tier.layout().record_bytes()}, misses));
  return misses;
}

std::set<uint64_t> resident(dram_tier& tier) {
  std::set<uint64_t> keys;
  EXPECT_TRUE(tier.dump([&](uint64_t key, const std::byte*) { keys.insert(key); }));
  return keys;
}

std::set<uint64_t> keys_of(const row_buffer& rows) {
  return {rows.keys().begin(), rows.keys().end()};
}

TEST(DramTier, HitsCopyRowsAndMissesComeBackAscending) {
  auto tier = make_tier(16);
  put(tier, {10, 20, 30});
  tier.set_tick(7);
  std::vector<std::byte> out;
  EXPECT_EQ(get(tier, {55, 10, 77, 30, 20, 99}, &out), (std::vector<uint32_t>{0, 2, 5}));
  const size_t rb = sgd_layout.record_bytes();
  for (size_t i : {1u, 3u, 4u}) {
    const std::byte* rec = out.data() + i * rb;
    EXPECT_EQ(meta_of(rec).version, 1u);
    EXPECT_EQ(meta_of(rec).freq, 2u);  // stored (1) + this lookup
    EXPECT_EQ(meta_of(rec).tick, 7u);
  }
  EXPECT_EQ(weights_of(out.data() + 1 * rb)[0], 10.0f);
  EXPECT_EQ(weights_of(out.data() + 3 * rb)[3], 30.0f);
  EXPECT_EQ(weights_of(out.data() + 4 * rb)[2], 20.0f);
  EXPECT_EQ(tier.stats().hits, 3u);
  EXPECT_EQ(tier.stats().misses, 3u);
  // The tier's copy carries the access too; a lookup never marks dirty.
  EXPECT_TRUE(tier.dump([&](uint64_t key, const std::byte* rec) {
    EXPECT_EQ(meta_of(rec).freq, 2u) << key;
    EXPECT_EQ(meta_of(rec).tick, 7u) << key;
  }));
  row_buffer dirty(sgd_layout);
  ASSERT_TRUE(tier.take_dirty(dirty));
  EXPECT_TRUE(dirty.empty());
}

TEST(DramTier, DuplicateKeysInALookupGetTheSameRow) {
  auto tier = make_tier(16);
  put(tier, {5});
  std::vector<std::byte> out;
  EXPECT_TRUE(get(tier, {5, 6, 5, 5}, &out) == std::vector<uint32_t>{1});
  const size_t rb = sgd_layout.record_bytes();
  EXPECT_TRUE(same_row(sgd_layout, out.data(), out.data() + 2 * rb));
  EXPECT_TRUE(same_row(sgd_layout, out.data(), out.data() + 3 * rb));
  EXPECT_EQ(meta_of(out.data() + 3 * rb).freq, 4u);  // each copy is an access
}

TEST(DramTier, EmptyBatchesAreNoOps) {
  auto tier = make_tier(4);
  EXPECT_TRUE(get(tier, {}).empty());
  put(tier, {});
  EXPECT_EQ(tier.size(), 0u);
}

TEST(DramTier, OverwriteAndLastCopyInABatchWins) {
  auto tier = make_tier(16);
  const size_t rb = sgd_layout.record_bytes();
  std::vector<std::byte> recs(3 * rb);
  for (int i = 0; i < 3; ++i) {
    auto r = make_row(sgd_layout, static_cast<float>(100 + i), 10 + i);
    std::copy(r.begin(), r.end(), recs.begin() + i * static_cast<ptrdiff_t>(rb));
  }
  std::vector<uint64_t> keys{1, 2, 1};
  row_buffer spilled(sgd_layout);
  ASSERT_TRUE(tier.store(keys, const_rows_span(recs.data(), rb), false, spilled));
  EXPECT_EQ(tier.size(), 2u);
  std::vector<std::byte> out;
  EXPECT_TRUE(get(tier, {1, 2}, &out).empty());
  EXPECT_EQ(weights_of(out.data())[0], 102.0f);
  EXPECT_EQ(meta_of(out.data()).version, 12u);
  EXPECT_EQ(weights_of(out.data() + rb)[0], 101.0f);

  // A later overwrite replaces the value and keeps counting accesses.
  put(tier, {2});
  EXPECT_TRUE(get(tier, {2}, &out).empty());
  EXPECT_EQ(weights_of(out.data())[0], 2.0f);
  EXPECT_EQ(meta_of(out.data()).freq, 4u);  // store, lookup, store, lookup
  EXPECT_TRUE(spilled.empty());
}

TEST(DramTier, CapacityComesFromTheByteBudget) {
  for (auto policy : {eviction_policy::lru, eviction_policy::lfu}) {
    for (size_t budget : {size_t{4096}, size_t{100000}, size_t{1} << 20, size_t{50} << 20}) {
      for (row_layout layout : {sgd_layout, row_layout{64, optimizer_kind::adagrad, true}}) {
        dram_tier tier(layout, {budget, policy, 0});
        EXPECT_LE(tier.memory_bytes(), budget);
        // One more row would not fit.
        EXPECT_GT(dram_tier::budget_for_rows(layout, policy, tier.capacity_rows() + 1), budget);
        if (budget >= (size_t{1} << 20) && layout.dim == 64) {
          // Overhead beyond the records stays small.
          EXPECT_GT(tier.capacity_rows() * layout.record_bytes(), budget * 8 / 10);
        }
      }
    }
  }
  // budget_for_rows is exact: that budget holds exactly that many rows.
  for (auto policy : {eviction_policy::lru, eviction_policy::lfu}) {
    for (size_t rows : {1u, 2u, 3u, 100u, 5000u}) {
      const size_t budget = dram_tier::budget_for_rows(sgd_layout, policy, rows);
      EXPECT_EQ(dram_tier(sgd_layout, {budget, policy, 0}).capacity_rows(), rows);
      EXPECT_EQ(dram_tier(sgd_layout, {budget - 1, policy, 0}).capacity_rows(), rows - 1);
    }
  }
  // A budget below the fixed overhead holds no row (and the tier still
  // needs that overhead).
  dram_tier tiny(sgd_layout, {16, eviction_policy::lru, 0});
  EXPECT_EQ(tiny.capacity_rows(), 0u);
  row_buffer spilled(sgd_layout);
  auto st = put(tiny, {1}, true, spilled);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code(), errc::capacity_exceeded);
}

TEST(DramTier, FillsToCapacityThenEvicts) {
  auto tier = make_tier(100);
  std::vector<uint64_t> keys(100);
  for (uint64_t i = 0; i < 100; ++i) keys[i] = i * 7919 + 3;
  put(tier, keys);
  EXPECT_EQ(tier.size(), 100u);
  EXPECT_EQ(tier.stats().evictions, 0u);
  EXPECT_TRUE(get(tier, keys).empty());
  put(tier, {1});
  EXPECT_EQ(tier.size(), 100u);
  EXPECT_EQ(tier.stats().evictions, 1u);
  EXPECT_EQ(tier.stats().dirty_evictions, 0u);
  EXPECT_TRUE(tier.contains(1));
}

// CLOCK, with capacity 4. Slots fill in order (A..D in slots 0..3); a store
// is an access, so every new row starts with its reference bit set. The
// hand starts at slot 0, clears set bits as it passes, and evicts the first
// clear slot; the new row takes the victim's slot and the hand moves on.
TEST(DramTier, ClockEvictsTheFirstUnreferencedSlotFromTheHand) {
  constexpr uint64_t A = 1, B = 2, C = 3, D = 4, E = 5, F = 6, G = 7;
  auto tier = make_tier(4, eviction_policy::lru);
  put(tier, {A});
  put(tier, {B});
  put(tier, {C});
  put(tier, {D});
  // All four referenced: the hand clears A..D and comes back to A.
  put(tier, {E});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{E, B, C, D}));
  // Hand at slot 1 (B, clear). C gets referenced by a lookup.
  EXPECT_TRUE(get(tier, {C}).empty());
  put(tier, {F});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{E, F, C, D}));
  // Hand at slot 2: C referenced -> cleared, D clear -> evicted.
  put(tier, {G});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{E, F, C, G}));
  // Hand at slot 0: E was referenced when stored; F too; C is clear now.
  put(tier, {8});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{E, F, 8, G}));
  EXPECT_EQ(tier.stats().evictions, 4u);
}

// A batch with more distinct keys than capacity must evict its own rows:
// the CLOCK hand evicts in slot order, so the earliest rows of the batch go.
TEST(DramTier, ClockBatchLargerThanCapacityEvictsItsEarliestRows) {
  auto tier = make_tier(2, eviction_policy::lru);
  row_buffer spilled(sgd_layout);
  ASSERT_TRUE(put(tier, {11, 12, 13}, true, spilled));
  EXPECT_EQ(keys_of(spilled), (std::set<uint64_t>{11}));
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{12, 13}));
}

// LFU order: smallest freq, then oldest tick, then smallest key.
TEST(DramTier, LfuEvictsLeastFrequentThenOldestThenSmallestKey) {
  auto tier = make_tier(3, eviction_policy::lfu);
  tier.set_tick(1);
  put(tier, {1});
  tier.set_tick(2);
  put(tier, {2});
  tier.set_tick(3);
  put(tier, {3});
  tier.set_tick(4);
  EXPECT_TRUE(get(tier, {1}).empty());  // 1: freq 2
  tier.set_tick(5);
  EXPECT_TRUE(get(tier, {1, 2}).empty());  // 1: freq 3, 2: freq 2
  tier.set_tick(6);
  put(tier, {4});  // 3 has the smallest freq (1)
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{1, 2, 4}));
  tier.set_tick(7);
  EXPECT_TRUE(get(tier, {4}).empty());  // 4: freq 2 tick 7; 2: freq 2 tick 5
  put(tier, {5});                       // freq tie: 2 is older
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{1, 4, 5}));
  // freq and tick tie: 5 (freq 1, tick 7) vs 6 stored now -> smallest key.
  tier.set_tick(8);
  EXPECT_TRUE(get(tier, {4, 4}).empty());
  put(tier, {6});  // evicts 5: the only freq-1 row outside this batch
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{1, 4, 6}));

  auto tie = make_tier(2, eviction_policy::lfu);
  tie.set_tick(1);
  put(tie, {20, 10});
  put(tie, {30});  // 10 and 20 both freq 1, tick 1: smaller key 10 goes
  EXPECT_EQ(resident(tie), (std::set<uint64_t>{20, 30}));
}

// New rows start at freq 1, below every older row that was accessed; within
// one batch they must still not evict each other while older rows exist,
// and after the batch they compete normally again.
TEST(DramTier, LfuProtectsRowsOfTheCurrentBatch) {
  auto tier = make_tier(3, eviction_policy::lfu);
  tier.set_tick(1);
  put(tier, {1, 2, 3});
  EXPECT_TRUE(get(tier, {1, 2, 3, 1, 2, 3}).empty());  // all freq 3, tick 1
  tier.set_tick(2);
  put(tier, {4, 5});  // 4 evicts 1 (key tie-break); 5 skips 4 and evicts 2
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{3, 4, 5}));
  tier.set_tick(3);
  put(tier, {6});  // 4 and 5 are fair game again: freq 1, tick 2, key 4 first
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{3, 5, 6}));
  // More distinct keys than capacity in one batch: its own rows get evicted.
  row_buffer spilled(sgd_layout);
  ASSERT_TRUE(put(tier, {7, 8, 9, 10}, true, spilled));
  EXPECT_EQ(tier.size(), 3u);
  EXPECT_EQ(spilled.size(), 1u);
  EXPECT_TRUE(tier.contains(10));
}

TEST(DramTier, LfuTickGoingBackStillOrdersCorrectly) {
  auto tier = make_tier(2, eviction_policy::lfu);
  tier.set_tick(10);
  put(tier, {1, 2});  // both freq 1 tick 10
  tier.set_tick(3);
  EXPECT_TRUE(get(tier, {2}).empty());  // 2: freq 2, tick 3
  EXPECT_TRUE(get(tier, {1}).empty());  // 1: freq 2, tick 3
  tier.set_tick(2);
  EXPECT_TRUE(get(tier, {2}).empty());  // 2: freq 3, tick 2
  EXPECT_TRUE(get(tier, {1}).empty());  // 1: freq 3, tick 2
  EXPECT_TRUE(get(tier, {2}).empty());  // 2: freq 4
  put(tier, {3});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{2, 3}));
}

TEST(DramTier, DirtyRowsAreSpilledExactlyOnceAndCleanRowsNever) {
  for (auto policy : {eviction_policy::lru, eviction_policy::lfu}) {
    auto tier = make_tier(4, policy);
    row_buffer spilled(sgd_layout);
    ASSERT_TRUE(put(tier, {1, 2, 3, 4}, true, spilled));
    ASSERT_TRUE(put(tier, {5, 6, 7, 8}, false, spilled));
    EXPECT_EQ(keys_of(spilled), (std::set<uint64_t>{1, 2, 3, 4}));
    EXPECT_EQ(spilled.size(), 4u);
    for (size_t i = 0; i < spilled.size(); ++i)
      EXPECT_EQ(weights_of(spilled.record(i))[0], static_cast<float>(spilled.key(i)));
    spilled.clear();
    ASSERT_TRUE(put(tier, {9, 10, 11, 12}, false, spilled));
    EXPECT_TRUE(spilled.empty());
    EXPECT_EQ(tier.stats().evictions, 8u);
    EXPECT_EQ(tier.stats().dirty_evictions, 4u);
    row_buffer dirty(sgd_layout);
    ASSERT_TRUE(tier.take_dirty(dirty));
    EXPECT_TRUE(dirty.empty());

    // A clean store over a dirty row keeps it dirty (never lose a write-down).
    ASSERT_TRUE(put(tier, {9}, true, spilled));
    ASSERT_TRUE(put(tier, {9}, false, spilled));
    ASSERT_TRUE(tier.take_dirty(dirty));
    EXPECT_EQ(keys_of(dirty), (std::set<uint64_t>{9}));
    // Once taken, the row is clean: evicting it spills nothing.
    ASSERT_TRUE(put(tier, {20, 21, 22, 23}, false, spilled));
    EXPECT_FALSE(tier.contains(9));
    EXPECT_TRUE(spilled.empty());
  }
}

TEST(DramTier, TakeDirtyReturnsEachDirtyRowOnce) {
  auto tier = make_tier(300);
  std::vector<uint64_t> dirty_keys, clean_keys;
  for (uint64_t k = 0; k < 200; ++k) (k % 3 == 0 ? dirty_keys : clean_keys).push_back(k);
  put(tier, dirty_keys, true);
  put(tier, clean_keys, false);
  row_buffer out;  // a default buffer is adopted
  ASSERT_TRUE(tier.take_dirty(out));
  EXPECT_EQ(out.size(), dirty_keys.size());
  EXPECT_EQ(keys_of(out), std::set<uint64_t>(dirty_keys.begin(), dirty_keys.end()));
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(weights_of(out.record(i))[1], static_cast<float>(out.key(i)));
  row_buffer again(sgd_layout);
  ASSERT_TRUE(tier.take_dirty(again));
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(tier.size(), 200u);

  // A non-empty buffer of another layout is refused.
  row_buffer other(row_layout{8, optimizer_kind::sgd, true});
  other.append(1);
  EXPECT_EQ(tier.take_dirty(other).err().code(), errc::invalid_argument);
}

// The exact-sum test in miniature: zero rows, SGD with learning rate 1,
// integer increments pushed as negated gradients.
TEST(DramTier, PushAppliesTheOptimizerAndMarksDirty) {
  auto tier = make_tier(16);
  const size_t rb = sgd_layout.record_bytes();
  std::vector<std::byte> zeros(2 * rb);
  for (int i = 0; i < 2; ++i) {
    auto r = make_row(sgd_layout, 0.0f, 1);
    std::copy(r.begin(), r.end(), zeros.begin() + i * static_cast<ptrdiff_t>(rb));
  }
  row_buffer spilled(sgd_layout);
  std::vector<uint64_t> keys{100, 200};
  ASSERT_TRUE(tier.store(keys, const_rows_span(zeros.data(), rb), false, spilled));

  optimizer_config sgd;
  sgd.kind = optimizer_kind::sgd;
  sgd.learning_rate = 1.0f;
  const size_t stride = 6;  // wider than dim: stride is honoured
  std::vector<float> grads(3 * stride, 0.0f);
  for (int step = 1; step <= 5; ++step) {
    std::vector<uint64_t> push_keys{100, 300, 200};
    for (size_t j = 0; j < 4; ++j) {
      grads[0 * stride + j] = -static_cast<float>(step);
      grads[1 * stride + j] = -1000.0f;
      grads[2 * stride + j] = -static_cast<float>(j + 1);
    }
    std::vector<uint32_t> misses;
    ASSERT_TRUE(tier.push(push_keys, grads.data(), stride, sgd, misses));
    EXPECT_EQ(misses, std::vector<uint32_t>{1});
  }
  std::vector<std::byte> out;
  EXPECT_TRUE(get(tier, {100, 200}, &out).empty());
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(weights_of(out.data())[j], 15.0f);  // 1 + 2 + 3 + 4 + 5
    EXPECT_EQ(weights_of(out.data() + rb)[j], 5.0f * static_cast<float>(j + 1));
  }
  EXPECT_EQ(counter_of(meta_of(out.data()).version), 6u);  // 1 + five updates
  EXPECT_FALSE(tier.contains(300));
  row_buffer dirty(sgd_layout);
  ASSERT_TRUE(tier.take_dirty(dirty));
  EXPECT_EQ(keys_of(dirty), (std::set<uint64_t>{100, 200}));

  // Mismatched optimizer or a serving layout: refused.
  optimizer_config adagrad;
  adagrad.kind = optimizer_kind::adagrad;
  std::vector<uint32_t> misses;
  EXPECT_EQ(tier.push(keys, grads.data(), stride, adagrad, misses).err().code(),
            errc::invalid_argument);
  auto serving = make_tier(4, eviction_policy::lru, 0, row_layout{4, optimizer_kind::sgd, false});
  EXPECT_EQ(serving.push(keys, grads.data(), stride, sgd, misses).err().code(),
            errc::invalid_argument);
}

TEST(DramTier, PushAdagradMatchesTheOptimizerOnACopy) {
  const row_layout layout{8, optimizer_kind::adagrad, true};
  auto tier = make_tier(8, eviction_policy::lru, 0, layout);
  optimizer_config adagrad;
  adagrad.kind = optimizer_kind::adagrad;
  adagrad.learning_rate = 0.05f;
  auto rec = make_row(layout, 0.25f, 3);
  std::vector<uint64_t> keys{42};
  row_buffer spilled(layout);
  ASSERT_TRUE(tier.store(keys, const_rows_span(rec.data(), rec.size()), false, spilled));
  std::vector<float> grad{0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.25f, 3.0f, -2.0f};
  std::vector<uint32_t> misses;
  ASSERT_TRUE(tier.push(keys, grad.data(), grad.size(), adagrad, misses));
  apply_optimizer(adagrad, layout, rec.data(), grad.data());
  std::vector<std::byte> out;
  EXPECT_TRUE(get(tier, {42}, &out).empty());
  EXPECT_TRUE(same_row(layout, out.data(), rec.data()));
}

TEST(DramTier, ExpireRemovesRowsNotAccessedWithinTtl) {
  auto tier = make_tier(16, eviction_policy::lru, 10);
  tier.set_tick(0);
  put(tier, {1}, true);  // dirty: dropped on expiry, a tombstone supersedes it
  tier.set_tick(5);
  put(tier, {2, 3});
  tier.set_tick(10);
  std::vector<uint64_t> expired;
  tier.expire(expired);
  EXPECT_TRUE(expired.empty());  // 10 - 0 is not more than 10
  tier.set_tick(11);
  tier.expire(expired);
  EXPECT_EQ(expired, std::vector<uint64_t>{1});
  EXPECT_TRUE(get(tier, {3}).empty());  // 3 accessed at 11
  tier.set_tick(20);
  expired.clear();
  tier.expire(expired);
  EXPECT_EQ(expired, std::vector<uint64_t>{2});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{3}));
  EXPECT_EQ(tier.stats().expired, 2u);
  row_buffer dirty(sgd_layout);
  ASSERT_TRUE(tier.take_dirty(dirty));
  EXPECT_TRUE(dirty.empty());
  // Freed slots are reused.
  put(tier, {4, 5});
  EXPECT_EQ(resident(tier), (std::set<uint64_t>{3, 4, 5}));

  auto forever = make_tier(4);
  put(forever, {1});
  forever.set_tick(1000000);
  forever.expire(expired);
  EXPECT_EQ(forever.size(), 1u);
}

TEST(DramTier, EraseRemovesRowsAndFreesTheirSlots) {
  auto tier = make_tier(3);
  put(tier, {1, 2, 3}, true);
  ASSERT_TRUE(tier.erase(std::vector<uint64_t>{2, 99, 2}));
  EXPECT_EQ(tier.size(), 2u);
  EXPECT_FALSE(tier.contains(2));
  EXPECT_EQ(get(tier, {1, 2, 3}), std::vector<uint32_t>{1});
  row_buffer spilled(sgd_layout);
  ASSERT_TRUE(put(tier, {4}, false, spilled));  // takes the freed slot
  EXPECT_TRUE(spilled.empty());
  EXPECT_EQ(tier.stats().evictions, 0u);
  row_buffer dirty(sgd_layout);
  ASSERT_TRUE(tier.take_dirty(dirty));
  EXPECT_EQ(keys_of(dirty), (std::set<uint64_t>{1, 3}));  // erased rows are gone, dirty or not
}

TEST(DramTier, DumpVisitsEveryResidentRowOnce) {
  auto tier = make_tier(64);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 50; ++k) keys.push_back(k * 1000003);
  put(tier, keys);
  ASSERT_TRUE(tier.erase(std::vector<uint64_t>{keys[3], keys[7]}));
  std::map<uint64_t, float> seen;
  ASSERT_TRUE(tier.dump([&](uint64_t key, const std::byte* rec) {
    EXPECT_TRUE(seen.emplace(key, weights_of(rec)[0]).second);
  }));
  EXPECT_EQ(seen.size(), 48u);
  for (auto& [key, value] : seen) EXPECT_EQ(value, static_cast<float>(key));
}

TEST(DramTier, RefusesANonEmptySpillBufferOfAnotherLayout) {
  auto tier = make_tier(4);
  row_buffer other(row_layout{8, optimizer_kind::sgd, true});
  other.append(1);
  EXPECT_EQ(put(tier, {1}, true, other).err().code(), errc::invalid_argument);
}

// Random stores, erases, lookups and expiries against a map model: resident
// rows always hold the last stored value, the tier never exceeds capacity,
// and every dirty version is written down (spilled or taken) exactly once,
// unless erased or expired, while clean rows never are.
TEST(DramTier, RandomOperationsMatchAModel) {
  for (auto policy : {eviction_policy::lru, eviction_policy::lfu}) {
    auto tier = make_tier(200, policy, 50);
    std::mt19937_64 rng(policy == eviction_policy::lru ? 1 : 2);
    std::unordered_map<uint64_t, std::pair<float, bool>> model;  // value, dirty
    const size_t rb = sgd_layout.record_bytes();
    float next_value = 1.0f;
    auto write_down = [&](const row_buffer& rows) {
      for (size_t i = 0; i < rows.size(); ++i) {
        auto it = model.find(rows.key(i));
        ASSERT_NE(it, model.end()) << rows.key(i);
        EXPECT_TRUE(it->second.second) << "clean or twice-written row " << rows.key(i);
        EXPECT_EQ(weights_of(rows.record(i))[0], it->second.first);
        it->second.second = false;
      }
    };
    for (uint32_t step = 0; step < 3000; ++step) {
      tier.set_tick(step);
      const auto op = rng() % 10;
      std::vector<uint64_t> keys(1 + rng() % 40);
      for (auto& k : keys) k = rng() % 600;
      if (op < 5) {
        const bool dirty = rng() % 2 == 0;
        std::vector<std::byte> recs(keys.size() * rb);
        for (size_t i = 0; i < keys.size(); ++i) {
          auto r = make_row(sgd_layout, next_value);
          std::copy(r.begin(), r.end(), recs.begin() + static_cast<ptrdiff_t>(i * rb));
          auto& m = model[keys[i]];
          m.first = next_value;
          m.second = m.second || dirty;  // dirty is sticky
          next_value += 1.0f;
        }
        row_buffer spilled(sgd_layout);
        ASSERT_TRUE(tier.store(keys, const_rows_span(recs.data(), rb), dirty, spilled));
        write_down(spilled);
        // Every key of the batch is resident unless the batch overflowed.
        std::set<uint64_t> distinct(keys.begin(), keys.end());
        if (distinct.size() <= tier.capacity_rows()) {
          for (uint64_t k : distinct) EXPECT_TRUE(tier.contains(k)) << k;
        }
      } else if (op < 7) {
        std::vector<std::byte> out;
        auto misses = get(tier, keys, &out);
        size_t m = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (m < misses.size() && misses[m] == i) {
            EXPECT_FALSE(tier.contains(keys[i]));
            ++m;
            continue;
          }
          EXPECT_EQ(weights_of(out.data() + i * rb)[0], model.at(keys[i]).first);
        }
      } else if (op < 8) {
        ASSERT_TRUE(tier.erase(keys));
        for (uint64_t k : keys) model.erase(k);
      } else if (op < 9) {
        std::vector<uint64_t> expired;
        tier.expire(expired);
        for (uint64_t k : expired) model.erase(k);
      } else {
        row_buffer dirty(sgd_layout);
        ASSERT_TRUE(tier.take_dirty(dirty));
        write_down(dirty);
      }
      // Rows the tier no longer holds (evicted clean) leave the model.
      for (auto it = model.begin(); it != model.end();) {
        if (!tier.contains(it->first)) {
          EXPECT_FALSE(it->second.second) << "dirty row lost: " << it->first;
          it = model.erase(it);
        } else {
          ++it;
        }
      }
      ASSERT_EQ(tier.size(), model.size());
      ASSERT_LE(tier.size(), tier.capacity_rows());
    }
  }
}

}  // namespace
}  // namespace strata
