// The storage operations strata's durability depends on, behind one seam
// (in the manner of LevelDB's Env): a failure of any of them can be injected
// in a test or a real process, so every failure path is tested by making it
// happen rather than by reading code.
//
// io() is the process-wide environment. Each operation first asks
// fault(op, path) whether to fail (0: no) and then does the real call; the
// default environment never fails, so production pays one virtual call per
// commit, sync, copy or file write — nothing next to the I/O itself.
//
// STRATA_FAULT selects a fault-injecting environment in any process:
//   STRATA_FAULT=op:calls:ERRNO[:path-substring][,op:calls:ERRNO...]
//   op     write | fsync | rename | lmdb_commit | lmdb_sync | lmdb_copy
//   calls  N (only the Nth matching call), N+ (the Nth and every later
//          one), N-M (the Nth to the Mth); calls count from 1, per rule,
//          and only calls whose path contains the substring count
//   ERRNO  ENOSPC | EIO | EDQUOT | EROFS | ENOMEM | a number | SLOW<ms>
//          (SLOW: the call waits that many milliseconds, then succeeds:
//          a slow disk rather than a failing one)
// e.g. STRATA_FAULT=lmdb_commit:3+:ENOSPC:shard-1 fails shard 1's third and
// every later LMDB commit. Every injected fault logs one line to stderr (a
// SLOW rule only its first delay).
// A malformed value is an error naming it (install_io_env_from_environment).
//
// STRATA_FAULT_ONCE=FILE makes the faults one-shot across processes: the
// first injected fault creates FILE, and a process that starts while FILE
// exists runs without faults. So a node restarted by the crash policy
// (checkpoint.on_failure: restart) recovers, whatever its own call counts.
//
// Thread-safety: fault() may be called from any thread (counters are
// atomic); replace the environment only while no I/O runs (tests).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace strata {

enum class io_op : uint8_t { write, fsync, rename, lmdb_commit, lmdb_sync, lmdb_copy };

std::string_view to_string(io_op op);

class io_env {
 public:
  virtual ~io_env() = default;
  // 0, or the errno the operation `op` on `path` must fail with.
  virtual int fault(io_op op, std::string_view path);

  // The POSIX operations, each 0 or an errno. write() writes all of `bytes`
  // (short writes and EINTR continue).
  int write(int fd, const void* data, size_t bytes, std::string_view path);
  int fsync(int fd, std::string_view path);
  int rename(const std::string& from, const std::string& to);
};

// One rule of STRATA_FAULT.
struct fault_rule {
  io_op op = io_op::write;
  uint64_t first = 1;                       // first failing call (1-based)
  uint64_t last = 1;                        // last failing call (UINT64_MAX: every later one)
  int err = 0;                              // errno to fail with (0: a delay rule)
  uint32_t delay_ms = 0;                    // SLOW<ms>: wait, then succeed
  std::string path;                         // only calls on paths containing it ("": all)
  std::shared_ptr<std::atomic<uint64_t>> calls =
      std::make_shared<std::atomic<uint64_t>>(0);  // matching calls seen
};

// Parses a STRATA_FAULT value; errors quote it and say what is wrong.
expected<std::vector<fault_rule>> parse_fault_spec(std::string_view spec);

// Fails the operations its rules name; logs each injected fault to stderr.
class faulty_io_env final : public io_env {
 public:
  // `once_file`: created at the first injected fault ("": none).
  explicit faulty_io_env(std::vector<fault_rule> rules, std::string once_file = {})
      : rules_(std::move(rules)), once_file_(std::move(once_file)) {}
  int fault(io_op op, std::string_view path) override;
  // Faults injected so far.
  uint64_t fired() const { return fired_.load(); }

 private:
  std::vector<fault_rule> rules_;
  std::string once_file_;
  std::atomic<uint64_t> fired_{0};
};

// The process-wide environment (the default one unless replaced).
io_env& io();
// Replaces it (nullptr: the default); the caller keeps `env` alive while it
// is installed. For tests and install_io_env_from_environment().
void set_io_env(io_env* env);
// Reads STRATA_FAULT once: unset or empty keeps the default environment; a
// value installs a faulty_io_env for the rest of the process; a malformed
// one is an invalid_argument error naming the variable and the value.
status install_io_env_from_environment();

}  // namespace strata
