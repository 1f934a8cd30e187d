#include "deploy/supervisor.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

namespace strata::deploy {
namespace {

// After the first stop signal, how long the nodes get before they are
// killed: a node bounds its own graceful stop at 30 s (launch_node.cpp);
// this is the launcher's backstop for a node that cannot even do that.
constexpr auto kill_after = std::chrono::seconds(40);

struct running_child {
  const child_node* node = nullptr;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

// SIGINT, SIGTERM and SIGCHLD stay blocked while the supervisor runs and
// are taken with sigtimedwait: a signal that arrives at any moment stays
// pending until the loop takes it (a handler's flag checked before a
// blocking waitpid could miss one that came in between, issue 15 item 10).
sigset_t watched_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  return set;
}

pid_t start_child(const child_node& node, const std::vector<std::string>& extra,
                  const sigset_t& child_mask) {
  std::vector<std::string> args = node.argv;
  args.insert(args.end(), extra.begin(), extra.end());
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // parent (or -1)
  // Child: default signal dispositions and the launcher's original mask,
  // then the node.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  // The node knows its launcher's forwards (deploy/launch_node.cpp).
  ::setenv("STRATA_LAUNCHER_PID", std::to_string(::getppid()).c_str(), 1);
  ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
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

// Reaps every child that has exited (never blocks); the indices, in the
// order reaped.
std::vector<size_t> reap(std::vector<running_child>& children) {
  std::vector<size_t> out;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return out;
    for (size_t i = 0; i < children.size(); ++i)
      if (children[i].pid == pid) {
        children[i].exited = true;
        children[i].status = status;
        out.push_back(i);
      }
  }
}

bool all_exited(const std::vector<running_child>& children) {
  for (const auto& c : children)
    if (!c.exited) return false;
  return true;
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// The stop signals taken so far and what the children were sent.
struct stop_state {
  int signals = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at;  // after a forwarded SIGTERM
};

// Waits up to a second for a signal (SIGCHLD included) and acts on a stop
// signal: the first is forwarded as SIGTERM (a graceful stop of every
// node), a second kills them; nodes still running kill_after the SIGTERM
// are killed too. Every branch says what it does.
void wait_for_event(std::vector<running_child>& children, const sigset_t& watched,
                    stop_state& stop) {
  const timespec second{1, 0};
  const int sig = ::sigtimedwait(&watched, nullptr, &second);
  if (sig == SIGINT || sig == SIGTERM) {
    if (++stop.signals == 1) {
      // Forwarded as it came: a node names a Ctrl-C as one.
      signal_all(children, sig);
      stop.kill_at = std::chrono::steady_clock::now() + kill_after;
    } else {
      std::fprintf(stderr,
                   "strata launch: second signal (%d); killing the nodes (no final "
                   "checkpoint)\n",
                   sig);
      signal_all(children, SIGKILL);
    }
  }
  if (stop.kill_at && std::chrono::steady_clock::now() >= *stop.kill_at && !all_exited(children)) {
    std::fprintf(stderr,
                 "strata launch: the nodes did not stop within %lld s of SIGTERM; killing them\n",
                 static_cast<long long>(kill_after.count()));
    signal_all(children, SIGKILL);
    stop.kill_at.reset();
  }
}

// SIGTERM to every running child, then waits for all (killed after
// kill_after, or on a stop signal).
void stop_all(std::vector<running_child>& children, const sigset_t& watched, stop_state& stop) {
  signal_all(children, SIGTERM);
  if (!stop.kill_at) stop.kill_at = std::chrono::steady_clock::now() + kill_after;
  ++stop.signals;  // a stop signal from now on kills
  reap(children);
  while (!all_exited(children)) {
    wait_for_event(children, watched, stop);
    reap(children);
  }
}

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
  const sigset_t watched = watched_signals();
  sigset_t old_mask;
  ::pthread_sigmask(SIG_BLOCK, &watched, &old_mask);
  stop_state stop;

  uint32_t restarts = 0;
  std::vector<std::string> resume = first_resume_args;
  int result = 0;
  for (;;) {
    std::vector<running_child> children;
    for (const auto& node : nodes) {
      running_child c;
      c.node = &node;
      c.pid = start_child(node, resume, old_mask);
      if (c.pid < 0) {
        std::fprintf(stderr, "strata launch: cannot start node '%s': %s\n", node.name.c_str(),
                     std::strerror(errno));
        stop_all(children, watched, stop);
        result = 1;
        goto done;
      }
      children.push_back(c);
    }
    {
      const running_child* dead = nullptr;
      while (dead == nullptr && !all_exited(children)) {
        for (size_t i : reap(children))
          if (stop.signals == 0 && failed(children[i].status) && dead == nullptr)
            dead = &children[i];
        if (dead != nullptr || all_exited(children)) break;
        // Ctrl-C / SIGTERM: a graceful stop of every node (each takes a
        // final checkpoint); a second one kills them.
        wait_for_event(children, watched, stop);
      }
      if (dead == nullptr) {
        bool any_failed = false;
        for (const auto& c : children) any_failed = any_failed || failed(c.status);
        result = any_failed ? 1 : 0;
        goto done;
      }
      const std::string how = describe_exit(dead->status);
      if (!config.restart || restarts >= config.max_restarts) {
        const std::string hint =
            config.resume_hint ? config.resume_hint()
                               : "Resume from the latest complete checkpoint with: strata launch " +
                                     config.manifest + " --resume";
        std::fprintf(stderr,
                     "strata launch: node '%s' (pid %d) %s; stopping the cluster "
                     "(checkpoint.on_failure: %s%s). %s\n",
                     dead->node->name.c_str(), static_cast<int>(dead->pid), how.c_str(),
                     config.restart ? "restart, " : "stop",
                     config.restart
                         ? ("all " + std::to_string(config.max_restarts) + " restarts used").c_str()
                         : "",
                     hint.c_str());
        stop_all(children, watched, stop);
        result = 1;
        goto done;
      }
      ++restarts;
      stop_state restart_stop;
      stop_all(children, watched, restart_stop);
      if (restart_stop.signals > 1) {
        // A stop signal came while the cluster was being stopped for the
        // restart: no restart.
        result = 1;
        goto done;
      }
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
  // A stop signal still pending came when every node had ended: nothing
  // is left to stop, and the launcher returns its result.
  const timespec now{0, 0};
  while (::sigtimedwait(&watched, nullptr, &now) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return result;
}

}  // namespace strata::deploy
