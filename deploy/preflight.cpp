#include "deploy/preflight.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <algorithm>

#include "common/regular_file.hpp"
#include "deploy/host_memory.hpp"

namespace strata::deploy {

namespace fs = std::filesystem;

namespace {

// 16 bytes from the kernel's CSPRNG as 32 hex characters.
expected<std::string> random_hex_secret(const std::string& where) {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return error(errc::io_error, where + ": no random bytes: " + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

}  // namespace

expected<bool> ensure_secret_file(const fs::path& file, bool create_if_missing,
                                  const std::string& where) {
  std::error_code ec;
  if (fs::exists(file, ec)) {
    STRATA_TRY(check_regular_file(file, where + ":"));
    if (fs::file_size(file, ec) == 0 && !ec)
      return error(errc::invalid_argument, where + ": " + file.string() + " is empty");
    return false;
  }
  if (!create_if_missing)
    return error(errc::not_found,
                 where + ": " + file.string() + " does not exist (create it, e.g. `openssl rand " +
                     "-hex 16 > " + file.string() + "`, or set create_if_missing: true)");
  if (file.has_parent_path()) {
    fs::create_directories(file.parent_path(), ec);
    if (ec)
      return error(errc::io_error,
                   where + ": cannot create " + file.parent_path().string() + ": " + ec.message());
  }
  auto secret = random_hex_secret(where);
  if (!secret) return secret.err();
  // Written whole into a private temporary file, then linked into place:
  // nodes of one host starting together (strata node each) never see a
  // half-written secret, and the first link wins (EEXIST: another won).
  static std::atomic<uint64_t> attempts{0};
  const fs::path tmp = file.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                       std::to_string(attempts++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return error(errc::io_error,
                 where + ": cannot create " + tmp.string() + ": " + std::strerror(errno));
  const std::string text = *secret + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return error(errc::io_error,
                 where + ": cannot write " + file.string() + ": " + std::strerror(saved));
  }
  const int linked = ::link(tmp.c_str(), file.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked != 0) {
    if (link_errno == EEXIST) return false;  // created meanwhile (another node of this host)
    return error(errc::io_error,
                 where + ": cannot create " + file.string() + ": " + std::strerror(link_errno));
  }
  return true;
}

status ensure_admin_token_file(const manifest& m, std::ostream& out) {
  if (m.admin.token_file.empty()) return {};
  auto created = ensure_secret_file(m.admin.token_file, m.admin.create_if_missing,
                                    m.file.string() + ": admin.token_file");
  if (!created) return created.err();
  if (*created)
    out << "admin: created the token file " << m.admin.token_file.string()
        << " (mode 0600); use it with --token-file " << m.admin.token_file.string() << '\n';
  return {};
}

status ensure_cluster_secret_file(const manifest& m, std::ostream& out) {
  if (m.cluster_secret.file.empty()) return {};
  const auto where = m.file.string() + ": cluster_secret.file";
  auto created = ensure_secret_file(m.cluster_secret.file, m.cluster_secret.create_if_missing, where);
  if (!created) return created.err();
  if (*created)
    out << "cluster: created the cluster secret " << m.cluster_secret.file.string()
        << " (mode 0600); every node of the cluster needs this same file\n";
  // Readable by its owner alone, long enough: checked now, not when the
  // first peer connects.
  auto secret = auth::read_secret_file(m.cluster_secret.file, where);
  if (!secret) return secret.err();
  return {};
}

status check_manifest_files(const manifest& m, std::ostream& out) {
  if (auto token = ensure_admin_token_file(m, out); !token) return token;
  if (auto secret = ensure_cluster_secret_file(m, out); !secret) return secret;
  std::error_code ec;
  if (!m.generate && !m.data.path.empty() && !fs::exists(m.data.path, ec))
    return error(errc::not_found, m.file.string() + ": data.path: " + m.data.path.string() +
                                      " does not exist (and the manifest has no data.generate)");
  // A device or FIFO as data would be read without end.
  if (!m.data.path.empty() && fs::exists(m.data.path, ec))
    STRATA_TRY(check_regular_file(m.data.path, m.file.string() + ": data.path:"));
  // strata launch starts every node on this host.
  return check_host_memory(m, "");
}

std::vector<port_use> node_ports(const manifest& m, const std::string& node) {
  std::vector<port_use> ports;
  auto add = [&](const std::string& field, const std::string& address, uint16_t port) {
    if (port != 0) ports.push_back({field, address, port});
  };
  const node_settings* me = nullptr;
  if (m.nodes.size() > 1) {
    for (const auto& n : m.nodes)
      if (n.name == node) me = &n;
    if (me == nullptr) return ports;
  }
  const bool coordinator = me == nullptr || me == &m.nodes.front();
  const std::string own = me ? "nodes[" + me->name + "]." : "";
  if (me && me->metrics_port != 0)
    add(own + "metrics_port", m.metrics.bind_address, me->metrics_port);
  else if (coordinator)
    add("metrics.port", m.metrics.bind_address, m.metrics.port);
  if (coordinator) {
    if (me && me->admin_port != 0)
      add(own + "admin_port", m.admin.bind_address, me->admin_port);
    else
      add("admin.port", m.admin.bind_address, m.admin.port);
    add("gateway.port", m.gateway.bind_address, m.gateway.port);
    add("gateway.transport_port", m.gateway.bind_address, m.gateway.transport_port);
  }
  if (m.updates.present) {
    if (me && me->updates_port != 0)
      add(own + "updates_port", m.updates.bind_address, me->updates_port);
    else if (coordinator)
      add("updates.port", m.updates.bind_address, m.updates.port);
  }
  return ports;
}

status check_port_free(const std::string& field, const std::string& address, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints,
                    &found) != 0 ||
      found == nullptr)
    return {};
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  int bound = 0, bind_errno = 0;
  if (fd >= 0) {
    // As the servers bind: a port left in TIME_WAIT by a previous run is free.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    bound = ::bind(fd, found->ai_addr, found->ai_addrlen);
    bind_errno = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (fd < 0 || bound == 0) return {};
  const std::string where = field + " " + service + " (" + address + ":" + service + ")";
  if (bind_errno == EADDRINUSE)
    return error(errc::io_error, where +
                                     " is already in use: stop what listens there (another "
                                     "strata node?) or set another port");
  return error(errc::io_error, where + ": cannot bind: " + std::strerror(bind_errno));
}

status check_ports_free(const manifest& m, const std::string& node) {
  for (const auto& p : node_ports(m, node))
    if (auto free = check_port_free(p.field, p.address, p.port); !free)
      return error(free.err().code(), m.file.string() + ": " + free.err().message());
  return {};
}

}  // namespace strata::deploy
