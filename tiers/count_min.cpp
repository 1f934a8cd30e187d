#include "tiers/count_min.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "common/error.hpp"
#include "common/hash.hpp"

namespace strata {
namespace {

// Row r hashes with seed_base + r * seed_step: distinct per row, and far
// from the four named seeds of common/hash.hpp (which all start "strata_").
constexpr uint64_t seed_base = 0x636d5f736b657463ULL;  // "cm_sketc"
constexpr uint64_t seed_step = 0x9e3779b97f4a7c15ULL;  // golden ratio, odd
constexpr uint32_t counter_max = std::numeric_limits<uint16_t>::max();

constexpr uint64_t row_seed(uint32_t row) { return seed_base + uint64_t{row} * seed_step; }

uint32_t round_up_pow2(uint32_t width) {
  STRATA_ASSERT(width >= 1 && width <= (uint32_t{1} << 31), "count-min width must be in [1, 2^31]");
  return std::bit_ceil(width);
}

}  // namespace

count_min_sketch::count_min_sketch(uint32_t width, uint32_t depth)
    : width_mask_(round_up_pow2(width) - 1), depth_(depth) {
  STRATA_ASSERT(depth >= 1, "count-min depth must be at least 1");
  counters_.assign(size_t{width_mask_ + 1} * depth_, 0);
}

uint32_t count_min_sketch::index(uint64_t key, uint32_t row) const {
  const auto column = static_cast<uint32_t>(hash_key(key, row_seed(row)) & width_mask_);
  return row * (width_mask_ + 1) + column;
}

// Conservative update: only the counters at the current minimum grow. The
// estimate (the minimum) still never falls below the true count, and keys
// that share a counter inflate each other less than with plain increments.
uint32_t count_min_sketch::add(uint64_t key) {
  uint32_t low = estimate(key);
  if (low >= counter_max) return counter_max;
  const uint32_t target = low + 1;
  for (uint32_t r = 0; r < depth_; ++r) {
    uint16_t& c = counters_[index(key, r)];
    if (c < target) c = static_cast<uint16_t>(target);
  }
  return target;
}

uint32_t count_min_sketch::estimate(uint64_t key) const {
  uint32_t low = counter_max;
  for (uint32_t r = 0; r < depth_; ++r) low = std::min<uint32_t>(low, counters_[index(key, r)]);
  return low;
}

void count_min_sketch::halve() {
  for (uint16_t& c : counters_) c = static_cast<uint16_t>(c >> 1);
}

void count_min_sketch::load(std::vector<uint16_t> counters) {
  STRATA_ASSERT(counters.size() == counters_.size(),
                "count-min load: counter count differs from width x depth");
  counters_ = std::move(counters);
}

}  // namespace strata
