// The test support itself: what every multi-process test relies on.
#include "tests/tiers/test_util.hpp"

#include <gtest/gtest.h>

#include <set>

namespace strata::testing {
namespace {

// A manifest of five nodes once got one port for two of them (free_port
// probes a port, it does not hold it, so it could hand one out twice).
TEST(FreePort, NeverHandsOutOnePortTwiceInAProcess) {
  std::set<uint16_t> seen;
  for (int i = 0; i < 3000; ++i) {
    const uint16_t port = free_port();
    ASSERT_NE(port, 0) << "call " << i;
    EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice, call " << i;
  }
}

}  // namespace
}  // namespace strata::testing
