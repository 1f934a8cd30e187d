// Count-min sketch: never under-estimates, admits at the threshold, ages by
// halving, and round-trips its counters.
#include "tiers/count_min.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace strata {
namespace {

TEST(CountMin, RoundsWidthUpToAPowerOfTwo) {
  count_min_sketch sketch(1000, 4);
  EXPECT_EQ(sketch.counters().size(), 1024u * 4);
  EXPECT_EQ(sketch.memory_bytes(), 1024u * 4 * sizeof(uint16_t));
  count_min_sketch one(1, 1);
  EXPECT_EQ(one.counters().size(), 1u);
}

TEST(CountMin, NeverUnderEstimates) {
  // A narrow sketch with many keys: collisions are certain.
  count_min_sketch sketch(256, 4);
  std::mt19937_64 rng(5);
  std::unordered_map<uint64_t, uint32_t> truth;
  for (int i = 0; i < 20000; ++i) {
    // Skewed: a few hot keys, a long tail.
    const uint64_t key = (rng() % 4 == 0) ? rng() % 10 : rng() % 5000;
    const uint32_t got = sketch.add(key);
    EXPECT_GE(got, ++truth[key]);
  }
  size_t exact = 0;
  for (auto& [key, count] : truth) {
    EXPECT_GE(sketch.estimate(key), count) << key;
    exact += sketch.estimate(key) == count;
  }
  EXPECT_EQ(sketch.estimate(123456789), sketch.estimate(123456789));  // pure
  EXPECT_GT(exact, 0u);
}

TEST(CountMin, WideSketchIsExactForFewKeys) {
  count_min_sketch sketch(1 << 16, 4);
  for (uint64_t key = 0; key < 100; ++key)
    for (uint64_t n = 0; n <= key % 7; ++n) sketch.add(key * 0x9e3779b97f4a7c15ULL);
  for (uint64_t key = 0; key < 100; ++key)
    EXPECT_EQ(sketch.estimate(key * 0x9e3779b97f4a7c15ULL), key % 7 + 1);
  EXPECT_EQ(sketch.estimate(42), 0u);
}

TEST(CountMin, AdmitsAtTheThreshold) {
  constexpr uint32_t threshold = 3;
  count_min_sketch sketch(4096, 4);
  const uint64_t key = 0xfeedfacecafebeefULL;
  EXPECT_LT(sketch.add(key), threshold);
  EXPECT_LT(sketch.add(key), threshold);
  EXPECT_EQ(sketch.add(key), threshold);  // the third sighting admits
  EXPECT_GE(sketch.estimate(key), threshold);
  EXPECT_EQ(sketch.add(key), threshold + 1);
}

TEST(CountMin, CountersSaturate) {
  count_min_sketch sketch(16, 2);
  for (int i = 0; i < 70000; ++i) sketch.add(7);
  EXPECT_EQ(sketch.estimate(7), 65535u);
  EXPECT_EQ(sketch.add(7), 65535u);
}

TEST(CountMin, HalveAgesEveryCounter) {
  count_min_sketch sketch(1024, 3);
  for (int i = 0; i < 9; ++i) sketch.add(1);
  for (int i = 0; i < 4; ++i) sketch.add(2);
  sketch.add(3);
  sketch.halve();
  EXPECT_EQ(sketch.estimate(1), 4u);
  EXPECT_EQ(sketch.estimate(2), 2u);
  EXPECT_EQ(sketch.estimate(3), 0u);
  // After ageing, a key needs fresh sightings to reach the threshold again.
  EXPECT_EQ(sketch.add(3), 1u);
  for (uint16_t c : sketch.counters()) EXPECT_LE(c, 4u);
}

TEST(CountMin, LoadRestoresCounters) {
  count_min_sketch a(512, 4);
  for (uint64_t k = 0; k < 300; ++k)
    for (uint64_t n = 0; n < k % 5; ++n) a.add(k);
  count_min_sketch b(512, 4);
  b.load(a.counters());
  for (uint64_t k = 0; k < 300; ++k) EXPECT_EQ(b.estimate(k), a.estimate(k));
  EXPECT_EQ(b.counters(), a.counters());
}

}  // namespace
}  // namespace strata
