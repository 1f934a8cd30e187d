#include "common/latency_histogram.hpp"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(LatencyHistogram, ObservationsLandInTheFirstBucketAtOrAboveThem) {
  latency_histogram h;
  h.observe(0.0);     // bucket 0 (<= 1 us)
  h.observe(1e-6);    // bucket 0: bounds are inclusive upper limits
  h.observe(1.5e-6);  // bucket 1 (<= 2.5 us)
  h.observe(0.003);   // <= 5 ms: index 11
  h.observe(10.0);    // last finite bucket
  h.observe(11.0);    // +Inf
  const auto c = h.counts();
  ASSERT_EQ(c.size(), latency_histogram::bounds.size() + 1);
  EXPECT_EQ(c[0], 2u);
  EXPECT_EQ(c[1], 1u);
  EXPECT_EQ(c[11], 1u);
  EXPECT_EQ(c[latency_histogram::bounds.size() - 1], 1u);
  EXPECT_EQ(c[latency_histogram::bounds.size()], 1u);
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.0 + 1e-6 + 1.5e-6 + 0.003 + 10.0 + 11.0);
}

TEST(LatencyHistogram, BoundsAreStrictlyIncreasing) {
  for (size_t i = 1; i < latency_histogram::bounds.size(); ++i)
    EXPECT_LT(latency_histogram::bounds[i - 1], latency_histogram::bounds[i]);
}

}  // namespace
}  // namespace strata
