// Tests with real processes: the strata binary (STRATA_BINARY) run as a
// child with its output in files, and polling with a deadline.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata {

namespace process_detail {
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
}  // namespace process_detail
using namespace process_detail;

// A process running the strata binary, its output in files.
class strata_process {
 public:
  strata_process(const std::vector<std::string>& args, const fs::path& out, const fs::path& err)
      : out_(out), err_(err) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, 1);
      ::dup2(e, 2);
      std::vector<std::string> all = {STRATA_BINARY};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~strata_process() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The exit status once the process ended, polling until `seconds` pass.
  std::optional<int> wait(double seconds) {
    const auto deadline = clock_type::now() + std::chrono::duration<double>(seconds);
    while (!status_ && clock_type::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  std::optional<int> status_;
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
