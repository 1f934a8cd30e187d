// The optimizers of tiers/optimizer.cpp, element by element, for host and
// device (docs/optimizers.md has the rules). The CUDA update kernel runs
// them with a warp's lanes striding over a row's elements; the arithmetic
// per element is the CPU's, in the same order, each + - * / and sqrt one
// correctly rounded IEEE operation: on the device through the _rn
// intrinsics (never contracted into an FMA, whatever -fmad says), on the
// host through plain operators (compile with -ffp-contract=off, as
// strata_tiers is). tests/gpu/device_optimizer_test.cpp checks them on the
// host against apply_optimizer, bit for bit.
//
// Thread-safety: pure functions over caller-owned words.
#pragma once

#include <cstdint>
#include <cstring>

#include "gpu/hd.hpp"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace strata::gpu {

// optimizer_config (tiers/optimizer.hpp) as plain words for a kernel.
struct optimizer_params {
  uint8_t kind = 0;  // optimizer_kind: 0 sgd, 1 adagrad, 2 adam, 3 ftrl
  float learning_rate = 0;
  float l2 = 0;
  float epsilon = 0;
  float beta1 = 0;
  float beta2 = 0;
  float ftrl_alpha = 0;
  float ftrl_beta = 0;
  float ftrl_l1 = 0;
  float ftrl_l2 = 0;
};

namespace fp {
#if defined(__CUDA_ARCH__)
STRATA_HD float add(float a, float b) { return __fadd_rn(a, b); }
STRATA_HD float sub(float a, float b) { return __fsub_rn(a, b); }
STRATA_HD float mul(float a, float b) { return __fmul_rn(a, b); }
STRATA_HD float div(float a, float b) { return __fdiv_rn(a, b); }
STRATA_HD float sqrt(float a) { return __fsqrt_rn(a); }
STRATA_HD double dmul(double a, double b) { return __dmul_rn(a, b); }
STRATA_HD double dsub(double a, double b) { return __dsub_rn(a, b); }
STRATA_HD float abs(float a) { return fabsf(a); }
#else
STRATA_HD float add(float a, float b) { return a + b; }
STRATA_HD float sub(float a, float b) { return a - b; }
STRATA_HD float mul(float a, float b) { return a * b; }
STRATA_HD float div(float a, float b) { return a / b; }
STRATA_HD float sqrt(float a) { return std::sqrt(a); }
STRATA_HD double dmul(double a, double b) { return a * b; }
STRATA_HD double dsub(double a, double b) { return a - b; }
STRATA_HD float abs(float a) { return std::fabs(a); }
#endif
}  // namespace fp

// beta^t in double by binary exponentiation (optimizer.cpp: power).
STRATA_HD double power_d(float beta, uint32_t t) {
  double result = 1.0;
  double base = static_cast<double>(beta);
  while (t != 0) {
    if ((t & 1u) != 0) result = fp::dmul(result, base);
    t >>= 1;
    if (t != 0) base = fp::dmul(base, base);
  }
  return result;
}

// Per-row values computed once before the elements (Adam's bias terms).
struct row_prologue {
  uint32_t adam_step = 0;  // the new step counter, to be stored
  float bias1 = 1, bias2 = 1, one_minus_beta1 = 0, one_minus_beta2 = 0;
};

// `old_step` is Adam's step word as read from the row (ignored otherwise).
STRATA_HD row_prologue make_prologue(const optimizer_params& c, uint32_t old_step) {
  row_prologue p;
  if (c.kind != 2) return p;
  uint32_t t = old_step;
  if (t != 0xffffffffu) ++t;
  p.adam_step = t;
  p.bias1 = static_cast<float>(fp::dsub(1.0, power_d(c.beta1, t)));
  p.bias2 = static_cast<float>(fp::dsub(1.0, power_d(c.beta2, t)));
  p.one_minus_beta1 = fp::sub(1.0f, c.beta1);
  p.one_minus_beta2 = fp::sub(1.0f, c.beta2);
  return p;
}

STRATA_HD float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

STRATA_HD float ftrl_weight(const optimizer_params& c, float z, float sqrt_n) {
  if (fp::abs(z) <= c.ftrl_l1) return 0.0f;
  const float numerator = fp::sub(z, fp::mul(sign_of(z), c.ftrl_l1));
  const float denominator = fp::add(fp::div(fp::add(c.ftrl_beta, sqrt_n), c.ftrl_alpha), c.ftrl_l2);
  return -fp::div(numerator, denominator);
}

// Updates element i of a row: w = weights, state = the row's state words
// (as floats), dim = the layout's dim, grad = the reduced gradient g[i].
STRATA_HD void apply_element(const optimizer_params& c, const row_prologue& p, uint32_t dim,
                             uint32_t i, float* w, float* state, float grad) {
  switch (c.kind) {
    case 0: {  // SGD
      const float g = fp::add(grad, fp::mul(c.l2, w[i]));
      w[i] = fp::sub(w[i], fp::mul(c.learning_rate, g));
      return;
    }
    case 1: {  // Adagrad
      float* acc = state;
      const float g = fp::add(grad, fp::mul(c.l2, w[i]));
      acc[i] = fp::add(acc[i], fp::mul(g, g));
      w[i] =
          fp::sub(w[i], fp::div(fp::mul(c.learning_rate, g), fp::add(fp::sqrt(acc[i]), c.epsilon)));
      return;
    }
    case 2: {  // Adam
      float* m = state;
      float* v = state + dim;
      const float g = fp::add(grad, fp::mul(c.l2, w[i]));
      m[i] = fp::add(fp::mul(c.beta1, m[i]), fp::mul(p.one_minus_beta1, g));
      v[i] = fp::add(fp::mul(c.beta2, v[i]), fp::mul(p.one_minus_beta2, fp::mul(g, g)));
      const float m_hat = fp::div(m[i], p.bias1);
      const float v_hat = fp::div(v[i], p.bias2);
      w[i] = fp::sub(w[i],
                     fp::div(fp::mul(c.learning_rate, m_hat), fp::add(fp::sqrt(v_hat), c.epsilon)));
      return;
    }
    case 3: {  // FTRL-Proximal: raw gradient, its own l2
      float* z = state;
      float* n = state + dim;
      const float g = grad;
      const float n_new = fp::add(n[i], fp::mul(g, g));
      const float sqrt_n_new = fp::sqrt(n_new);
      const float sigma = fp::div(fp::sub(sqrt_n_new, fp::sqrt(n[i])), c.ftrl_alpha);
      z[i] = fp::sub(fp::add(z[i], g), fp::mul(sigma, w[i]));
      n[i] = n_new;
      w[i] = ftrl_weight(c, z[i], sqrt_n_new);
      return;
    }
    default:
      return;
  }
}

}  // namespace strata::gpu
