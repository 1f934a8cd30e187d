// Client-side attacks on the project's TCP servers, for the hostile-client
// tests (issue 16): raw connections that stay idle, a slowloris writer, a
// frame header that claims a huge payload, and the process measurements
// the tests assert on (CPU time, threads, VmHWM, descriptor limits).
//
// Header-only, plain POSIX; counts and durations are the caller's (keep
// them bounded: each test well under 20 s on 2 cores).
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "client/wire.hpp"

namespace strata::testing::hostile {

// A raw blocking TCP connection to 127.0.0.1:port; closed by the destructor.
class raw_connection {
 public:
  raw_connection() = default;
  explicit raw_connection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ >= 0) connect(port);
  }
  // A socket not connected yet (its descriptor taken now: connect() later
  // needs none, so the server's accept is the one that runs out).
  static raw_connection unconnected() {
    raw_connection c;
    c.fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    return c;
  }
  bool connect(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return true;
  }
  ~raw_connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_connection(raw_connection&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  raw_connection& operator=(raw_connection&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool send(std::string_view bytes) {
    return fd_ >= 0 &&
           ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size());
  }
  bool send(std::span<const std::byte> bytes) {
    return send(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  // Whether the server closed the connection within `wait` (EOF or reset;
  // whatever it sent first, a 503 say, is read and returned in `said`).
  bool closed_by_peer(std::chrono::milliseconds wait, std::string* said = nullptr) {
    const auto until = std::chrono::steady_clock::now() + wait;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
      if (said) said->append(buf, size_t(n));
    }
  }

 private:
  int fd_ = -1;
};

// `n` connections that send nothing (fewer when connect fails).
inline std::vector<raw_connection> open_idle(uint16_t port, size_t n) {
  std::vector<raw_connection> out;
  for (size_t i = 0; i < n; ++i) {
    raw_connection c(port);
    if (!c.ok()) break;
    out.push_back(std::move(c));
  }
  return out;
}

// Slowloris: sends `text` one byte every `gap` until the server closes the
// connection or `limit` passes. Returns how long the server held on (or
// `limit` when it never closed).
inline std::chrono::milliseconds slowloris(raw_connection& c, std::string_view text,
                                           std::chrono::milliseconds gap,
                                           std::chrono::milliseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  auto held = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  };
  for (size_t i = 0; held() < limit; i = (i + 1) % text.size()) {
    if (!c.send(text.substr(i, 1))) return held();
    if (c.closed_by_peer(gap)) return held();
  }
  return limit;
}

// A valid 24-byte frame header that claims `length` payload bytes (none follow).
inline std::array<std::byte, wire::header_bytes> header_claiming(wire::frame_type type,
                                                                 uint32_t length) {
  std::vector<std::byte> frame;
  wire::append_frame(frame, type, 1, {});
  std::array<std::byte, wire::header_bytes> out;
  std::memcpy(out.data(), frame.data(), out.size());
  std::memcpy(out.data() + 8, &length, 4);
  return out;
}

// A field of /proc/self/status in kB ("VmHWM", "VmRSS", "Threads"); 0 if absent.
inline uint64_t proc_status(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  return 0;
}

// CPU time (user + system) this process used so far.
inline std::chrono::milliseconds cpu_time() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return std::chrono::milliseconds(u.ru_utime.tv_sec * 1000 + u.ru_utime.tv_usec / 1000 +
                                   u.ru_stime.tv_sec * 1000 + u.ru_stime.tv_usec / 1000);
}

// Open descriptors of this process numbered below `limit`.
inline size_t open_fds_below(int limit) {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      const int fd = std::atoi(e->d_name);
      if (e->d_name[0] != '.' && fd != ::dirfd(d) && fd < limit) ++n;
    }
    ::closedir(d);
  }
  return n;
}

// Lowers this process's RLIMIT_NOFILE (soft) so that exactly `free_slots`
// more descriptors can be opened; the destructor restores it.
class fd_limit {
 public:
  explicit fd_limit(size_t free_slots) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    // The lowest numbers are used first: find the limit under which
    // `free_slots` numbers are unused.
    int limit = 3;
    while (size_t(limit) - open_fds_below(limit) < free_slots) ++limit;
    rlimit r = saved_;
    r.rlim_cur = rlim_t(limit);
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  ~fd_limit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  fd_limit(const fd_limit&) = delete;
  fd_limit& operator=(const fd_limit&) = delete;

 private:
  rlimit saved_{};
};

}  // namespace strata::testing::hostile
