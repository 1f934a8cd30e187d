// lmdb_tier's staged reads (the shard's reader hands rows it read off the
// shard's thread to the chain's handle): a lookup serves staged keys without
// a read transaction, in the caller's positions, mixed with keys it reads;
// staged entries are used once; a write through the handle unstages.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata {
namespace {

using testing::make_records;
using testing::temp_dir;

const row_layout layout8{8, optimizer_kind::adagrad, true};

struct staged_fixture : ::testing::Test {
  temp_dir dir;
  std::unique_ptr<lmdb_tier> tier;
  size_t rb = layout8.record_bytes();
  std::vector<uint64_t> stored;  // keys 0..199
  std::vector<std::byte> old_rows, new_rows;
  void SetUp() override {
    lmdb_tier_config c;
    c.directory = dir.path();
    c.map_bytes = size_t{1} << 28;
    auto t = lmdb_tier::open(layout8, c);
    ASSERT_TRUE(t) << t.err().to_string();
    tier = std::move(*t);
    stored.resize(200);
    std::iota(stored.begin(), stored.end(), 0);
    old_rows = make_records(layout8, stored, 1);
    new_rows = make_records(layout8, stored, 2);
    row_buffer none(layout8);
    ASSERT_TRUE(tier->store(stored, {old_rows.data(), rb}, true, none));
  }
  const std::byte* old_row(uint64_t k) { return old_rows.data() + k * rb; }
  const std::byte* new_row(uint64_t k) { return new_rows.data() + k * rb; }
};

// Small and large (sorted two-pass) batches: staged rows, staged "not
// stored", repeats of a staged key, and keys read from LMDB, each in place.
TEST_F(staged_fixture, LookupServesStagedKeysInPlaceAndReadsTheRest) {
  for (size_t n : {8u, 150u}) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < n; ++k) keys.push_back(k);
    keys.push_back(3);     // a repeat of a staged key
    keys.push_back(5000);  // never stored, staged as such
    tier->stage(3, new_row(3));
    tier->stage(5, nullptr);  // stored, but staged as not stored: the stage wins
    tier->stage(5000, nullptr);
    const auto before = tier->stats();
    std::vector<std::byte> out(keys.size() * rb);
    std::vector<uint32_t> misses;
    ASSERT_TRUE(tier->lookup(keys, {out.data(), rb}, misses));
    EXPECT_EQ(misses, (std::vector<uint32_t>{5, static_cast<uint32_t>(n + 1)})) << n << " keys";
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == 5 || keys[i] == 5000) continue;
      const std::byte* want = keys[i] == 3 ? new_row(3) : old_row(keys[i]);
      EXPECT_EQ(std::memcmp(out.data() + i * rb, want, rb), 0) << "key " << keys[i] << ", " << n;
    }
    EXPECT_EQ(tier->stats().read_transactions, before.read_transactions + 1);
    EXPECT_EQ(tier->stats().staged_hits, before.staged_hits + 4);
    EXPECT_EQ(tier->staged_rows(), 0u);  // used once
  }
}

TEST_F(staged_fixture, OnlyStagedKeysNeedNoReadTransaction) {
  tier->stage(7, new_row(7));
  const auto before = tier->stats();
  std::vector<uint64_t> keys{7};
  std::vector<std::byte> out(rb);
  std::vector<uint32_t> misses;
  ASSERT_TRUE(tier->lookup(keys, {out.data(), rb}, misses));
  EXPECT_TRUE(misses.empty());
  EXPECT_EQ(std::memcmp(out.data(), new_row(7), rb), 0);
  EXPECT_EQ(tier->stats().read_transactions, before.read_transactions);
}

TEST_F(staged_fixture, WritesThroughTheHandleUnstageTheirKeys) {
  tier->stage(1, old_row(1));
  tier->stage(2, old_row(2));
  tier->stage(4, old_row(4));
  row_buffer none(layout8);
  std::vector<uint64_t> one{1};
  ASSERT_TRUE(tier->store(one, {new_row(1), rb}, true, none));
  std::vector<uint64_t> two{2};
  std::vector<uint64_t> version{make_version(0, 1000)};
  ASSERT_TRUE(tier->store_tombstones(two, version));
  EXPECT_FALSE(tier->is_staged(1));
  EXPECT_FALSE(tier->is_staged(2));
  EXPECT_TRUE(tier->is_staged(4));
  std::vector<uint64_t> keys{1, 2};
  std::vector<std::byte> out(2 * rb);
  std::vector<uint32_t> misses;
  ASSERT_TRUE(tier->lookup(keys, {out.data(), rb}, misses));
  EXPECT_EQ(misses, (std::vector<uint32_t>{1}));  // the tombstone, not the staged row
  EXPECT_EQ(std::memcmp(out.data(), new_row(1), rb), 0);
  tier->unstage(std::vector<uint64_t>{4});
  EXPECT_EQ(tier->staged_rows(), 0u);
}

}  // namespace
}  // namespace strata
