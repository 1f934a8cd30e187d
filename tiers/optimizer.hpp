// Optimizers applied to one row at a time: SGD, Adagrad, Adam, FTRL-Proximal.
//
// The exact update rules (with L2) are in docs/optimizers.md; the unit tests
// check each against hand-computed steps. Gradients arrive already reduced:
// a batch's duplicate keys are summed (in batch order) before the optimizer
// runs once per key (docs/architecture.md, Semantics: Duplicate keys).
// Computation is plain float arithmetic in a fixed order, compiled without
// FMA contraction, so CPU results are deterministic; the CUDA backend uses
// the same formulas.
//
// Thread-safety: pure functions over caller-owned rows.
#pragma once

#include <cstdint>

#include "tiers/row.hpp"

namespace strata {

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::adagrad;
  float learning_rate = 0.01f;
  // L2 regularization strength (SGD/Adagrad/Adam: added to the gradient as
  // l2 * w; FTRL: its own l2 term, see ftrl_l2).
  float l2 = 0.0f;
  float initial_accumulator = 0.1f;  // Adagrad: starting accumulator value
  float epsilon = 1e-8f;             // Adagrad, Adam
  float beta1 = 0.9f;                // Adam
  float beta2 = 0.999f;              // Adam
  float ftrl_alpha = 0.05f;          // FTRL-Proximal (McMahan et al. 2013)
  float ftrl_beta = 1.0f;
  float ftrl_l1 = 0.0f;
  float ftrl_l2 = 0.0f;
};

// Sets the optimizer state of a freshly initialized row (weights already set).
// Adagrad: accumulators = initial_accumulator; Adam: m = v = 0, step = 0;
// FTRL: n = 0 and z chosen so that the FTRL closed form reproduces the
// initial weights. No-op for SGD or a serving layout.
void init_optimizer_state(const optimizer_config& config, const row_layout& layout,
                          std::byte* record);

// Applies one update with gradient `grad` (layout.dim floats) to `record`,
// and bumps its version counter by one. The layout must carry state.
void apply_optimizer(const optimizer_config& config, const row_layout& layout, std::byte* record,
                     const float* grad);

// Adam's per-row step counter (the last state word).
uint32_t adam_step(const row_layout& layout, const std::byte* record);

}  // namespace strata
