// The cache_backend conformance suite against the CUDA backend, and a
// CPU-vs-GPU equivalence test: one random sequence of inserts, queries,
// updates and dumps on cpu_cache and cuda_cache with the same geometry must
// give the same counts, misses, evictions and resident keys; rows equal bit
// for bit for SGD, within 1e-6 relative for Adagrad and Adam. Everything
// skips, printing why, without a usable CUDA device.
#include "gpu/cuda_cache.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "gpu/device_memory.hpp"
#include "gpu/staged_cache.hpp"
#include "tests/tiers/cache_conformance.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::testing {
namespace {

struct cuda_cache_factory {
  static std::string unavailable() { return gpu::unavailable_reason(); }
  static std::unique_ptr<cache_backend> make(row_layout layout, cache_geometry geometry) {
    auto c = gpu::cuda_cache::create(layout, geometry);
    if (!c) throw std::runtime_error(c.err().to_string());  // fails the test
    return std::move(*c);
  }
  using memory = gpu::device_memory;
};

struct cpu_factory {
  static std::string unavailable() { return {}; }
  static std::unique_ptr<cache_backend> make(row_layout layout, cache_geometry geometry) {
    return std::make_unique<cpu_cache>(layout, geometry);
  }
  using memory = host_memory;
};

// The CUDA cache behind host buffers (what the cache-tier actor uses with
// `caches.backend: gpu`), through the same suite with host memory.
struct staged_cache_factory {
  static std::string unavailable() { return gpu::unavailable_reason(); }
  static std::unique_ptr<cache_backend> make(row_layout layout, cache_geometry geometry) {
    auto c = gpu::staged_cache::create(layout, geometry, 64);  // grows on demand
    if (!c) throw std::runtime_error(c.err().to_string());
    return std::move(*c);
  }
  using memory = host_memory;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(cuda, cache_conformance, cuda_cache_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(staged, cache_conformance, staged_cache_factory);

namespace {

// Rows equal: metadata exactly, floats bit for bit (exact) or within
// 1e-6 relative; Adam's step word exactly.
void expect_rows_equal(const row_layout& layout, const std::byte* a, const std::byte* b, bool exact,
                       const std::string& what) {
  ASSERT_EQ(std::memcmp(a, b, sizeof(row_meta)), 0) << what << ": metadata";
  const uint32_t words = layout.value_words();
  const uint32_t step_word =
      layout.optimizer == optimizer_kind::adam ? layout.dim + 2 * layout.dim : words;
  for (uint32_t i = 0; i < words; ++i) {
    const std::byte* pa = a + sizeof(row_meta) + 4 * size_t{i};
    const std::byte* pb = b + sizeof(row_meta) + 4 * size_t{i};
    if (exact || i == step_word) {
      ASSERT_EQ(std::memcmp(pa, pb, 4), 0) << what << ": word " << i;
      continue;
    }
    float x, y;
    std::memcpy(&x, pa, 4);
    std::memcpy(&y, pb, 4);
    ASSERT_LE(std::fabs(x - y), 1e-6f * std::max(std::fabs(x), std::fabs(y)) + 1e-30f)
        << what << ": word " << i << " cpu " << x << " gpu " << y;
  }
}

class cpu_vs_gpu : public ::testing::TestWithParam<optimizer_kind> {
 protected:
  void SetUp() override {
    const std::string why = gpu::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(cpu_vs_gpu, RandomSequenceGivesTheSameKeysAndRows) {
  const optimizer_kind kind = GetParam();
  const bool exact = kind == optimizer_kind::sgd;
  const row_layout layout{24, kind, true};
  const cache_geometry geometry{16, 2};  // 1024 slots
  cache_harness<cpu_factory> cpu(layout, geometry);
  cache_harness<cuda_cache_factory> gpu(layout, geometry);
  optimizer_config opt;
  opt.kind = kind;
  opt.learning_rate = 0.05f;
  opt.l2 = 0.001f;
  const size_t rb = layout.record_bytes();
  std::mt19937_64 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint64_t key_range = 3000;  // ~3x capacity: sets overflow and evict

  for (int step = 0; step < 400; ++step) {
    const std::string at = "step " + std::to_string(step);
    const size_t n = rng() % 300;
    std::vector<uint64_t> keys(n);
    for (auto& k : keys) k = rng() % key_range;
    switch (rng() % 4) {
      case 0:
      case 1: {
        auto rows = make_records(layout, keys, static_cast<uint32_t>(rng() % 5));
        for (size_t i = 0; i < n; ++i) {
          init_optimizer_state(opt, layout, rows.data() + i * rb);
          meta_of(rows.data() + i * rb).tick = static_cast<uint32_t>(rng() % 4);
        }
        const bool dirty = rng() % 2;
        auto a = cpu.insert(keys, rows, dirty);
        auto b = gpu.insert(keys, rows, dirty);
        ASSERT_TRUE(a.st && b.st) << at << (b.st ? "" : b.st.err().to_string());
        ASSERT_EQ(a.counts.skipped, b.counts.skipped) << at;
        ASSERT_EQ(a.counts.replaced, b.counts.replaced) << at;
        ASSERT_EQ(a.counts.evicted, b.counts.evicted) << at;
        ASSERT_EQ(a.evicted_keys, b.evicted_keys) << at;
        for (size_t e = 0; e < a.counts.evicted; ++e)
          expect_rows_equal(layout, a.evicted_rows.data() + e * rb, b.evicted_rows.data() + e * rb,
                            exact, at + " evicted");
        break;
      }
      case 2: {
        auto a = cpu.query(keys);
        auto b = gpu.query(keys);
        ASSERT_TRUE(a.st && b.st) << at << (b.st ? "" : b.st.err().to_string());
        ASSERT_EQ(a.counts.hits, b.counts.hits) << at;
        ASSERT_EQ(a.misses, b.misses) << at;
        std::vector<uint8_t> missed(n, 0);
        for (uint32_t i : a.misses) missed[i] = 1;
        for (size_t i = 0; i < n; ++i)
          if (!missed[i])
            expect_rows_equal(layout, a.rows.data() + i * rb, b.rows.data() + i * rb, exact,
                              at + " query");
        break;
      }
      case 3: {
        std::vector<float> grads(n * layout.dim);
        for (auto& g : grads) g = normal(rng);
        auto a = cpu.update(keys, grads, opt);
        auto b = gpu.update(keys, grads, opt);
        ASSERT_TRUE(a.st && b.st) << at << (b.st ? "" : b.st.err().to_string());
        ASSERT_EQ(a.counts.hits, b.counts.hits) << at;
        ASSERT_EQ(a.misses, b.misses) << at;
        break;
      }
    }
    ASSERT_EQ(cpu.cache().size(), gpu.cache().size()) << at;
    if (step % 50 == 49) {
      const bool clear_dirty = rng() % 2;
      auto a = cpu.dump(false, clear_dirty);
      auto b = gpu.dump(false, clear_dirty);
      ASSERT_TRUE(a.st && b.st) << at;
      ASSERT_EQ(a.keys, b.keys) << at;
      for (size_t i = 0; i < a.keys.size(); ++i)
        expect_rows_equal(layout, a.rows.data() + i * rb, b.rows.data() + i * rb, exact,
                          at + " dump");
    }
  }
  auto a = cpu.dump(true, false);
  auto b = gpu.dump(true, false);
  ASSERT_TRUE(a.st && b.st);
  ASSERT_EQ(a.keys, b.keys);
  for (size_t i = 0; i < a.keys.size(); ++i)
    expect_rows_equal(layout, a.rows.data() + i * rb, b.rows.data() + i * rb, exact, "final");
}

INSTANTIATE_TEST_SUITE_P(optimizers, cpu_vs_gpu,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::adagrad,
                                           optimizer_kind::adam));

TEST(cuda_cache, CreateWithoutADeviceNamesTheReason) {
  const std::string why = gpu::unavailable_reason();
  auto c = gpu::cuda_cache::create(row_layout{4, optimizer_kind::sgd, true}, cache_geometry{2, 1});
  if (why.empty()) {
    ASSERT_TRUE(c) << c.err().to_string();
    EXPECT_EQ((*c)->memory(), memory_kind::device);
    GTEST_SKIP() << "a device is present: nothing to check here";
  }
  ASSERT_FALSE(c);
  EXPECT_EQ(c.err().code(), errc::unavailable);
  EXPECT_NE(c.err().message().find("cudaGetDeviceCount"), std::string::npos) << c.err().message();
}

}  // namespace
}  // namespace strata::testing
