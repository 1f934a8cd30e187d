// A process-wide "stop requested" flag: set by a node's signal thread
// (SIGINT/SIGTERM), read by long scans that run before the actors exist (the
// data file's line count), so that a stop ends them instead of waiting for
// the scan.
//
// Thread-safety: an atomic; any thread may set or read it.
#pragma once

#include <atomic>

namespace strata {

inline std::atomic<bool>& stop_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace strata
