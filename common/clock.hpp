// Time as a dependency: actors and tiers never read a global clock; they
// are given one. Used for latency metrics only —
// no behaviour depends on it. Tests may pass a manual clock.
#pragma once

#include <chrono>

namespace strata {

class clock_source {
 public:
  virtual ~clock_source() = default;
  virtual double now_seconds() const = 0;  // monotonic, arbitrary origin
};

// The process's monotonic clock (std::chrono::steady_clock).
class steady_clock_source final : public clock_source {
 public:
  double now_seconds() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static const steady_clock_source& instance() {
    static const steady_clock_source source;
    return source;
  }
};

}  // namespace strata
