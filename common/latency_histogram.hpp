// A latency histogram cheap enough for hot paths: fixed bucket bounds from
// 1 us to 10 s (Prometheus-style "le" upper bounds, in seconds), plain
// counters owned by one actor (no atomics, no locks), exported by the
// monitoring layer from a snapshot the actor sends on request.
//
// observe() is a branch-light search over 22 bounds plus two adds
// (bench/metrics_bench: ~15 ns on this machine). Thread-safety: one owner.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace strata {

class latency_histogram {
 public:
  static constexpr std::array<double, 22> bounds{
      1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
      5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0};

  void observe(double seconds) {
    size_t i = 0;
    // Binary search over the sorted bounds: the first bound >= seconds.
    size_t lo = 0, hi = bounds.size();
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (bounds[mid] < seconds) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    i = lo;  // bounds.size() is the +Inf bucket
    ++counts_[i];
    sum_ += seconds;
  }

  // Non-cumulative counts per bucket; the last one is +Inf.
  std::span<const uint64_t> counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const {
    uint64_t n = 0;
    for (uint64_t c : counts_) n += c;
    return n;
  }

 private:
  std::array<uint64_t, bounds.size() + 1> counts_{};
  double sum_ = 0;
};

}  // namespace strata
