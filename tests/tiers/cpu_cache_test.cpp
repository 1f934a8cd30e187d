// Runs the cache_backend conformance suite (cache_conformance.hpp) against
// the CPU backend, plus checks specific to it.
#include "tiers/cpu_cache.hpp"

#include <gtest/gtest.h>

#include "tests/tiers/cache_conformance.hpp"

namespace strata::testing {
namespace {

struct cpu_cache_factory {
  static std::string unavailable() { return {}; }
  static std::unique_ptr<cache_backend> make(row_layout layout, cache_geometry geometry) {
    return std::make_unique<cpu_cache>(layout, geometry);
  }
  using memory = host_memory;
};

}  // namespace

// Every backend is one line like this one (the CUDA one in its own test).
INSTANTIATE_TYPED_TEST_SUITE_P(cpu, cache_conformance, cpu_cache_factory);

namespace {

TEST(cpu_cache, DoneRunsBeforeTheCallReturns) {
  cpu_cache cache(row_layout{4, optimizer_kind::sgd, true}, cache_geometry{2, 1});
  const uint64_t keys[1] = {1};
  std::byte rows[64];
  uint32_t misses[1];
  cache_counts counts;
  bool ran = false;
  cache.query(host_span(std::span<const uint64_t>(keys)), host_span(std::span<std::byte>(rows)),
              host_span(std::span<uint32_t>(misses)), counts, [&](status st) {
                EXPECT_TRUE(st);
                ran = true;
              });
  EXPECT_TRUE(ran);
  EXPECT_EQ(counts.misses, 1u);
}

TEST(cpu_cache, ReportsItsGeometryAndLayout) {
  const row_layout layout{8, optimizer_kind::adam, true};
  cpu_cache cache(layout, cache_geometry{16, 2});
  EXPECT_EQ(cache.memory(), memory_kind::host);
  EXPECT_EQ(cache.layout(), layout);
  EXPECT_EQ(cache.geometry().set_slots(), 64u);
  EXPECT_EQ(cache.geometry().capacity_rows(), 1024u);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace strata::testing
