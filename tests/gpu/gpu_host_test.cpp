// Host-side checks of the arithmetic the CUDA kernels run (no device
// needed, so these run in CI): the device XXH3 for 8-byte keys against
// libxxhash, the set mapping against cache_set_of, and the element-wise
// device optimizers against apply_optimizer, bit for bit. The same
// __host__ __device__ functions are compiled into the kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/hash.hpp"
#include "gpu/device_optimizer.hpp"
#include "gpu/xxh3.hpp"
#include "tiers/optimizer.hpp"

namespace strata::gpu {
namespace {

TEST(device_xxh3, MatchesLibxxhashOnManyKeys) {
  std::mt19937_64 rng(42);
  const uint64_t seeds[] = {0, 1, hash_seed::cache_set, hash_seed::partition, ~uint64_t{0}};
  for (uint64_t seed : seeds) {
    for (uint64_t k = 0; k < 20000; ++k) ASSERT_EQ(xxh3_64_key(k, seed), hash_key(k, seed)) << k;
    for (int i = 0; i < 200000; ++i) {
      const uint64_t k = rng();
      ASSERT_EQ(xxh3_64_key(k, seed), hash_key(k, seed)) << k << " seed " << seed;
    }
  }
}

TEST(device_xxh3, SetMappingMatchesCacheSetOf) {
  std::mt19937_64 rng(7);
  for (uint32_t sets : {1u, 2u, 3u, 1024u, 1000003u, 0xffffffffu})
    for (int i = 0; i < 50000; ++i) {
      const uint64_t k = (i & 1) ? rng() : uint64_t(i);
      ASSERT_EQ(device_cache_set_of(k, sets), cache_set_of(k, sets)) << k << " of " << sets;
    }
}

optimizer_params params_of(const optimizer_config& c) {
  optimizer_params p;
  p.kind = static_cast<uint8_t>(c.kind);
  p.learning_rate = c.learning_rate;
  p.l2 = c.l2;
  p.epsilon = c.epsilon;
  p.beta1 = c.beta1;
  p.beta2 = c.beta2;
  p.ftrl_alpha = c.ftrl_alpha;
  p.ftrl_beta = c.ftrl_beta;
  p.ftrl_l1 = c.ftrl_l1;
  p.ftrl_l2 = c.ftrl_l2;
  return p;
}

// Runs the device element functions the way update_kernel does, on the host.
void device_style_apply(const optimizer_config& c, const row_layout& layout, std::byte* record,
                        const float* grad) {
  const optimizer_params p = params_of(c);
  float* w = weights_of(record);
  float* state = state_of(layout, record);
  uint32_t old_step = 0;
  if (p.kind == 2) std::memcpy(&old_step, state + 2 * size_t{layout.dim}, 4);
  const row_prologue pro = make_prologue(p, old_step);
  if (p.kind == 2) std::memcpy(state + 2 * size_t{layout.dim}, &pro.adam_step, 4);
  for (uint32_t j = 0; j < layout.dim; ++j) apply_element(p, pro, layout.dim, j, w, state, grad[j]);
  meta_of(record).version = make_version(incarnation_of(meta_of(record).version),
                                         counter_of(meta_of(record).version) + 1);
}

class device_optimizer_bits : public ::testing::TestWithParam<optimizer_kind> {};

TEST_P(device_optimizer_bits, MatchCpuBitForBitOverManySteps) {
  const optimizer_kind kind = GetParam();
  const row_layout layout{37, kind, true};
  optimizer_config c;
  c.kind = kind;
  c.learning_rate = 0.05f;
  c.l2 = 0.001f;
  c.ftrl_l1 = 0.01f;
  c.ftrl_l2 = 0.1f;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::byte> a(layout.record_bytes()), b(layout.record_bytes());
  for (uint32_t j = 0; j < layout.dim; ++j) weights_of(a.data())[j] = 0.1f * normal(rng);
  init_optimizer_state(c, layout, a.data());
  b = a;
  std::vector<float> g(layout.dim);
  for (int step = 0; step < 300; ++step) {
    for (float& x : g) x = normal(rng) * (step % 7 == 0 ? 100.0f : 0.5f);
    apply_optimizer(c, layout, a.data(), g.data());
    device_style_apply(c, layout, b.data(), g.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(all, device_optimizer_bits,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::adagrad,
                                           optimizer_kind::adam, optimizer_kind::ftrl));

}  // namespace
}  // namespace strata::gpu
