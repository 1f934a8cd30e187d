#include "deploy/supervisor.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace strata::deploy {
namespace {

volatile std::sig_atomic_t stop_signals = 0;

extern "C" void on_stop_signal(int) { stop_signals = stop_signals + 1; }

struct running_child {
  const child_node* node = nullptr;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

pid_t start_child(const child_node& node, const std::vector<std::string>& extra) {
  std::vector<std::string> args = node.argv;
  args.insert(args.end(), extra.begin(), extra.end());
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // parent (or -1)
  // Child: default signal dispositions, then the node.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  std::fprintf(stderr, "strata launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

// Sends `sig` to every child still running.
void signal_all(std::vector<running_child>& children, int sig) {
  for (auto& c : children)
    if (!c.exited && c.pid > 0) ::kill(c.pid, sig);
}

// Reaps one child (blocking, interrupted by signals); returns its index or
// -1 when interrupted.
int reap(std::vector<running_child>& children) {
  int status = 0;
  const pid_t pid = ::waitpid(-1, &status, 0);
  if (pid < 0) return -1;
  for (size_t i = 0; i < children.size(); ++i)
    if (children[i].pid == pid) {
      children[i].exited = true;
      children[i].status = status;
      return static_cast<int>(i);
    }
  return -1;
}

bool all_exited(const std::vector<running_child>& children) {
  for (const auto& c : children)
    if (!c.exited) return false;
  return true;
}

// SIGTERM to every running child, then waits for all (SIGKILL on a second
// stop signal).
void stop_all(std::vector<running_child>& children) {
  signal_all(children, SIGTERM);
  const auto seen = stop_signals;
  while (!all_exited(children)) {
    if (reap(children) < 0 && errno == EINTR && stop_signals != seen) signal_all(children, SIGKILL);
  }
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended (wait status " + std::to_string(status) + ")";
}

int supervise(const supervisor_config& config, const std::vector<child_node>& nodes,
              const std::vector<std::string>& first_resume_args) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: waitpid returns EINTR on a signal
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  stop_signals = 0;

  uint32_t restarts = 0;
  std::vector<std::string> resume = first_resume_args;
  int result = 0;
  for (;;) {
    std::vector<running_child> children;
    for (const auto& node : nodes) {
      running_child c;
      c.node = &node;
      c.pid = start_child(node, resume);
      if (c.pid < 0) {
        std::fprintf(stderr, "strata launch: cannot start node '%s': %s\n", node.name.c_str(),
                     std::strerror(errno));
        stop_all(children);
        result = 1;
        goto done;
      }
      children.push_back(c);
    }
    {
      std::sig_atomic_t forwarded = 0;
      const running_child* dead = nullptr;
      while (!all_exited(children)) {
        const int i = reap(children);
        if (stop_signals != forwarded) {
          // Ctrl-C / SIGTERM: a graceful stop of every node (each takes a
          // final checkpoint); a second one kills them.
          signal_all(children, forwarded == 0 ? SIGTERM : SIGKILL);
          forwarded = stop_signals;
        }
        if (i < 0) continue;
        if (forwarded == 0 && failed(children[i].status)) {
          dead = &children[i];
          break;
        }
      }
      if (dead == nullptr) {
        bool any_failed = false;
        for (const auto& c : children) any_failed = any_failed || failed(c.status);
        result = any_failed ? 1 : 0;
        goto done;
      }
      const std::string how = describe_exit(dead->status);
      if (!config.restart || restarts >= config.max_restarts) {
        std::fprintf(stderr,
                     "strata launch: node '%s' (pid %d) %s; stopping the cluster "
                     "(checkpoint.on_failure: %s%s). Resume from the latest complete checkpoint "
                     "with: strata launch %s --resume\n",
                     dead->node->name.c_str(), static_cast<int>(dead->pid), how.c_str(),
                     config.restart ? "restart, " : "stop",
                     config.restart
                         ? ("all " + std::to_string(config.max_restarts) + " restarts used").c_str()
                         : "",
                     config.manifest.c_str());
        stop_all(children);
        result = 1;
        goto done;
      }
      ++restarts;
      stop_all(children);
      supervisor_config::resume_plan plan;
      if (config.resume_for_restart) plan = config.resume_for_restart();
      if (plan.args.empty()) plan.description = "from scratch (no complete checkpoint yet)";
      resume = plan.args;
      std::fprintf(stderr,
                   "strata launch: node '%s' (pid %d) %s; restarting the cluster %s (restart %u "
                   "of %u)\n",
                   dead->node->name.c_str(), static_cast<int>(dead->pid), how.c_str(),
                   plan.description.c_str(), restarts, config.max_restarts);
      std::fflush(stderr);
    }
  }
done:
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace strata::deploy
