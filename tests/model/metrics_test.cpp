#include "model/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace strata::model {
namespace {

TEST(Auc, PerfectAndReversed) {
  const std::vector<float> labels{0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(auc(std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f}, labels), 1.0);
  EXPECT_DOUBLE_EQ(auc(std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f}, labels), 0.0);
}

TEST(Auc, HandComputed) {
  // Positives at 0.35 and 0.8; negatives at 0.1, 0.4, 0.7.
  // Pairs (pos > neg): 0.35 > 0.1; 0.8 > all three  -> 4 of 6.
  const std::vector<float> p{0.1f, 0.35f, 0.4f, 0.7f, 0.8f};
  const std::vector<float> y{0, 1, 0, 0, 1};
  EXPECT_DOUBLE_EQ(auc(p, y), 4.0 / 6.0);
}

TEST(Auc, TiesCountHalf) {
  // One positive and one negative with equal scores: 1/2.
  EXPECT_DOUBLE_EQ(auc(std::vector<float>{0.5f, 0.5f}, std::vector<float>{1, 0}), 0.5);
  // Positives {0.5, 0.9}, negatives {0.5, 0.1}: pairs 0.5~0.5 = 1/2,
  // 0.5>0.1, 0.9>0.5, 0.9>0.1 -> 3.5 / 4.
  const std::vector<float> p{0.5f, 0.9f, 0.5f, 0.1f};
  const std::vector<float> y{1, 1, 0, 0};
  EXPECT_DOUBLE_EQ(auc(p, y), 3.5 / 4.0);
  // All predictions equal: 0.5 whatever the labels.
  EXPECT_DOUBLE_EQ(auc(std::vector<float>(7, 0.3f), std::vector<float>{1, 0, 0, 1, 0, 0, 0}), 0.5);
}

TEST(Auc, OneClassIsHalf) {
  EXPECT_DOUBLE_EQ(auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{1, 1}), 0.5);
  EXPECT_DOUBLE_EQ(auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 0}), 0.5);
  EXPECT_DOUBLE_EQ(auc(std::vector<float>{}, std::vector<float>{}), 0.5);
}

TEST(Auc, MatchesPairCountOnPseudoRandomData) {
  std::vector<float> p, y;
  uint32_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 1664525u + 1013904223u;
    p.push_back(static_cast<float>((state >> 8) % 20) / 20.0f);  // many ties
    y.push_back(((state >> 3) & 3) == 0 ? 1.0f : 0.0f);
  }
  double good = 0, pairs = 0;
  for (size_t i = 0; i < p.size(); ++i)
    for (size_t j = 0; j < p.size(); ++j)
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        good += p[i] > p[j] ? 1.0 : p[i] == p[j] ? 0.5 : 0.0;
      }
  EXPECT_NEAR(auc(p, y), good / pairs, 1e-12);
}

TEST(Logloss, HandComputed) {
  // -(log 0.8 + log(1 - 0.4)) / 2
  const double expected = -(std::log(0.8) + std::log(0.6)) / 2;
  EXPECT_NEAR(logloss(std::vector<float>{0.8f, 0.4f}, std::vector<float>{1, 0}), expected, 1e-7);
  EXPECT_NEAR(logloss(std::vector<float>{0.5f}, std::vector<float>{1}), std::log(2.0), 1e-12);
}

TEST(Logloss, ClampsCertainMistakes) {
  // p = 0 for a positive would be infinite; clamped at 1e-7 it is -log(1e-7).
  EXPECT_NEAR(logloss(std::vector<float>{0.0f}, std::vector<float>{1}), -std::log(1e-7), 1e-9);
  EXPECT_NEAR(logloss(std::vector<float>{1.0f}, std::vector<float>{0}), -std::log(1e-7), 1e-6);
  EXPECT_TRUE(std::isfinite(logloss(std::vector<float>{1.0f, 0.0f}, std::vector<float>{1, 0})));
}

}  // namespace
}  // namespace strata::model
