// The counter-based initializer (tiers/initializer.hpp, docs/optimizers.md).
//
// The golden values below are a pinned format: every row never written yet
// is defined by them, on every shard, CPU and GPU. They were computed once
// from the documented recipe (and cross-checked with an independent Python
// transcription of it). If one of these tests fails, the initializer changed
// and existing tables would silently get different initial rows — fix the
// code, do not update the literals.
#include "tiers/initializer.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace strata {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

std::vector<float> init(const initializer_config& c, uint64_t key, uint32_t dim) {
  std::vector<float> out(dim);
  initialize_weights(c, key, out.data(), dim);
  return out;
}

initializer_config config(initializer_kind kind, uint64_t seed = 7) {
  initializer_config c;
  c.kind = kind;
  c.seed = seed;
  return c;
}

// --- pinned format ----------------------------------------------------------

TEST(InitializerGolden, RandomWords) {
  EXPECT_EQ(init_random_word(0, 0, 0), 0x568a9b0b1a2c05ecULL);
  EXPECT_EQ(init_random_word(0, 0, 1), 0x44e5b8b147ef718bULL);
  EXPECT_EQ(init_random_word(7, 42, 3), 0x8fa72d597832f2edULL);
  EXPECT_EQ(init_random_word(~0ULL, ~0ULL, ~0ULL), 0x8db4c6095b35a8aeULL);
}

TEST(InitializerGolden, Uniform) {
  auto c = config(initializer_kind::uniform);  // [-0.05, 0.05)
  const auto w = init(c, 42, 4);
  EXPECT_EQ(bits(w[0]), 0x3d178ba1u);  //  0.0369983949
  EXPECT_EQ(bits(w[1]), 0x3c8b506eu);  //  0.0170061253
  EXPECT_EQ(bits(w[2]), 0xbc86cef6u);  // -0.0164561085
  EXPECT_EQ(bits(w[3]), 0x3bc85bd8u);  //  0.00611446425
}

TEST(InitializerGolden, Normal) {
  auto c = config(initializer_kind::normal);
  c.normal_stddev = 0.01f;
  const auto w = init(c, 42, 4);
  EXPECT_EQ(bits(w[0]), 0xbbe74a3du);  // -0.00705841044
  EXPECT_EQ(bits(w[1]), 0x3c3b3ccdu);  //  0.0114280703
  EXPECT_EQ(bits(w[2]), 0x3b8c63d7u);  //  0.00428436277
  EXPECT_EQ(bits(w[3]), 0x3c20847bu);  //  0.00979721081
  // With s = 1 the value is the exact Irwin-Hall sample (k / 2^17).
  c.normal_stddev = 1.0f;
  const auto z = init(c, 42, 4);
  EXPECT_EQ(z[0], -92516.0f / 131072.0f);  // -0.705841064453125
  EXPECT_EQ(z[1], 149790.0f / 131072.0f);  //  1.1428070068359375
  EXPECT_EQ(z[2], 56156.0f / 131072.0f);   //  0.428436279296875
  EXPECT_EQ(z[3], 128414.0f / 131072.0f);  //  0.9797210693359375
}

// --- properties ---------------------------------------------------------------

TEST(Initializer, ZerosIsPositiveZero) {
  std::vector<float> w(33, 1.0f);
  initialize_weights(config(initializer_kind::zeros), 5, w.data(), 33);
  for (float x : w) EXPECT_EQ(bits(x), 0u);
}

TEST(Initializer, SameKeySameBits) {
  for (auto kind : {initializer_kind::uniform, initializer_kind::normal}) {
    const auto c = config(kind);
    const auto a = init(c, 123456789, 64);
    const auto b = init(c, 123456789, 64);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
    // A shorter row is a prefix of a longer one: element j depends only on j.
    const auto prefix = init(c, 123456789, 10);
    EXPECT_EQ(std::memcmp(a.data(), prefix.data(), 4 * prefix.size()), 0);
  }
}

TEST(Initializer, DifferentKeysAndSeedsDiffer) {
  for (auto kind : {initializer_kind::uniform, initializer_kind::normal}) {
    const auto base = init(config(kind, 7), 1, 16);
    const auto other_key = init(config(kind, 7), 2, 16);
    const auto other_seed = init(config(kind, 8), 1, 16);
    int same_key = 0, same_seed = 0, same_neighbour = 0;
    for (size_t j = 0; j < 16; ++j) {
      same_key += base[j] == other_key[j];
      same_seed += base[j] == other_seed[j];
      if (j > 0) same_neighbour += base[j] == base[j - 1];
    }
    EXPECT_EQ(same_key, 0);
    EXPECT_EQ(same_seed, 0);
    EXPECT_EQ(same_neighbour, 0);
  }
  EXPECT_NE(init_random_word(1, 2, 3), init_random_word(2, 1, 3));
  EXPECT_NE(init_random_word(0, 0, 1), init_random_word(0, 1, 0));
}

TEST(Initializer, UniformRangeMeanAndVariance) {
  auto c = config(initializer_kind::uniform);
  c.uniform_low = -0.5f;
  c.uniform_high = 1.5f;
  constexpr int keys = 1000, dim = 100;  // 100k samples
  double sum = 0, sum_sq = 0;
  std::vector<float> w(dim);
  for (uint64_t k = 0; k < keys; ++k) {
    initialize_weights(c, k, w.data(), dim);
    for (float x : w) {
      ASSERT_GE(x, -0.5f);
      ASSERT_LT(x, 1.5f);
      sum += x;
      sum_sq += double{x} * x;
    }
  }
  const double n = double{keys} * dim;
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.01);        // sd of the mean: 0.0018
  EXPECT_NEAR(var, 4.0 / 12.0, 0.01);  // (b - a)^2 / 12
}

TEST(Initializer, UniformDegenerateInterval) {
  auto c = config(initializer_kind::uniform);
  c.uniform_low = c.uniform_high = 0.25f;
  for (float x : init(c, 9, 8)) EXPECT_EQ(x, 0.25f);
}

TEST(Initializer, NormalMeanStddevAndBound) {
  auto c = config(initializer_kind::normal);
  c.normal_stddev = 0.01f;
  constexpr int keys = 1000, dim = 100;
  double sum = 0, sum_sq = 0;
  std::vector<float> w(dim);
  for (uint64_t k = 0; k < keys; ++k) {
    initialize_weights(c, k * 7919, w.data(), dim);
    for (float x : w) {
      ASSERT_LE(std::fabs(x), 6 * 0.01f);
      sum += x;
      sum_sq += double{x} * x;
    }
  }
  const double n = double{keys} * dim;
  const double mean = sum / n;
  const double sd = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.0002);  // sd of the mean: 0.00003
  EXPECT_NEAR(sd, 0.01, 0.0002);   // 2 %
}

}  // namespace
}  // namespace strata
