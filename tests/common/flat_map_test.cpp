// common/flat_map.hpp against std::unordered_map: random inserts, finds and
// erases (backward-shift deletion keeps every probe run reachable), clear
// keeping the capacity, and no allocation once grown.
#include "common/flat_map.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace strata {
namespace {

TEST(FlatMap, MatchesUnorderedMapUnderRandomInsertsAndErases) {
  std::mt19937_64 rng(7);
  flat_map<uint64_t> flat;
  std::unordered_map<uint64_t, uint64_t> ref;
  for (int step = 0; step < 200000; ++step) {
    // A small key space, so erases hit and probe runs wrap and collide.
    const uint64_t key = rng() % 3000;
    switch (rng() % 4) {
      case 0:
      case 1: {
        const uint64_t value = rng();
        auto [v, inserted] = flat.try_emplace(key, value);
        auto [it, ref_inserted] = ref.try_emplace(key, value);
        ASSERT_EQ(inserted, ref_inserted) << "key " << key;
        ASSERT_EQ(*v, it->second) << "key " << key;
        break;
      }
      case 2:
        ASSERT_EQ(flat.erase(key), ref.erase(key) == 1) << "key " << key;
        break;
      default: {
        const uint64_t* v = flat.find(key);
        auto it = ref.find(key);
        ASSERT_EQ(v != nullptr, it != ref.end()) << "key " << key;
        if (v) ASSERT_EQ(*v, it->second);
      }
    }
    ASSERT_EQ(flat.size(), ref.size());
  }
  size_t seen = 0;
  flat.for_each([&](uint64_t k, uint64_t v) {
    ++seen;
    ASSERT_EQ(ref.at(k), v);
  });
  EXPECT_EQ(seen, ref.size());
}

TEST(FlatMap, ClearKeepsCapacityAndEmpties) {
  flat_map<uint32_t> m;
  for (uint64_t k = 0; k < 1000; ++k) m[k * 4096] = static_cast<uint32_t>(k);
  const size_t capacity = m.capacity();
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.capacity(), capacity);
  for (uint64_t k = 0; k < 1000; ++k) EXPECT_FALSE(m.contains(k * 4096));
  for (uint64_t k = 0; k < 1000; ++k) EXPECT_TRUE(m.try_emplace(k + 1, 1).second);
  EXPECT_EQ(m.capacity(), capacity);
}

TEST(FlatMap, ZeroAndLargestKeysAreOrdinaryKeys) {
  flat_map<int> m;
  EXPECT_TRUE(m.try_emplace(0, 1).second);
  EXPECT_TRUE(m.try_emplace(~uint64_t{0}, 2).second);
  EXPECT_EQ(*m.find(0), 1);
  EXPECT_EQ(*m.find(~uint64_t{0}), 2);
  EXPECT_TRUE(m.erase(0));
  EXPECT_EQ(m.find(0), nullptr);
  EXPECT_EQ(*m.find(~uint64_t{0}), 2);
}

}  // namespace
}  // namespace strata
