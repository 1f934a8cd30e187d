// One conformance suite, run against every row_store implementation of the
// tier chain (DRAM with LRU and with LFU, write-behind, LMDB) and against
// the whole chain behind a row_store adapter. A new tier joins by adding a
// factory to `implementations`.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "tests/tiers/test_util.hpp"
#include "tiers/dram_tier.hpp"
#include "tiers/lmdb_tier.hpp"
#include "tiers/tier_chain.hpp"
#include "tiers/write_behind.hpp"

namespace strata {
namespace {

using testing::temp_dir;

// The whole chain seen as one row_store: never misses (the initializer
// answers), never spills, take_dirty drains everything to LMDB.
class chain_store final : public row_store {
 public:
  chain_store(table_config table, std::unique_ptr<dram_tier> dram, std::unique_ptr<lmdb_tier> lmdb)
      : chain_(std::move(table), {}, std::move(dram), std::move(lmdb)) {}
  std::string_view name() const override { return "chain"; }
  const row_layout& layout() const override { return chain_.table().layout; }
  status lookup(std::span<const uint64_t> keys, rows_span out, std::vector<uint32_t>&) override {
    return chain_.lookup(keys, out, nullptr);
  }
  status store(std::span<const uint64_t> keys, const_rows_span rows, bool, row_buffer&) override {
    return chain_.write_back(keys, rows);
  }
  status erase(std::span<const uint64_t>) override { return {}; }
  status take_dirty(row_buffer& out) override {
    // What reaches LMDB, batch by batch: each dirty row exactly once.
    row_buffer dirty(layout());
    STRATA_TRY(chain_.dram().take_dirty(dirty));
    row_buffer none(layout());
    STRATA_TRY(chain_.write_behind().store(dirty.keys(), dirty.rows(), true, none));
    row_buffer batch;
    uint64_t seq = 0;
    while (chain_.take_flush(batch, seq)) {
      STRATA_TRY(chain_.durable()->store(batch.keys(), batch.rows(), true, none));
      for (size_t i = 0; i < batch.size(); ++i) out.append(batch.key(i), batch.record(i));
      chain_.flushed(seq);
    }
    return chain_.durable()->sync();
  }
  status dump(const row_visitor& visit) override { return chain_.durable()->dump(visit); }
  size_t size() const override { return 0; }
  tier_chain& chain() { return chain_; }

 private:
  tier_chain chain_;
};

constexpr uint32_t dim = 8;

// Traits: bounded (evicts), misses (unknown keys miss rather than get the
// initializer row), dirty_tracking (hands rows down), all_rows_owed (every
// row stored must reach the lower tier, clean or not: the write-behind
// buffer only ever receives evicted rows), durable (is the lowest tier).
struct dram_lru {
  static constexpr bool bounded = true, misses = true, dirty_tracking = true, durable = false;
  static constexpr bool all_rows_owed = false;
  static constexpr bool erases = true;
  static constexpr eviction_policy policy = eviction_policy::lru;
  std::unique_ptr<row_store> make(const table_config& t, const temp_dir&, size_t rows) {
    dram_tier_config c;
    c.capacity_bytes = rows == 0 ? size_t{64} << 20 : rows * (t.layout.record_bytes() + 40) + 256;
    c.policy = policy;
    return std::make_unique<dram_tier>(t.layout, c);
  }
};
struct dram_lfu : dram_lru {
  static constexpr eviction_policy policy = eviction_policy::lfu;
  std::unique_ptr<row_store> make(const table_config& t, const temp_dir&, size_t rows) {
    dram_tier_config c;
    c.capacity_bytes = rows == 0 ? size_t{64} << 20 : rows * (t.layout.record_bytes() + 40) + 256;
    c.policy = policy;
    return std::make_unique<dram_tier>(t.layout, c);
  }
};
struct write_behind {
  static constexpr bool bounded = false, misses = true, dirty_tracking = true, durable = false;
  static constexpr bool all_rows_owed = true;
  static constexpr bool erases = true;
  std::unique_ptr<row_store> make(const table_config& t, const temp_dir&, size_t) {
    return std::make_unique<write_behind_buffer>(t.layout);
  }
};
struct lmdb {
  static constexpr bool bounded = false, misses = true, dirty_tracking = false, durable = true;
  static constexpr bool all_rows_owed = false;
  static constexpr bool erases = true;
  std::unique_ptr<row_store> make(const table_config& t, const temp_dir& dir, size_t) {
    return open(t, dir);
  }
  static std::unique_ptr<lmdb_tier> open(const table_config& t, const temp_dir& dir) {
    lmdb_tier_config c;
    c.directory = dir.path() / "lmdb";
    c.table = t.name;
    c.partitions = 32;
    c.map_bytes = size_t{1} << 30;
    auto r = lmdb_tier::open(t.layout, c);
    EXPECT_TRUE(r) << r.err().to_string();
    return r ? std::move(*r) : nullptr;
  }
};
struct chain {
  static constexpr bool bounded = false, misses = false, dirty_tracking = true, durable = true;
  static constexpr bool all_rows_owed = true;  // store() is a cache tier's write-back
  static constexpr bool erases = false;
  std::unique_ptr<row_store> make(const table_config& t, const temp_dir& dir, size_t) {
    dram_tier_config c;
    c.capacity_bytes = 32 * (t.layout.record_bytes() + 40) + 256;  // tiny: rows cycle through LMDB
    return std::make_unique<chain_store>(t, std::make_unique<dram_tier>(t.layout, c),
                                         lmdb::open(t, dir));
  }
};

template <class Factory>
class TierConformance : public ::testing::Test {
 protected:
  table_config table = testing::make_table(dim, optimizer_kind::adagrad);
  temp_dir dir;
  Factory factory;
  std::unique_ptr<row_store> tier = factory.make(table, dir, 0);
  size_t rec = table.layout.record_bytes();

  std::vector<std::byte> lookup(const std::vector<uint64_t>& keys, std::vector<uint32_t>& misses) {
    std::vector<std::byte> out(keys.size() * rec);
    misses.clear();
    auto st = tier->lookup(keys, {out.data(), rec}, misses);
    EXPECT_TRUE(st) << st.err().to_string();
    return out;
  }
  void store(const std::vector<uint64_t>& keys, const std::vector<std::byte>& rows, bool dirty,
             row_buffer* spilled = nullptr) {
    row_buffer local(table.layout);
    auto st = tier->store(keys, {rows.data(), rec}, dirty, spilled ? *spilled : local);
    ASSERT_TRUE(st) << st.err().to_string();
  }
};

using implementations = ::testing::Types<dram_lru, dram_lfu, write_behind, lmdb, chain>;
TYPED_TEST_SUITE(TierConformance, implementations);

TYPED_TEST(TierConformance, UnknownKeysMissOrGetTheInitializerRow) {
  std::vector<uint32_t> misses;
  std::vector<uint64_t> keys{10, 20, 10};
  auto out = this->lookup(keys, misses);
  if (TypeParam::misses) {
    EXPECT_EQ(misses, (std::vector<uint32_t>{0, 1, 2}));
  } else {
    EXPECT_TRUE(misses.empty());
    std::vector<std::byte> init(this->rec);
    for (size_t i = 0; i < keys.size(); ++i) {
      this->table.initial_row(keys[i], init.data());
      EXPECT_TRUE(same_row(this->table.layout, out.data() + i * this->rec, init.data())) << i;
    }
  }
}

TYPED_TEST(TierConformance, StoredRowsComeBackBitExact) {
  std::vector<uint64_t> keys{1, 2, 3, 0xfffffffffffffff0ULL, 77777};
  auto rows = testing::make_records(this->table.layout, keys, 3);
  this->store(keys, rows, true);
  std::vector<uint32_t> misses;
  auto out = this->lookup(keys, misses);
  EXPECT_TRUE(misses.empty());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_TRUE(
        same_row(this->table.layout, out.data() + i * this->rec, rows.data() + i * this->rec))
        << "key " << keys[i];
}

TYPED_TEST(TierConformance, DuplicatesInALookupGetTheSameRow) {
  std::vector<uint64_t> keys{4, 5};
  auto rows = testing::make_records(this->table.layout, keys, 1);
  this->store(keys, rows, true);
  std::vector<uint32_t> misses;
  std::vector<uint64_t> dup{5, 4, 5, 5, 99};
  auto out = this->lookup(dup, misses);
  if (TypeParam::misses) {
    EXPECT_EQ(misses, (std::vector<uint32_t>{4}));
  }
  for (size_t i : {0, 2, 3})
    EXPECT_TRUE(same_row(this->table.layout, out.data() + i * this->rec, rows.data() + this->rec));
  EXPECT_TRUE(same_row(this->table.layout, out.data() + this->rec, rows.data()));
}

TYPED_TEST(TierConformance, OverwriteAndLastCopyInABatchWins) {
  std::vector<uint64_t> keys{8};
  auto v1 = testing::make_records(this->table.layout, keys, 1);
  this->store(keys, v1, true);
  std::vector<uint64_t> twice{8, 8};
  auto v23 = testing::make_records(this->table.layout, twice, 2);
  auto last = testing::make_records(this->table.layout, keys, 3);
  std::memcpy(v23.data() + this->rec, last.data(), this->rec);
  this->store(twice, v23, true);
  std::vector<uint32_t> misses;
  auto out = this->lookup(keys, misses);
  EXPECT_TRUE(same_row(this->table.layout, out.data(), last.data()));
}

// Erasing, for the tiers that erase (the chain deletes by TTL tombstones
// instead, tested in tier_chain_test): a suite of their own, so nothing is
// skipped.
template <class Factory>
class ErasingTier : public TierConformance<Factory> {
  static_assert(Factory::erases);
};
using erasing_implementations = ::testing::Types<dram_lru, dram_lfu, write_behind, lmdb>;
TYPED_TEST_SUITE(ErasingTier, erasing_implementations);

TYPED_TEST(ErasingTier, EraseRemoves) {
  std::vector<uint64_t> keys{1, 2};
  auto rows = testing::make_records(this->table.layout, keys, 1);
  this->store(keys, rows, true);
  std::vector<uint64_t> one{1};
  ASSERT_TRUE(this->tier->erase(one));
  std::vector<uint32_t> misses;
  this->lookup(keys, misses);
  EXPECT_EQ(misses, (std::vector<uint32_t>{0}));
}

// Every dirty row is handed down exactly once (spilled or taken), clean rows
// never; a second take_dirty finds nothing.
TYPED_TEST(TierConformance, DirtyRowsAreWrittenDownExactlyOnce) {
  this->tier.reset();  // one environment per directory: close before reopening
  this->tier = this->factory.make(this->table, this->dir, TypeParam::bounded ? 64 : 0);
  std::vector<uint64_t> dirty_keys, clean_keys;
  for (uint64_t k = 0; k < 200; ++k) (k % 3 == 0 ? clean_keys : dirty_keys).push_back(k);
  row_buffer spilled(this->table.layout);
  // Clean rows first (a promotion from below), then dirty ones in batches
  // that overflow a bounded tier many times.
  this->store(clean_keys, testing::make_records(this->table.layout, clean_keys, 1), false,
              &spilled);
  for (size_t i = 0; i < dirty_keys.size(); i += 16) {
    std::vector<uint64_t> part(dirty_keys.begin() + i,
                               dirty_keys.begin() + std::min(i + 16, dirty_keys.size()));
    this->store(part, testing::make_records(this->table.layout, part, 1), true, &spilled);
  }
  row_buffer taken(this->table.layout);
  ASSERT_TRUE(this->tier->take_dirty(taken));
  std::map<uint64_t, int> written;
  for (uint64_t k : spilled.keys()) ++written[k];
  for (uint64_t k : taken.keys()) ++written[k];
  if (!TypeParam::dirty_tracking) {
    EXPECT_TRUE(written.empty());
    return;
  }
  for (uint64_t k : dirty_keys) EXPECT_EQ(written[k], 1) << "dirty key " << k;
  for (uint64_t k : clean_keys) {
    if (TypeParam::all_rows_owed) {
      EXPECT_EQ(written[k], 1) << "key " << k;
    } else {
      EXPECT_EQ(written.count(k), 0u) << "clean key " << k;
    }
  }
  row_buffer again(this->table.layout);
  ASSERT_TRUE(this->tier->take_dirty(again));
  EXPECT_EQ(again.size(), 0u);
  if (TypeParam::bounded) {
    EXPECT_GT(spilled.size(), 0u);
  }
}

// dump() visits exactly the rows stored; storing the dump into a fresh tier
// reproduces them bit-exactly.
TYPED_TEST(TierConformance, DumpAndReloadRoundTrip) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 50; ++k) keys.push_back(k * 7919);
  auto rows = testing::make_records(this->table.layout, keys, 4);
  this->store(keys, rows, true);
  if (TypeParam::durable) {  // make sure rows are written down before dumping
    row_buffer sink(this->table.layout);
    ASSERT_TRUE(this->tier->take_dirty(sink));
  }
  row_buffer dumped(this->table.layout);
  ASSERT_TRUE(this->tier->dump([&](uint64_t k, const std::byte* r) { dumped.append(k, r); }));
  std::set<uint64_t> seen(dumped.keys().begin(), dumped.keys().end());
  EXPECT_EQ(seen, std::set<uint64_t>(keys.begin(), keys.end()));
  temp_dir other;
  auto fresh = this->factory.make(this->table, other, 0);
  row_buffer none(this->table.layout);
  ASSERT_TRUE(fresh->store(dumped.keys(), dumped.rows(), true, none));
  std::vector<std::byte> out(keys.size() * this->rec);
  std::vector<uint32_t> misses;
  ASSERT_TRUE(fresh->lookup(keys, {out.data(), this->rec}, misses));
  EXPECT_TRUE(misses.empty());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_TRUE(
        same_row(this->table.layout, out.data() + i * this->rec, rows.data() + i * this->rec));
}

// Eviction order, for tiers with a capacity. Scripted so that exact LRU,
// its CLOCK approximation and LFU (ties: oldest tick, then smallest key)
// all name the same victims: fill to capacity C, store one more (evicts
// key 0), touch keys 1..C/2, store C/4 more: the victims are exactly the
// untouched keys C/2+1 .. C/2+C/4, in insertion order.
// The tiers with a capacity limit (the others never evict) have a suite of
// their own.
template <class Factory>
class BoundedTier : public TierConformance<Factory> {
  static_assert(Factory::bounded);
};
using bounded_implementations = ::testing::Types<dram_lru, dram_lfu>;
TYPED_TEST_SUITE(BoundedTier, bounded_implementations);

TYPED_TEST(BoundedTier, EvictionOrderGivesTheExactResidentSet) {
  {
    this->tier.reset();
    auto made = this->factory.make(this->table, this->dir, 64);
    auto* dram = static_cast<dram_tier*>(made.get());
    this->tier = std::move(made);
    const uint64_t c = dram->capacity_rows();
    ASSERT_GE(c, 8u);
    uint32_t tick = 1;
    auto store_range = [&](uint64_t from, uint64_t to) {
      dram->set_tick(tick++);
      std::vector<uint64_t> keys;
      for (uint64_t k = from; k < to; ++k) keys.push_back(k);
      row_buffer spilled(this->table.layout);
      this->store(keys, testing::make_records(this->table.layout, keys, 0), false, &spilled);
    };
    store_range(0, c);
    store_range(c, c + 1);
    EXPECT_FALSE(dram->contains(0));
    dram->set_tick(tick++);
    std::vector<uint64_t> touched;
    for (uint64_t k = 1; k <= c / 2; ++k) touched.push_back(k);
    std::vector<uint32_t> misses;
    this->lookup(touched, misses);
    ASSERT_TRUE(misses.empty());
    const uint64_t m = c / 4;
    store_range(c + 1, c + 1 + m);
    std::set<uint64_t> resident;
    ASSERT_TRUE(dram->dump([&](uint64_t k, const std::byte*) { resident.insert(k); }));
    std::set<uint64_t> expected;
    for (uint64_t k = 1; k < c + 1 + m; ++k) {
      if (k <= c / 2 || k > c / 2 + m) expected.insert(k);
    }
    EXPECT_EQ(resident, expected);
  }
}

}  // namespace
}  // namespace strata
