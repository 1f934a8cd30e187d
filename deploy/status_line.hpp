// A progress line on stderr for long CLI commands (datagen, launch). On a
// terminal it redraws one line in place (\r) on every update; otherwise
// (a log file, CI) it prints a full line at most every `log_interval`
// seconds, so logs stay readable. Owned by the command's thread; not
// thread-safe.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace strata::cli {

class status_line {
 public:
  explicit status_line(double log_interval_s = 5.0)
      : tty_(::isatty(STDERR_FILENO) == 1), log_interval_s_(log_interval_s) {}

  void update(const std::string& text) {
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
      // Pad over what the previous, longer line left behind.
      std::string line = text;
      if (line.size() < width_) line.append(width_ - line.size(), ' ');
      width_ = text.size();
      std::fprintf(stderr, "\r%s", line.c_str());
      std::fflush(stderr);
      drawn_ = true;
      return;
    }
    if (printed_ && std::chrono::duration<double>(now - last_).count() < log_interval_s_) return;
    last_ = now;
    printed_ = true;
    std::fprintf(stderr, "%s\n", text.c_str());
  }

  // Ends the in-place line so that later output starts on a fresh one.
  void done() {
    if (tty_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

  bool is_tty() const { return tty_; }

 private:
  bool tty_;
  double log_interval_s_;
  bool drawn_ = false;
  bool printed_ = false;
  size_t width_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace strata::cli
