// SIGINT/SIGTERM in `strata node` (deploy/launch_node.cpp): the signal
// thread and what it stops. Moved out of launch_node.cpp unchanged.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <caf/all.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "actors/coordinator_actor.hpp"
#include "common/stop_request.hpp"
#include "deploy/launch_report.hpp"
#include "deploy/multi_node.hpp"

namespace strata::cli::detail {

// SIGINT/SIGTERM in a node: a thread of its own waits for them (they are
// blocked in every other thread) and asks the coordinator to stop at the
// next cut. Every stop ends: a second signal exits at once, and a graceful
// stop that has not ended stop_bound_seconds() after the first signal is
// cut short (docs/architecture.md, "Stops"); either exit is non-zero and
// says so, and the latest complete checkpoint stays the recovery point.
//
// Threads a library started before main (OpenBLAS's pool) have them
// unblocked, and the kernel may hand a signal to any such thread: there a
// handler passes it on, siginfo and all, to the waiting thread (the
// default action would have ended the node without its final checkpoint).
class stop_on_signal {
 public:
  stop_on_signal() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any CAF thread starts
    const int bound = stop_bound_seconds();
    const pid_t launcher = launcher_pid();
    std::promise<void> waiting;
    auto waiter_ready = waiting.get_future();
    std::thread([this, set, bound, launcher, &waiting] {
      waiter_tid().store(static_cast<pid_t>(::syscall(SYS_gettid)));
      waiting.set_value();
      siginfo_t info{};
      int sig = -1;
      while ((sig = sigwaitinfo(&set, &info)) < 0) {
      }
      {
        std::lock_guard lock(mutex_);
        ++signals_;
        first_signal_ = sig;
        std::fprintf(stderr,
                     "\nstrata node: %s: stopping gracefully at the next cut (at most "
                     "%d s; a second signal exits at once)\n",
                     signal_name(sig).c_str(), bound);
        stop_requested().store(true);  // ends a scan before training (the data count)
        if (coordinator_) caf::anon_send(*coordinator_, actors::stop_atom::value);
        if (member_) member_->request_stop();
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(bound);
      for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::max(deadline - std::chrono::steady_clock::now(),
                     std::chrono::steady_clock::duration::zero()));
        const timespec limit{static_cast<time_t>(left.count() / 1000000000),
                             static_cast<long>(left.count() % 1000000000)};
        siginfo_t again{};
        const int second = sigtimedwait(&set, &again, &limit);
        // A Ctrl-C at a terminal reaches the launcher and its nodes alike,
        // and the launcher forwards it: what the launcher sends while the
        // stop runs is that same stop (it kills when it means more).
        if (second > 0 && launcher != 0 && sender(again) == launcher) continue;
        if (second > 0) {
          std::fprintf(stderr,
                       "strata node: second signal (%s); exiting without finishing the stop "
                       "(no final checkpoint)\n",
                       signal_name(second).c_str());
          std::fflush(stdout);
          ::_exit(130);
        }
        if (errno == EAGAIN) {
          std::fprintf(stderr,
                       "strata node: the graceful stop did not end within %d s; exiting without "
                       "finishing it (the latest complete checkpoint is the recovery point)\n",
                       bound);
          std::fflush(stdout);
          ::_exit(3);
        }
        // EINTR: wait for what is left of the bound.
      }
    }).detach();
    waiter_ready.wait();
    struct sigaction pass_on {};
    pass_on.sa_sigaction = &pass_to_waiter;
    pass_on.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&pass_on.sa_mask);
    ::sigaction(SIGINT, &pass_on, nullptr);
    ::sigaction(SIGTERM, &pass_on, nullptr);
  }
  static std::atomic<pid_t>& waiter_tid() {
    static std::atomic<pid_t> tid{0};
    return tid;
  }
  // The sender of the last signal passed on (tgkill makes this process
  // its sender).
  static std::atomic<pid_t>& passed_from() {
    static std::atomic<pid_t> pid{0};
    return pid;
  }
  // Async-signal-safe: the same signal to the waiting thread, which has it
  // blocked and waits for it; its sender noted first.
  static void pass_to_waiter(int sig, siginfo_t* info, void*) {
    const int saved = errno;
    passed_from().store(info ? info->si_pid : 0);
    ::syscall(SYS_tgkill, ::getpid(), waiter_tid().load(), sig);
    errno = saved;
  }
  // Who sent a signal the waiting thread took.
  static pid_t sender(const siginfo_t& info) {
    if (info.si_code == SI_TKILL && info.si_pid == ::getpid()) return passed_from().load();
    return info.si_pid;
  }
  // How long a graceful stop may take: 30 s, or STRATA_STOP_BOUND_SECONDS
  // (tests shorten it to see the bound act).
  static int stop_bound_seconds() {
    if (const char* v = std::getenv("STRATA_STOP_BOUND_SECONDS")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 0 && n <= 86400) return static_cast<int>(n);
    }
    return 30;
  }
  // The strata launch that started this node (STRATA_LAUNCHER_PID, set by
  // deploy/supervisor.cpp), else 0.
  static pid_t launcher_pid() {
    if (const char* v = std::getenv("STRATA_LAUNCHER_PID")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n > 0 && n == ::getppid()) return static_cast<pid_t>(n);
    }
    return 0;
  }
  // A node of several: a signal also aborts its join, and a member keeps
  // serving until the coordinator's node has stopped.
  void watch(deploy::node_membership* member) {
    std::lock_guard lock(mutex_);
    member_ = member;
    if (signals_ > 0) member->request_stop();
  }
  void watch(const actors::coordinator_actor& c) {
    std::lock_guard lock(mutex_);
    coordinator_ = c;
    if (signals_ > 0) caf::anon_send(c, actors::stop_atom::value);
  }
  void forget() {
    std::lock_guard lock(mutex_);
    coordinator_.reset();
    member_ = nullptr;
  }
  // The signal that asked for the stop (0: none), for the report.
  int first_signal() {
    std::lock_guard lock(mutex_);
    return first_signal_;
  }

 private:
  std::mutex mutex_;
  int signals_ = 0;
  int first_signal_ = 0;
  std::optional<actors::coordinator_actor> coordinator_;
  deploy::node_membership* member_ = nullptr;
};

}  // namespace strata::cli::detail
