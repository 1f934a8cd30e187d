// Installs a fault-injecting io_env (common/io_env.hpp) for one test scope.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string_view>

#include "common/io_env.hpp"

namespace strata::testing {

class scoped_faults {
 public:
  explicit scoped_faults(std::string_view spec) {
    auto rules = parse_fault_spec(spec);
    EXPECT_TRUE(rules) << (rules ? "" : rules.err().to_string());
    env_ = std::make_unique<faulty_io_env>(rules ? std::move(*rules) : std::vector<fault_rule>{});
    set_io_env(env_.get());
  }
  ~scoped_faults() { set_io_env(nullptr); }
  scoped_faults(const scoped_faults&) = delete;
  scoped_faults& operator=(const scoped_faults&) = delete;
  const faulty_io_env& env() const { return *env_; }

 private:
  std::unique_ptr<faulty_io_env> env_;
};

}  // namespace strata::testing
