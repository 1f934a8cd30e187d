// A child process for multi-process tests and benchmarks; the one way the
// project's tests start processes.
//
// The child runs in a process group of its own, and the destructor kills
// that whole group (SIGKILL) and reaps the child, so whatever it started in
// turn (the node processes of `strata launch`) goes too, pass or fail. The
// child also gets SIGKILL if the thread that started it dies (a test
// binary killed by ctest's timeout leaves no child behind).
//
// Output: by default stdout (and stderr, unless redirected) comes through
// a pipe, read line by line with deadlines (wait_line; never a fixed
// sleep); or both go to files (child_output). stdin stays open until
// close_stdin() (transport test nodes stop when it closes).
//
// Not thread-safe: one thread owns a child_process.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata {

// Where a child's output goes. `out` empty: stdout through a pipe (read by
// wait_line/lines/output). `err` empty: stderr goes where stdout goes.
struct child_output {
  std::filesystem::path out;
  std::filesystem::path err;
};

class child_process {
 public:
  // Runs `binary` (a path, or a name searched on PATH) with `args`; `env`
  // entries ("NAME=value") are added to the inherited environment.
  child_process(const std::string& binary, const std::vector<std::string>& args,
                const std::vector<std::string>& env = {}, child_output output = {})
      : files_(std::move(output)) {
    int out[2] = {-1, -1}, in[2] = {-1, -1};
    // Close-on-exec: a child started later must not inherit this one's
    // pipe ends (a stdin it held open would keep this child from ever
    // reading end of file); dup2 below clears the flag on 0, 1 and 2.
    if ((files_.out.empty() && ::pipe2(out, O_CLOEXEC) != 0) || ::pipe2(in, O_CLOEXEC) != 0)
      return;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
      if (files_.out.empty()) {
        ::dup2(out[1], 1);
        ::close(out[0]);
        ::close(out[1]);
      } else {
        const int fd = ::open(files_.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) ::dup2(fd, 1);
      }
      if (files_.err.empty()) {
        ::dup2(1, 2);
      } else {
        const int fd = ::open(files_.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) ::dup2(fd, 2);
      }
      ::dup2(in[0], 0);
      ::close(in[0]);
      ::close(in[1]);
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(binary.c_str(), argv.data());
      std::fprintf(stderr, "child_process: cannot run %s: %s\n", binary.c_str(),
                   std::strerror(errno));
      ::_exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);  // no race with the child's own call
    if (out[1] >= 0) ::close(out[1]);
    ::close(in[0]);
    out_ = out[0];
    in_ = in[1];
  }
  ~child_process() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);  // the group: the child and what it started
      if (!status_) {
        int st = 0;
        ::waitpid(pid_, &st, 0);
      }
    }
    if (out_ >= 0) ::close(out_);
    if (in_ >= 0) ::close(in_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }

  // Pipe mode: the complete lines read so far.
  const std::vector<std::string>& lines() const { return lines_; }
  // What the child wrote to stdout so far (the file, or the lines read).
  std::string output() {
    if (!files_.out.empty()) return slurp(files_.out);
    while (read_some(0)) {
    }
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all + partial_;
  }
  // What it wrote to stderr so far (only with child_output::err).
  std::string err() const { return files_.err.empty() ? std::string() : slurp(files_.err); }

  // Pipe mode: reads until a line starting with `prefix` appears; returns
  // it, or nullopt at the deadline or at end of output.
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
  // Sends `sig` to the child alone (its own handlers decide what follows).
  void signal(int sig) {
    if (pid_ > 0 && !status_) ::kill(pid_, sig);
  }

  bool running() {
    if (pid_ <= 0 || status_) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      record(st);
      return false;
    }
    return true;
  }

  // The exit status (WEXITSTATUS, or 128 + signal), or nullopt at the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (!wait_raw(timeout)) return std::nullopt;
    return status_;
  }
  // The raw waitpid status (for WIFEXITED/WTERMSIG), or nullopt at the deadline.
  std::optional<int> wait_raw(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0 && !status_) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        record(st);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      if (out_ >= 0) {
        read_some(20);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    while (read_some(0)) {
    }
    return raw_status_;
  }

  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void record(int st) {
    raw_status_ = st;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  // Reads what is available within `timeout_ms`; false at end of output
  // (or, with timeout 0, when nothing is available).
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

  child_output files_;
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1;
  std::string partial_;
  std::vector<std::string> lines_;
  std::optional<int> status_;
  std::optional<int> raw_status_;
};

}  // namespace strata
