// The launcher's supervisor: runs each node of a manifest as its own child
// process (`strata node --manifest M --node NAME [--resume DIR]`, the same
// binary) and watches them.
//
//  - A child that exits 0 is done; the supervisor returns 0 once all are.
//  - A child that dies (killed by a signal, or a non-zero exit) is a node
//    failure. Policy stop: the other children are stopped (SIGTERM, then
//    waited for) and the supervisor returns 1 with a message naming the
//    node and how it died. Policy restart: every child is stopped and the
//    whole cluster is started again from the latest complete checkpoint
//    (`resume_for_restart()`; nothing if there is none yet: a fresh start),
//    at most max_restarts times.
//  - SIGINT / SIGTERM to the supervisor are forwarded to the children as
//    they came (a node then stops gracefully: final checkpoint, drain, at
//    most 30 s; it names a Ctrl-C as one, and takes the launcher's forward
//    of a Ctrl-C it got from the terminal too as the same stop); a second one sends SIGKILL, saying so, and so does a
//    node still running 40 s after the SIGTERM. Every stop ends.
//
// Runs on the calling thread; SIGINT, SIGTERM and SIGCHLD are blocked
// while it runs and taken with sigtimedwait, so a signal arriving at any
// moment is acted on (none is lost between a check and a wait). Children
// start with the caller's mask. Messages go to stderr.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata::deploy {

struct child_node {
  std::string name;               // for messages
  std::vector<std::string> argv;  // argv[0] is the program; the resume arguments are appended
};

struct supervisor_config {
  bool restart = false;  // on_failure: restart (else stop)
  uint32_t max_restarts = 3;
  std::string manifest;  // for the hint printed on a stop
  // For a restart: the arguments that make a node resume (e.g. {"--resume",
  // DIR}; none: start fresh) and what they mean, for the message. Called at
  // each restart.
  struct resume_plan {
    std::vector<std::string> args;
    std::string description;  // "from checkpoint ckpt/ckpt-000000000004"
  };
  std::function<resume_plan()> resume_for_restart;
  // After a failure that stops the cluster: what to do next (the --resume
  // command only when a resume could work). Empty: the generic hint.
  std::function<std::string()> resume_hint;
};

// Runs the children until all exit; returns the launcher's exit code.
int supervise(const supervisor_config& config, const std::vector<child_node>& children,
              const std::vector<std::string>& first_resume_args);

// "killed by signal 9 (Killed)" / "exited with status 3".
std::string describe_exit(int wait_status);

}  // namespace strata::deploy
