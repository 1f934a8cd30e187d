// Golden vectors for the four key hashes. The partition hash is part of the
// storage format: if this test fails, existing LMDB files and checkpoints
// would be read with the wrong partitions. Do not update these values.
#include "common/hash.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

namespace strata {
namespace {

struct golden {
  uint64_t key, partition_hash, dram_hash, cache_hash, owner_hash;
  uint32_t partition_4096, set_1000, owner_8;
};

constexpr std::array<golden, 5> vectors{{
    {0x0000000000000000ULL, 0xbf03f63e07094208ULL, 0xc486f40bf8b05d95ULL, 0x18e24389a1cd6b8dULL,
     0x8d61caed4cb4e6d2ULL, 3056, 97, 4},
    {0x0000000000000001ULL, 0x3fc4407d9619b388ULL, 0x70d27f4d014c0761ULL, 0xb49df0f40e6cdb65ULL,
     0x9c05d0ed16d81b88ULL, 1020, 705, 4},
    {0x000000000000002aULL, 0xc5143eafb804821dULL, 0xab42e5b5e2366d7fULL, 0x006043eda7228211ULL,
     0x4bc18a4bcdae9d2cULL, 3153, 1, 2},
    {0xdeadbeefcafef00dULL, 0xf51775e86d99eed0ULL, 0x1dfbf1b16976096eULL, 0xd2dac40815bde71fULL,
     0xcade8971ffc7fed8ULL, 3921, 823, 6},
    {0xffffffffffffffffULL, 0xb1fee7929fef8cb8ULL, 0xd49487b37400a600ULL, 0xb0d77bb055f7f692ULL,
     0x1e22f447bf46ee0eULL, 2847, 690, 0},
}};

TEST(Hash, GoldenVectors) {
  for (const auto& g : vectors) {
    SCOPED_TRACE(g.key);
    EXPECT_EQ(hash_key(g.key, hash_seed::partition), g.partition_hash);
    EXPECT_EQ(dram_slot_hash(g.key), g.dram_hash);
    EXPECT_EQ(hash_key(g.key, hash_seed::cache_set), g.cache_hash);
    EXPECT_EQ(hash_key(g.key, hash_seed::pass_owner), g.owner_hash);
    EXPECT_EQ(partition_of(g.key, 4096), g.partition_4096);
    EXPECT_EQ(cache_set_of(g.key, 1000), g.set_1000);
    EXPECT_EQ(pass_owner_of(g.key, 8), g.owner_8);
  }
}

TEST(Hash, SeedsAreDistinct) {
  const std::array<uint64_t, 4> seeds{hash_seed::partition, hash_seed::dram_slot,
                                      hash_seed::cache_set, hash_seed::pass_owner};
  for (size_t i = 0; i < seeds.size(); ++i)
    for (size_t j = i + 1; j < seeds.size(); ++j) EXPECT_NE(seeds[i], seeds[j]);
}

// Sequential keys spread evenly over partitions (chi-square well below the
// 99.9% quantile for 63 degrees of freedom, ~103).
TEST(Hash, PartitionsAreBalanced) {
  constexpr uint32_t parts = 64;
  constexpr uint32_t n = 64000;
  std::vector<uint32_t> counts(parts, 0);
  for (uint64_t k = 0; k < n; ++k) ++counts[partition_of(k, parts)];
  double chi2 = 0;
  const double expected = double(n) / parts;
  for (uint32_t c : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 103.0);
}

// Independence: keys of one partition still spread over cache sets.
TEST(Hash, OnePartitionSpreadsOverCacheSets) {
  constexpr uint32_t sets = 32;
  std::vector<uint32_t> counts(sets, 0);
  uint32_t taken = 0;
  for (uint64_t k = 0; taken < 32000; ++k) {
    if (partition_of(k, 16) != 3) continue;
    ++counts[cache_set_of(k, sets)];
    ++taken;
  }
  double chi2 = 0;
  const double expected = 32000.0 / sets;
  for (uint32_t c : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 61.1);  // 99.9% quantile, 31 degrees of freedom
}

TEST(Hash, ReduceStaysInRange) {
  for (uint64_t h : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{1} << 63}) {
    EXPECT_LT(reduce(h, 7), 7u);
    EXPECT_EQ(reduce(h, 1), 0u);
  }
}

}  // namespace
}  // namespace strata
