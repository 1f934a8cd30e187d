// The one process helper of the tests (common/child_process.hpp): a child
// and everything it started go when the helper does, pass or fail.
#include "common/child_process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace strata {
namespace {

using namespace std::chrono_literals;

// True once `pid` no longer runs: gone, or a zombie (a reparented process
// waits for its new parent, which in a container may never reap it).
bool gone(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z')
      return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(ChildProcess, DestructorKillsTheChildAndWhatItStarted) {
  pid_t child = 0, grandchild = 0;
  {
    // A shell that starts a long sleep in the background (a grandchild,
    // like the node processes of `strata launch`) and waits for it.
    child_process p("sh", {"-c", "sleep 600 & echo started $!; wait"});
    auto line = p.wait_line("started ", 10s);
    ASSERT_TRUE(line) << p.output();
    child = p.pid();
    grandchild = static_cast<pid_t>(std::stol(line->substr(8)));
    ASSERT_GT(grandchild, 0);
    EXPECT_EQ(::kill(grandchild, 0), 0) << "the grandchild is not running";
    EXPECT_EQ(::getpgid(grandchild), child) << "not in the child's process group";
  }
  EXPECT_TRUE(gone(child, 10s)) << "child " << child << " survived";
  EXPECT_TRUE(gone(grandchild, 10s)) << "grandchild " << grandchild << " survived";
}

TEST(ChildProcess, ExitStatusOutputAndFiles) {
  child_process p("sh", {"-c", "echo one; echo two >&2; exit 3"});
  EXPECT_EQ(p.wait_exit(10s), 3);
  EXPECT_EQ(p.output(), "one\ntwo\n");  // stderr follows stdout by default
  child_process killed("sh", {"-c", "kill -TERM $$"});
  EXPECT_EQ(killed.wait_exit(10s), 128 + SIGTERM);
}

}  // namespace
}  // namespace strata
