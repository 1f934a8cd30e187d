// Tests with real processes: the strata binary (STRATA_BINARY) run as a
// child with its output in files, and polling with a deadline.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"

namespace strata {

namespace process_detail {
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
}  // namespace process_detail
using namespace process_detail;

// A process running the strata binary, its output in files; a
// child_process (common/child_process.hpp), so the destructor kills its
// whole process group (the launcher and its nodes) and reaps it.
class strata_process : public child_process {
 public:
  // `env`: NAME=value entries added to the child's environment.
  strata_process(const std::vector<std::string>& args, const fs::path& out, const fs::path& err,
                 const std::vector<std::string>& env = {})
      : child_process(STRATA_BINARY, args, env, child_output{out, err}) {}
  // The raw wait status once the process ended, polling until `seconds` pass.
  std::optional<int> wait(double seconds) {
    return wait_raw(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(seconds)));
  }
  std::string out() { return output(); }
};

inline bool poll_until(const std::function<bool()>& done, double seconds) {
  const auto deadline = clock_type::now() + std::chrono::duration<double>(seconds);
  while (clock_type::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace strata
