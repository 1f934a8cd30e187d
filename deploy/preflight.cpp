#include "deploy/preflight.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

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

}  // namespace strata::deploy
