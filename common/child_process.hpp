// A child process (multi-process tests, benchmarks): started with arguments and
// environment additions, its stdout read line by line with deadlines
// (never a fixed sleep), its stdin kept open until close_stdin() (nodes
// stop when it closes), killed and reaped on destruction.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace strata {

class child_process {
 public:
  child_process(const std::string& binary, const std::vector<std::string>& args,
                const std::vector<std::string>& env = {}) {
    int out[2], in[2];
    if (::pipe(out) != 0 || ::pipe(in) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(in[0], 0);
      ::close(out[0]);
      ::close(in[1]);
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(in[0]);
    out_ = out[0];
    in_ = in[1];
  }
  ~child_process() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(10));
    }
    if (out_ >= 0) ::close(out_);
    if (in_ >= 0) ::close(in_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }
  const std::vector<std::string>& lines() const { return lines_; }
  std::string output() const {
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all;
  }

  // Reads until a line starting with `prefix` appears; returns it, or
  // nullopt at the deadline or at end of output.
  std::optional<std::string> wait_line(const std::string& prefix,
                                       std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t seen = 0;
    while (true) {
      for (; seen < lines_.size(); ++seen) {
        if (lines_[seen].rfind(prefix, 0) == 0) return lines_[seen];
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0 || !read_some(static_cast<int>(left))) return std::nullopt;
    }
  }

  void close_stdin() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  void signal(int sig) { ::kill(pid_, sig); }

  // The exit status (WEXITSTATUS, or 128 + signal), or nullopt at the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      read_some(50);
    }
    while (read_some(0)) {
    }
    return status_;
  }

 private:
  // Reads what is available within `timeout_ms`; false at end of output.
  bool read_some(int timeout_ms) {
    if (out_ < 0) return false;
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return timeout_ms > 0;
    char buf[4096];
    const ssize_t n = ::read(out_, buf, sizeof buf);
    if (n <= 0) {
      ::close(out_);
      out_ = -1;
      return false;
    }
    partial_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial_.find('\n')) != std::string::npos) {
      lines_.push_back(partial_.substr(0, nl));
      partial_.erase(0, nl + 1);
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1, in_ = -1;
  std::string partial_;
  std::vector<std::string> lines_;
  std::optional<int> status_;
};

}  // namespace strata
