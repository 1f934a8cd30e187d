#include "common/io_env.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

namespace strata {

std::string_view to_string(io_op op) {
  switch (op) {
    case io_op::write: return "write";
    case io_op::fsync: return "fsync";
    case io_op::rename: return "rename";
    case io_op::lmdb_commit: return "lmdb_commit";
    case io_op::lmdb_sync: return "lmdb_sync";
    case io_op::lmdb_copy: return "lmdb_copy";
  }
  return "?";
}

int io_env::fault(io_op, std::string_view) { return 0; }

int io_env::write(int fd, const void* data, size_t bytes, std::string_view path) {
  if (int e = fault(io_op::write, path)) return e;
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return 0;
}

int io_env::fsync(int fd, std::string_view path) {
  if (int e = fault(io_op::fsync, path)) return e;
  return ::fsync(fd) == 0 ? 0 : errno;
}

int io_env::rename(const std::string& from, const std::string& to) {
  if (int e = fault(io_op::rename, to)) return e;
  return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

struct errno_name {
  std::string_view name;
  int value;
};
constexpr errno_name errno_names[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO},     {"EDQUOT", EDQUOT},
                                      {"EROFS", EROFS},   {"ENOMEM", ENOMEM}};

std::string_view errno_label(int e) {
  for (const auto& n : errno_names)
    if (n.value == e) return n.name;
  return "errno";
}

io_env default_env;
std::atomic<io_env*> current{&default_env};

}  // namespace

expected<std::vector<fault_rule>> parse_fault_spec(std::string_view spec) {
  std::vector<fault_rule> rules;
  for (std::string_view item : split(spec, ',')) {
    auto bad = [&](const std::string& why) {
      return error{errc::invalid_argument, "STRATA_FAULT='" + std::string(spec) + "': rule '" +
                                               std::string(item) + "': " + why +
                                               " (expected op:calls:ERRNO[:path-substring])"};
    };
    auto f = split(item, ':');
    if (f.size() < 3) return bad("too few fields");
    fault_rule r;
    bool known = false;
    for (io_op op : {io_op::write, io_op::fsync, io_op::rename, io_op::lmdb_commit,
                     io_op::lmdb_sync, io_op::lmdb_copy})
      if (to_string(op) == f[0]) {
        r.op = op;
        known = true;
      }
    if (!known) return bad("unknown operation '" + std::string(f[0]) + "'");
    std::string_view calls = f[1];
    if (!calls.empty() && calls.back() == '+') {
      if (!parse_u64(calls.substr(0, calls.size() - 1), r.first)) return bad("bad call count");
      r.last = std::numeric_limits<uint64_t>::max();
    } else if (const size_t dash = calls.find('-'); dash != std::string_view::npos) {
      if (!parse_u64(calls.substr(0, dash), r.first) || !parse_u64(calls.substr(dash + 1), r.last))
        return bad("bad call range");
    } else {
      if (!parse_u64(calls, r.first)) return bad("bad call count");
      r.last = r.first;
    }
    if (r.first == 0 || r.last < r.first) return bad("calls count from 1");
    uint64_t number = 0;
    for (const auto& n : errno_names)
      if (n.name == f[2]) r.err = n.value;
    if (f[2].starts_with("SLOW")) {
      if (!parse_u64(f[2].substr(4), number) || number == 0 || number > 60'000)
        return bad("bad delay '" + std::string(f[2]) + "' (SLOW1 .. SLOW60000 milliseconds)");
      r.delay_ms = static_cast<uint32_t>(number);
    } else if (r.err == 0) {
      if (!parse_u64(f[2], number) || number == 0 || number > 4095)
        return bad("unknown errno '" + std::string(f[2]) + "'");
      r.err = static_cast<int>(number);
    }
    // The path substring may itself contain ':'.
    if (f.size() > 3) {
      const size_t at = item.find(':', item.find(':', item.find(':') + 1) + 1);
      r.path = std::string(item.substr(at + 1));
    }
    rules.push_back(std::move(r));
  }
  return rules;
}

int faulty_io_env::fault(io_op op, std::string_view path) {
  for (auto& r : rules_) {
    if (r.op != op) continue;
    if (!r.path.empty() && path.find(r.path) == std::string_view::npos) continue;
    const uint64_t n = ++*r.calls;
    if (n < r.first || n > r.last) continue;
    if (r.delay_ms > 0) {
      if (n == r.first)
        std::fprintf(stderr, "strata: injected fault: %s calls from %llu on %.*s wait %u ms\n",
                     std::string(to_string(op)).c_str(), static_cast<unsigned long long>(n),
                     static_cast<int>(path.size()), path.data(), r.delay_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
      continue;  // then succeeds, unless a later rule fails it
    }
    if (++fired_ == 1 && !once_file_.empty()) {
      const int fd = ::open(once_file_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
    }
    std::fprintf(stderr, "strata: injected fault: %s call %llu on %.*s fails with %s (%s)\n",
                 std::string(to_string(op)).c_str(), static_cast<unsigned long long>(n),
                 static_cast<int>(path.size()), path.data(), std::string(errno_label(r.err)).c_str(),
                 std::strerror(r.err));
    return r.err;
  }
  return 0;
}

io_env& io() { return *current.load(std::memory_order_acquire); }

void set_io_env(io_env* env) { current.store(env ? env : &default_env, std::memory_order_release); }

status install_io_env_from_environment() {
  static std::mutex mutex;
  static std::unique_ptr<faulty_io_env> installed;
  std::lock_guard lock(mutex);
  if (installed) return {};
  const char* spec = std::getenv("STRATA_FAULT");
  if (!spec || !*spec) return {};
  auto rules = parse_fault_spec(spec);
  if (!rules) return rules.err();
  const char* once = std::getenv("STRATA_FAULT_ONCE");
  const std::string once_file = once ? once : "";
  if (!once_file.empty() && ::access(once_file.c_str(), F_OK) == 0) {
    std::fprintf(stderr, "strata: STRATA_FAULT_ONCE=%s exists: fault injection off\n",
                 once_file.c_str());
    return {};
  }
  installed = std::make_unique<faulty_io_env>(std::move(*rules), once_file);
  set_io_env(installed.get());
  std::fprintf(stderr, "strata: STRATA_FAULT=%s: fault injection on\n", spec);
  return {};
}

}  // namespace strata
