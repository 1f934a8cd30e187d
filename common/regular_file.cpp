#include "common/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace strata {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

error not_regular(const std::filesystem::path& path, std::string_view what, mode_t mode) {
  return error(errc::invalid_argument, std::string(what) + " " + path.string() + " is " +
                                           kind_of(mode) + ", not a regular file");
}

error cannot_open(const std::filesystem::path& path, std::string_view what, int e) {
  return error(e == ENOENT ? errc::not_found : errc::io_error,
               "cannot open " + std::string(what) + " " + path.string() + ": " + std::strerror(e));
}

}  // namespace

status check_regular_file(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return cannot_open(path, what, errno);
  if (!S_ISREG(st.st_mode)) return not_regular(path, what, st.st_mode);
  return {};
}

expected<int> open_regular_file(const std::filesystem::path& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return cannot_open(path, what, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return cannot_open(path, what, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return not_regular(path, what, st.st_mode);
  }
  // Regular files ignore O_NONBLOCK for reads; cleared all the same so the
  // descriptor behaves as a plain open.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace strata
