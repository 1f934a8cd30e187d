// Optimizer update rules against hand-computed steps (docs/optimizers.md).
//
// Expected float values were derived once by evaluating the documented
// recipe operation by operation in float (round to nearest, no FMA) and are
// written as literals with their bit patterns, so the tests pin the exact
// rounding order the CUDA backend must reproduce. Each optimizer is also
// checked against a textbook double-precision reference within a tolerance,
// so the literals are known to be the right formulas, not just stable ones.
#include "tiers/optimizer.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "tiers/initializer.hpp"
#include "tiers/row.hpp"

namespace strata {
namespace {

// One record of `layout`, weights `w`, optimizer state initialized.
struct test_row {
  row_layout layout;
  std::vector<std::byte> bytes;

  test_row(const optimizer_config& config, std::vector<float> w, uint64_t version = 0)
      : layout{static_cast<uint32_t>(w.size()), config.kind, true}, bytes(layout.record_bytes()) {
    meta_of(bytes.data()) = row_meta{version, 0, 0};
    std::memcpy(weights_of(bytes.data()), w.data(), 4 * w.size());
    init_optimizer_state(config, layout, bytes.data());
  }
  std::byte* record() { return bytes.data(); }
  float w(uint32_t i) const { return weights_of(bytes.data())[i]; }
  float state(uint32_t i) const { return state_of(layout, bytes.data())[i]; }
};

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Exact float equality by bit pattern (distinguishes -0 from +0).
#define EXPECT_BITS(actual, expected_bits) EXPECT_EQ(bits(actual), uint32_t{expected_bits})

optimizer_config config_for(optimizer_kind kind) {
  optimizer_config c;
  c.kind = kind;
  return c;
}

// --- SGD ----------------------------------------------------------------------

TEST(Sgd, StepsAreExactWithRepresentableValues) {
  auto c = config_for(optimizer_kind::sgd);
  c.learning_rate = 0.5f;
  test_row row(c, {1.0f, -2.0f});
  const float g1[] = {2.0f, -4.0f};
  apply_optimizer(c, row.layout, row.record(), g1);
  EXPECT_EQ(row.w(0), 0.0f);  // 1 - 0.5 * 2
  EXPECT_EQ(row.w(1), 0.0f);  // -2 - 0.5 * -4
  const float g2[] = {1.0f, 1.0f};
  apply_optimizer(c, row.layout, row.record(), g2);
  EXPECT_EQ(row.w(0), -0.5f);
  EXPECT_EQ(row.w(1), -0.5f);
  const float g3[] = {-0.25f, 3.0f};
  apply_optimizer(c, row.layout, row.record(), g3);
  EXPECT_EQ(row.w(0), -0.375f);
  EXPECT_EQ(row.w(1), -2.0f);
}

TEST(Sgd, L2IsAddedToTheGradient) {
  auto c = config_for(optimizer_kind::sgd);
  c.learning_rate = 0.5f;
  c.l2 = 0.5f;
  test_row row(c, {1.0f, -2.0f});
  const float zero[] = {0.0f, 0.0f};
  apply_optimizer(c, row.layout, row.record(), zero);
  EXPECT_EQ(row.w(0), 0.75f);  // g = 0 + 0.5 * 1;  1 - 0.5 * 0.5
  EXPECT_EQ(row.w(1), -1.5f);  // g = 0 + 0.5 * -2; -2 - 0.5 * -1
  const float g[] = {1.0f, 1.0f};
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(row.w(0), 0.0625f);  // g = 1 + 0.375;  0.75 - 0.6875
  EXPECT_EQ(row.w(1), -1.625f);  // g = 1 - 0.75;   -1.5 - 0.125
}

TEST(Sgd, LearningRateOneAddsNegatedGradientExactly) {
  // The exact-sum test (docs/architecture.md, Semantics: The exact-sum
  // test) relies on this.
  auto c = config_for(optimizer_kind::sgd);
  c.learning_rate = 1.0f;
  test_row row(c, {0.0f, 0.0f, 0.0f});
  for (int i = 1; i <= 100; ++i) {
    const float g[] = {-1.0f, -static_cast<float>(i), 3.0f};
    apply_optimizer(c, row.layout, row.record(), g);
  }
  EXPECT_EQ(row.w(0), 100.0f);
  EXPECT_EQ(row.w(1), 5050.0f);
  EXPECT_EQ(row.w(2), -300.0f);
}

// --- Adagrad ------------------------------------------------------------------

TEST(Adagrad, InitSetsAccumulators) {
  auto c = config_for(optimizer_kind::adagrad);
  c.initial_accumulator = 0.25f;
  test_row row(c, {1.0f, 2.0f, 3.0f});
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(row.state(i), 0.25f);
}

TEST(Adagrad, ExactWithPerfectSquares) {
  auto c = config_for(optimizer_kind::adagrad);
  c.learning_rate = 0.5f;
  c.initial_accumulator = 0.0f;
  c.epsilon = 0.0f;
  test_row row(c, {1.0f});
  const float g1[] = {3.0f};  // acc 9, sqrt 3: w -= 0.5 * 3 / 3
  apply_optimizer(c, row.layout, row.record(), g1);
  EXPECT_EQ(row.state(0), 9.0f);
  EXPECT_EQ(row.w(0), 0.5f);
  const float g2[] = {4.0f};  // acc 25, sqrt 5: w -= 2 / 5
  apply_optimizer(c, row.layout, row.record(), g2);
  EXPECT_EQ(row.state(0), 25.0f);
  EXPECT_BITS(row.w(0), 0x3dcccccc);  // 0.5f - 0.4f = 0.099999994 (exact)
}

TEST(Adagrad, ThreeStepsMatchHandComputedValues) {
  auto c = config_for(optimizer_kind::adagrad);
  c.learning_rate = 0.1f;
  c.initial_accumulator = 0.1f;
  c.epsilon = 1e-8f;
  test_row row(c, {0.5f, -0.25f});
  const float grads[3][2] = {{1.0f, -2.0f}, {0.5f, 0.25f}, {-1.0f, 0.0f}};
  // {w0, acc0, w1, acc1} after each step.
  const uint32_t expected[3][4] = {
      {0x3ecf2ec6, 0x3f8ccccd, 0xbe1adb42, 0x40833333},  // 0.404653728 1.1 -0.151227027 4.1
      {0x3eb92655, 0x3faccccd, 0xbe276776, 0x40853333},  // 0.361620575 1.35 -0.16348061 4.1625
      {0x3eda8c87, 0x40166666, 0xbe276776, 0x40853333},  // 0.426853389 2.35 (w1: zero grad)
  };
  // Textbook reference in double.
  double w[2] = {0.5, -0.25}, acc[2] = {0.1, 0.1};
  for (int s = 0; s < 3; ++s) {
    apply_optimizer(c, row.layout, row.record(), grads[s]);
    for (uint32_t i = 0; i < 2; ++i) {
      SCOPED_TRACE(::testing::Message() << "step " << s + 1 << " element " << i);
      EXPECT_BITS(row.w(i), expected[s][2 * i]);
      EXPECT_BITS(row.state(i), expected[s][2 * i + 1]);
      acc[i] += double{grads[s][i]} * grads[s][i];
      w[i] -= 0.1 * grads[s][i] / (std::sqrt(acc[i]) + 1e-8);
      EXPECT_NEAR(row.w(i), w[i], 1e-6);
    }
  }
}

TEST(Adagrad, L2IsAddedToTheGradient) {
  auto c = config_for(optimizer_kind::adagrad);
  c.learning_rate = 0.5f;
  c.initial_accumulator = 0.0f;
  c.epsilon = 0.0f;
  c.l2 = 0.5f;
  test_row row(c, {2.0f});
  const float g[] = {2.0f};  // g = 2 + 0.5 * 2 = 3: acc 9, w = 2 - 0.5 * 3 / 3
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(row.state(0), 9.0f);
  EXPECT_EQ(row.w(0), 1.5f);
}

// --- Adam ---------------------------------------------------------------------

TEST(Adam, InitZeroesMomentsAndStep) {
  auto c = config_for(optimizer_kind::adam);
  test_row row(c, {1.0f, 2.0f});
  EXPECT_EQ(row.layout.state_words(), 5u);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_BITS(row.state(i), 0u);
  EXPECT_EQ(adam_step(row.layout, row.record()), 0u);
}

TEST(Adam, ThreeStepsMatchHandComputedValues) {
  auto c = config_for(optimizer_kind::adam);
  c.learning_rate = 0.01f;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.epsilon = 1e-8f;
  test_row row(c, {1.0f, -1.0f});
  const float grads[3][2] = {{0.5f, -2.0f}, {0.25f, 1.0f}, {-1.0f, 0.5f}};
  // {w, m, v} of element 0 then element 1 after each step.
  const uint32_t expected[3][6] = {
      // 0.99 0.05 0.00025 | -0.99 -0.2 0.004: the first step moves by lr
      {0x3f7d70a4, 0x3d4cccd0, 0x39831200, 0xbf7d70a4, 0xbe4cccd0, 0x3b831200},
      // 0.980678201 0.07 0.000312246 | -0.987336636 -0.08 0.00499594
      {0x3f7b0dba, 0x3d8f5c2b, 0x39a3b4f2, 0xbf7cc218, 0xbda3d70c, 0x3ba3b4f2},
      // 0.982741773 -0.037 0.00131192 | -0.986722767 -0.022 0.00524094
      {0x3f7b94f7, 0xbd178d54, 0x3aabf4c2, 0xbf7c99dd, 0xbcb43958, 0x3babbc29},
  };
  double w[2] = {1.0, -1.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int s = 0; s < 3; ++s) {
    apply_optimizer(c, row.layout, row.record(), grads[s]);
    EXPECT_EQ(adam_step(row.layout, row.record()), static_cast<uint32_t>(s + 1));
    const double t = s + 1;
    for (uint32_t i = 0; i < 2; ++i) {
      SCOPED_TRACE(::testing::Message() << "step " << s + 1 << " element " << i);
      EXPECT_BITS(row.w(i), expected[s][3 * i]);
      EXPECT_BITS(row.state(i), expected[s][3 * i + 1]);      // m
      EXPECT_BITS(row.state(2 + i), expected[s][3 * i + 2]);  // v
      const double g = grads[s][i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      const double m_hat = m[i] / (1 - std::pow(0.9, t));
      const double v_hat = v[i] / (1 - std::pow(0.999, t));
      w[i] -= 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);
      EXPECT_NEAR(row.w(i), w[i], 1e-5);
    }
  }
}

TEST(Adam, BiasCorrectionUsesTheRowsOwnStepCount) {
  auto c = config_for(optimizer_kind::adam);
  c.learning_rate = 0.01f;
  test_row busy(c, {0.0f});
  test_row rare(c, {0.0f});
  const float g[] = {0.5f};
  for (int i = 0; i < 10; ++i) apply_optimizer(c, busy.layout, busy.record(), g);
  apply_optimizer(c, rare.layout, rare.record(), g);
  EXPECT_EQ(adam_step(busy.layout, busy.record()), 10u);
  EXPECT_EQ(adam_step(rare.layout, rare.record()), 1u);
  // A row's first update is corrected as a first step: it moves by ~lr,
  // however many updates other rows have seen.
  EXPECT_NEAR(rare.w(0), -0.01f, 1e-7);
}

TEST(Adam, StepCounterIsTheLastStateWordAndDrivesCorrection) {
  auto c = config_for(optimizer_kind::adam);
  c.learning_rate = 0.01f;
  test_row row(c, {0.0f, 0.0f});
  // Pretend the row has seen 999 updates that left m = v = 0.
  uint32_t steps = 999;
  std::memcpy(state_of(row.layout, row.record()) + 4, &steps, 4);
  EXPECT_EQ(adam_step(row.layout, row.record()), 999u);
  const float g[] = {0.5f, -0.5f};
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(adam_step(row.layout, row.record()), 1000u);
  // m = 0.1 g, v = 0.001 g^2; bias corrections at t = 1000.
  const double m_hat = 0.1 * 0.5 / (1 - std::pow(0.9, 1000));
  const double v_hat = 0.001 * 0.25 / (1 - std::pow(0.999, 1000));
  const double expected = -0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);  // about -0.0251
  EXPECT_NEAR(row.w(0), expected, 1e-6);
  EXPECT_NEAR(row.w(1), -expected, 1e-6);
}

TEST(Adam, StepCounterSaturates) {
  auto c = config_for(optimizer_kind::adam);
  test_row row(c, {0.0f});
  uint32_t steps = UINT32_MAX;
  std::memcpy(state_of(row.layout, row.record()) + 2, &steps, 4);
  const float g[] = {1.0f};
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(adam_step(row.layout, row.record()), UINT32_MAX);
  EXPECT_TRUE(std::isfinite(row.w(0)));
}

TEST(Adam, L2IsAddedToTheGradient) {
  auto c = config_for(optimizer_kind::adam);
  c.learning_rate = 0.01f;
  c.l2 = 1.0f;
  test_row row(c, {2.0f, -2.0f});
  const float zero[] = {0.0f, 0.0f};
  apply_optimizer(c, row.layout, row.record(), zero);
  // g = l2 * w: the first step moves by ~lr towards zero.
  EXPECT_NEAR(row.w(0), 1.99f, 1e-6);
  EXPECT_NEAR(row.w(1), -1.99f, 1e-6);
  EXPECT_GT(row.state(0), 0.0f);  // m picked up the L2 gradient
}

// --- FTRL ---------------------------------------------------------------------

TEST(Ftrl, ThreeStepsMatchHandComputedValues) {
  auto c = config_for(optimizer_kind::ftrl);
  c.ftrl_alpha = 0.5f;
  c.ftrl_beta = 1.0f;
  test_row row(c, {0.0f});
  EXPECT_EQ(row.state(0), 0.0f);  // z
  EXPECT_EQ(row.state(1), 0.0f);  // n
  // Step 1: n = 4, sigma = 2 / 0.5 = 4, z = 2 - 4 * 0 = 2,
  //         w = -(2 / ((1 + 2) / 0.5)) = -1/3.
  const float g1[] = {2.0f};
  apply_optimizer(c, row.layout, row.record(), g1);
  EXPECT_EQ(row.state(0), 2.0f);
  EXPECT_EQ(row.state(1), 4.0f);
  EXPECT_BITS(row.w(0), 0xbeaaaaab);  // -0.333333343
  // Step 2: n = 5, sigma = (sqrt 5 - 2) / 0.5, z = (2 - 1) - sigma * w.
  const float g2[] = {-1.0f};
  apply_optimizer(c, row.layout, row.record(), g2);
  EXPECT_EQ(row.state(1), 5.0f);
  EXPECT_BITS(row.state(0), 0x3f9424fc);  // 1.15737867
  EXPECT_BITS(row.w(0), 0xbe371ddc);      // -0.178824842
  const float g3[] = {0.5f};
  apply_optimizer(c, row.layout, row.record(), g3);
  EXPECT_EQ(row.state(1), 5.25f);
  EXPECT_BITS(row.state(0), 0x3fd6ac22);  // 1.67712808
  EXPECT_BITS(row.w(0), 0xbe8272e9);      // -0.254782945

  // Textbook reference (McMahan et al. 2013, Algorithm 1) in double.
  double z = 0, n = 0, w = 0;
  for (double g : {2.0, -1.0, 0.5}) {
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / 0.5;
    z += g - sigma * w;
    n += g * g;
    w = -z / ((1.0 + std::sqrt(n)) / 0.5);
  }
  EXPECT_NEAR(row.w(0), w, 1e-6);
}

TEST(Ftrl, InitReproducesInitialWeights) {
  for (float l1 : {0.0f, 0.5f}) {
    auto c = config_for(optimizer_kind::ftrl);
    c.ftrl_alpha = 0.05f;
    c.ftrl_beta = 1.0f;
    c.ftrl_l1 = l1;
    c.ftrl_l2 = 0.1f;
    initializer_config init;
    init.kind = initializer_kind::normal;
    init.normal_stddev = 0.5f;
    init.seed = 3;
    std::vector<float> w0(64);
    initialize_weights(init, 12345, w0.data(), 64);
    w0[0] = 0.0f;
    test_row row(c, w0);
    for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(row.state(64 + i), 0.0f);  // n
    EXPECT_EQ(row.state(0), 0.0f);                                         // z of w = 0
    // A zero gradient leaves z and n alone and recomputes the weights from
    // the closed form: they come back (to rounding).
    const std::vector<float> zero(64, 0.0f);
    apply_optimizer(c, row.layout, row.record(), zero.data());
    for (uint32_t i = 0; i < 64; ++i) {
      SCOPED_TRACE(::testing::Message() << "l1 " << l1 << " element " << i);
      EXPECT_FLOAT_EQ(row.w(i), w0[i]);
    }
  }
}

TEST(Ftrl, FirstStepIsProximalToTheInitialWeights) {
  // With z initialized from w0, the first update is w0 - alpha g / (beta + |g|)
  // (l1 = l2 = 0), not a jump towards zero.
  auto c = config_for(optimizer_kind::ftrl);
  c.ftrl_alpha = 0.5f;
  c.ftrl_beta = 1.0f;
  test_row row(c, {2.0f});
  const float g[] = {1.0f};
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_FLOAT_EQ(row.w(0), 2.0f - 0.5f * 1.0f / 2.0f);
}

TEST(Ftrl, L1MakesSmallWeightsExactlyZero) {
  auto c = config_for(optimizer_kind::ftrl);
  c.ftrl_alpha = 0.1f;
  c.ftrl_beta = 1.0f;
  c.ftrl_l1 = 1.0f;
  test_row row(c, {0.0f, 0.0f});
  // Element 0 sees small alternating gradients: |z| stays <= l1, w stays 0.
  // Element 1 sees a steady gradient: |z| passes l1 and w becomes negative.
  for (int s = 0; s < 6; ++s) {
    const float g[] = {(s % 2 == 0) ? 0.3f : -0.3f, 0.5f};
    apply_optimizer(c, row.layout, row.record(), g);
  }
  EXPECT_BITS(row.w(0), 0u);  // exactly +0
  EXPECT_LE(std::fabs(row.state(0)), 1.0f);
  EXPECT_GT(row.state(1), 1.0f);
  EXPECT_LT(row.w(1), 0.0f);
}

TEST(Ftrl, L2ShrinksTheWeight) {
  auto c = config_for(optimizer_kind::ftrl);
  c.ftrl_alpha = 0.5f;
  c.ftrl_beta = 1.0f;
  test_row plain(c, {0.0f});
  c.ftrl_l2 = 1.0f;
  test_row shrunk(c, {0.0f});
  const float g[] = {2.0f};
  apply_optimizer(c, shrunk.layout, shrunk.record(), g);
  c.ftrl_l2 = 0.0f;
  apply_optimizer(c, plain.layout, plain.record(), g);
  EXPECT_BITS(plain.w(0), 0xbeaaaaab);   // -2 / 6
  EXPECT_EQ(shrunk.w(0), -2.0f / 7.0f);  // -2 / (6 + 1)
}

// --- all optimizers ---------------------------------------------------------------

class AllOptimizers : public ::testing::TestWithParam<optimizer_kind> {};

TEST_P(AllOptimizers, BumpsVersionCounterAndKeepsIncarnation) {
  const auto c = config_for(GetParam());
  test_row row(c, {0.1f, 0.2f}, make_version(7, 41));
  const float g[] = {0.5f, -0.5f};
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(meta_of(row.record()).version, make_version(7, 42));
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(incarnation_of(meta_of(row.record()).version), 7u);
  EXPECT_EQ(counter_of(meta_of(row.record()).version), 43u);
}

TEST_P(AllOptimizers, LeavesAccessMetadataAlone) {
  const auto c = config_for(GetParam());
  test_row row(c, {0.1f});
  meta_of(row.record()).freq = 5;
  meta_of(row.record()).tick = 9;
  const float g[] = {0.5f};
  apply_optimizer(c, row.layout, row.record(), g);
  EXPECT_EQ(meta_of(row.record()).freq, 5u);
  EXPECT_EQ(meta_of(row.record()).tick, 9u);
}

TEST_P(AllOptimizers, SameInputsGiveBitIdenticalRows) {
  auto c = config_for(GetParam());
  c.l2 = 0.01f;
  c.ftrl_l1 = 0.001f;
  c.ftrl_l2 = 0.01f;
  initializer_config init;
  init.seed = 11;
  constexpr uint32_t dim = 16;
  std::vector<float> w0(dim);
  initialize_weights(init, 77, w0.data(), dim);
  test_row a(c, w0), b(c, w0);
  ASSERT_EQ(a.bytes, b.bytes);
  std::vector<float> g(dim);
  for (int s = 0; s < 20; ++s) {
    initialize_weights(init, 1000 + s, g.data(), dim);  // pseudo-random gradients
    apply_optimizer(c, a.layout, a.record(), g.data());
    apply_optimizer(c, b.layout, b.record(), g.data());
  }
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_TRUE(same_row(a.layout, a.record(), b.record()));
  EXPECT_NE(std::memcmp(weights_of(a.record()), w0.data(), 4 * dim), 0);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, AllOptimizers,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::adagrad,
                                           optimizer_kind::adam, optimizer_kind::ftrl),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(InitOptimizerState, ServingLayoutIsANoOp) {
  auto c = config_for(optimizer_kind::adam);
  row_layout serving{2, optimizer_kind::adam, false};
  std::vector<std::byte> rec(serving.record_bytes() + 4, std::byte{0xAB});
  init_optimizer_state(c, serving, rec.data());
  for (std::byte b : rec) EXPECT_EQ(b, std::byte{0xAB});
}

// --- Vectorized loops ----------------------------------------------------------

// The update loops are vectorized (tiers/CMakeLists.txt); a lane must round
// exactly as the scalar code does. Reference: the same rules applied to
// `dim` rows of width 1, which the loops run without a vector lane. Every
// width up to 67 (vector bodies, remainders, both), every optimizer, with
// L2 and FTRL's L1 on, over several steps of gradients of mixed sign and
// magnitude (zeros, tiny and large ones included).
TEST(VectorizedOptimizer, EveryLaneRoundsAsTheScalarCode) {
  for (auto kind :
       {optimizer_kind::sgd, optimizer_kind::adagrad, optimizer_kind::adam, optimizer_kind::ftrl}) {
    auto c = config_for(kind);
    c.learning_rate = 0.05f;
    c.l2 = 1e-3f;
    c.ftrl_l1 = 0.02f;
    c.ftrl_l2 = 0.5f;
    uint32_t seed = 12345;
    auto next = [&seed] {
      seed = seed * 1664525u + 1013904223u;
      const float unit = float(seed >> 8) / float(1u << 24);  // [0, 1)
      switch (seed % 8) {
        case 0:
          return 0.0f;
        case 1:
          return (unit - 0.5f) * 1e-30f;
        case 2:
          return (unit - 0.5f) * 1e4f;
        default:
          return unit - 0.5f;
      }
    };
    for (uint32_t dim = 1; dim <= 67; ++dim) {
      std::vector<float> w(dim);
      for (float& x : w) x = next();
      test_row wide(c, w);
      std::vector<test_row> narrow;
      for (uint32_t i = 0; i < dim; ++i) narrow.emplace_back(c, std::vector<float>{w[i]});
      std::vector<float> g(dim);
      for (int step = 0; step < 5; ++step) {
        for (float& x : g) x = next();
        apply_optimizer(c, wide.layout, wide.record(), g.data());
        for (uint32_t i = 0; i < dim; ++i)
          apply_optimizer(c, narrow[i].layout, narrow[i].record(), &g[i]);
      }
      // The state: arrays of dim floats (Adagrad 1, Adam 2 then its step
      // counter, FTRL 2), coordinate i of each against the narrow row's.
      const uint32_t arrays = kind == optimizer_kind::adam ? 2 : narrow[0].layout.state_words();
      for (uint32_t i = 0; i < dim; ++i) {
        EXPECT_EQ(bits(wide.w(i)), bits(narrow[i].w(0)))
            << to_string(kind) << " dim " << dim << " weight " << i;
        for (uint32_t a = 0; a < arrays; ++a) {
          EXPECT_EQ(bits(wide.state(a * dim + i)), bits(narrow[i].state(a)))
              << to_string(kind) << " dim " << dim << " state array " << a << " coordinate " << i;
        }
      }
      if (kind == optimizer_kind::adam) {
        EXPECT_EQ(adam_step(wide.layout, wide.record()), 5u) << "dim " << dim;
      }
    }
  }
}

}  // namespace
}  // namespace strata
