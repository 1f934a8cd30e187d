// The frames a node_bridge in a transport test received, in delivery order
// (the bridge's handler calls add() on its progress thread). `delay` makes
// it a slow receiver.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/node_bridge.hpp"

namespace strata::transport::testing {

struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<inbound_frame> frames;
  std::chrono::microseconds delay{0};

  void add(inbound_frame f) {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    {
      std::lock_guard lock(mu);
      frames.push_back(std::move(f));
    }
    cv.notify_all();
  }
  bool wait_for(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [&] { return frames.size() >= n; });
  }
  size_t size() {
    std::lock_guard lock(mu);
    return frames.size();
  }
};

}  // namespace strata::transport::testing
