#include "tiers/optimizer.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "common/error.hpp"

// The exact update rules, operation by operation, are in docs/optimizers.md;
// the CUDA backend mirrors them. Every expression below is written with
// explicit parentheses in the documented order and the file is compiled with
// -ffp-contract=off, so no multiply-add is fused: each + - * / and std::sqrt
// is one correctly rounded IEEE operation.
//
// The SGD, Adagrad and Adam loops are vectorized (tiers/CMakeLists.txt: the
// dynamic cost model, and -fno-math-errno, which lets std::sqrt become the
// vector instruction). That changes no bit: every lane does the same
// correctly rounded operations in the same order as the scalar code
// (tests/tiers/optimizer_test.cpp compares wide rows with rows of width 1,
// which run without a vector lane). For it, the rows are __restrict (a
// record's weights, its state and the gradient never overlap) and the
// configuration is read into locals before each loop.

namespace strata {
namespace {

// beta^t by binary exponentiation in double: result and base are squared and
// multiplied in a fixed order (low bit of t first), so any IEEE-754 double
// implementation (CPU or CUDA without FMA contraction) gets the same bits.
// std::pow is not used: its last bit differs between libm implementations.
double power(float beta, uint32_t t) {
  double result = 1.0;
  double base = static_cast<double>(beta);
  while (t != 0) {
    if ((t & 1u) != 0) result = result * base;
    t >>= 1;
    if (t != 0) base = base * base;
  }
  return result;
}

uint32_t load_u32(const float* word) {
  uint32_t v;
  std::memcpy(&v, word, sizeof v);
  return v;
}
void store_u32(float* word, uint32_t v) { std::memcpy(word, &v, sizeof v); }

// g + l2 * w, the regularized gradient of SGD, Adagrad and Adam. Always
// computed (also for l2 = 0) so there is one code path to mirror.
inline float regularized(float g, float w, float l2) { return g + (l2 * w); }

void apply_sgd(const optimizer_config& c, uint32_t dim, float* __restrict w,
               const float* __restrict grad) {
  const float l2 = c.l2, learning_rate = c.learning_rate;
  for (uint32_t i = 0; i < dim; ++i) {
    const float g = regularized(grad[i], w[i], l2);
    w[i] = w[i] - (learning_rate * g);
  }
}

void apply_adagrad(const optimizer_config& c, uint32_t dim, float* __restrict w,
                   float* __restrict acc, const float* __restrict grad) {
  const float l2 = c.l2, learning_rate = c.learning_rate, epsilon = c.epsilon;
  for (uint32_t i = 0; i < dim; ++i) {
    const float g = regularized(grad[i], w[i], l2);
    acc[i] = acc[i] + (g * g);
    w[i] = w[i] - ((learning_rate * g) / (std::sqrt(acc[i]) + epsilon));
  }
}

void apply_adam(const optimizer_config& c, uint32_t dim, float* __restrict w, float* state,
                const float* __restrict grad) {
  float* __restrict m = state;
  float* __restrict v = state + dim;
  float* step_word = state + 2 * size_t{dim};
  uint32_t t = load_u32(step_word);
  if (t != UINT32_MAX) ++t;  // saturates; beta^t is long 0 by then
  store_u32(step_word, t);

  const float bias1 = static_cast<float>(1.0 - power(c.beta1, t));
  const float bias2 = static_cast<float>(1.0 - power(c.beta2, t));
  const float one_minus_beta1 = 1.0f - c.beta1;
  const float one_minus_beta2 = 1.0f - c.beta2;
  const float l2 = c.l2, beta1 = c.beta1, beta2 = c.beta2;
  const float learning_rate = c.learning_rate, epsilon = c.epsilon;
  for (uint32_t i = 0; i < dim; ++i) {
    const float g = regularized(grad[i], w[i], l2);
    m[i] = (beta1 * m[i]) + (one_minus_beta1 * g);
    v[i] = (beta2 * v[i]) + (one_minus_beta2 * (g * g));
    const float m_hat = m[i] / bias1;
    const float v_hat = v[i] / bias2;
    w[i] = w[i] - ((learning_rate * m_hat) / (std::sqrt(v_hat) + epsilon));
  }
}

inline float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// The FTRL-Proximal closed form for one coordinate given z and sqrt(n).
// (Its branch keeps FTRL's loop scalar: GCC does not if-convert it.)
inline float ftrl_weight(const optimizer_config& c, float z, float sqrt_n) {
  if (std::fabs(z) <= c.ftrl_l1) return 0.0f;
  const float numerator = z - (sign_of(z) * c.ftrl_l1);
  const float denominator = ((c.ftrl_beta + sqrt_n) / c.ftrl_alpha) + c.ftrl_l2;
  return -(numerator / denominator);
}

void apply_ftrl(const optimizer_config& c, uint32_t dim, float* __restrict w, float* state,
                const float* __restrict grad) {
  float* __restrict z = state;
  float* __restrict n = state + dim;
  for (uint32_t i = 0; i < dim; ++i) {
    const float g = grad[i];
    const float n_new = n[i] + (g * g);
    const float sqrt_n_new = std::sqrt(n_new);
    const float sigma = (sqrt_n_new - std::sqrt(n[i])) / c.ftrl_alpha;
    z[i] = (z[i] + g) - (sigma * w[i]);
    n[i] = n_new;
    w[i] = ftrl_weight(c, z[i], sqrt_n_new);
  }
}

}  // namespace

void init_optimizer_state(const optimizer_config& config, const row_layout& layout,
                          std::byte* record) {
  if (!layout.with_state) return;
  STRATA_ASSERT(config.kind == layout.optimizer,
                "optimizer config and row layout name different optimizers");
  const uint32_t dim = layout.dim;
  const float* w = weights_of(record);
  float* state = state_of(layout, record);
  switch (layout.optimizer) {
    case optimizer_kind::sgd:
      return;
    case optimizer_kind::adagrad:
      for (uint32_t i = 0; i < dim; ++i) state[i] = config.initial_accumulator;
      return;
    case optimizer_kind::adam:
      for (uint32_t i = 0; i < 2 * dim; ++i) state[i] = 0.0f;
      store_u32(state + 2 * size_t{dim}, 0);
      return;
    case optimizer_kind::ftrl: {
      // n = 0, so the closed form's denominator is (beta + sqrt(0)) / alpha
      // + l2, computed exactly as ftrl_weight does; z inverts it.
      const float denominator =
          ((config.ftrl_beta + std::sqrt(0.0f)) / config.ftrl_alpha) + config.ftrl_l2;
      float* z = state;
      float* n = state + dim;
      for (uint32_t i = 0; i < dim; ++i) {
        z[i] = -((w[i] * denominator) + (sign_of(w[i]) * config.ftrl_l1));
        n[i] = 0.0f;
      }
      return;
    }
  }
  STRATA_ASSERT(false, "unknown optimizer kind");
}

void apply_optimizer(const optimizer_config& config, const row_layout& layout, std::byte* record,
                     const float* grad) {
  STRATA_ASSERT(layout.with_state, "apply_optimizer needs a layout with optimizer state");
  STRATA_ASSERT(config.kind == layout.optimizer,
                "optimizer config and row layout name different optimizers");
  float* w = weights_of(record);
  float* state = state_of(layout, record);
  switch (layout.optimizer) {
    case optimizer_kind::sgd:
      apply_sgd(config, layout.dim, w, grad);
      break;
    case optimizer_kind::adagrad:
      apply_adagrad(config, layout.dim, w, state, grad);
      break;
    case optimizer_kind::adam:
      apply_adam(config, layout.dim, w, state, grad);
      break;
    case optimizer_kind::ftrl:
      apply_ftrl(config, layout.dim, w, state, grad);
      break;
    default:
      STRATA_ASSERT(false, "unknown optimizer kind");
  }
  row_meta& meta = meta_of(record);
  meta.version = make_version(incarnation_of(meta.version), counter_of(meta.version) + 1);
}

uint32_t adam_step(const row_layout& layout, const std::byte* record) {
  STRATA_ASSERT(layout.optimizer == optimizer_kind::adam && layout.with_state,
                "adam_step needs an Adam layout with state");
  return load_u32(state_of(layout, record) + 2 * size_t{layout.dim});
}

}  // namespace strata
