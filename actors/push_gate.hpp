// The gate clients' pushes (the training gateway) pass on their way to the
// shards, closed by the coordinator before its final cut (issue 15 item 4):
// once closed, no push is taken any more, and the final checkpoint and the
// drain wait until the pushes already inside have been applied. So every
// acknowledged push is in the final checkpoint, and none is acknowledged
// after it.
//
// Thread-safe: enter/leave from the gateway's connection threads, close and
// wait_idle from the coordinator's side.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace strata::actors {

class push_gate {
 public:
  // False once closed (the push must be refused); else the push is inside
  // until leave().
  bool enter() {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    ++inside_;
    return true;
  }
  void leave() {
    std::lock_guard lock(mutex_);
    if (--inside_ == 0) idle_.notify_all();
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }
  // Blocks until no push is inside (call after close()).
  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return inside_ == 0; });
  }

  // enter() .. leave() for a scope; `entered` false: refused.
  class pass {
   public:
    explicit pass(push_gate* gate) : gate_(gate), entered_(!gate || gate->enter()) {}
    ~pass() {
      if (gate_ && entered_) gate_->leave();
    }
    pass(const pass&) = delete;
    pass& operator=(const pass&) = delete;
    bool entered() const { return entered_; }

   private:
    push_gate* gate_;
    bool entered_;
  };

 private:
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  uint64_t inside_ = 0;
  bool closed_ = false;
};

}  // namespace strata::actors
