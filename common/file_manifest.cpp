#include "common/file_manifest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/crc32c.hpp"
#include "common/regular_file.hpp"

namespace strata {
namespace {

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

status fsync_path(const std::filesystem::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    return error{errc::io_error, "cannot open " + quoted(p) + ": " + std::strerror(errno)};
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0)
    return error{saved == ENOSPC ? errc::disk_full : errc::io_error,
                 "cannot sync " + quoted(p) + ": " + std::strerror(saved)};
  return {};
}

}  // namespace

expected<uint32_t> file_crc32c(const std::filesystem::path& file, uint64_t* bytes) {
  // Only a regular file: a checkpoint file replaced by a link to a device
  // (/dev/zero) would be read forever.
  auto fd = open_regular_file(file, "file");
  if (!fd) {
    // Not a regular file where one was listed: the checkpoint is damaged
    // (so a resume falls back to the one before).
    if (fd.err().code() == errc::invalid_argument)
      return error{errc::corrupt_data, fd.err().message()};
    return fd.err();
  }
  std::FILE* f = ::fdopen(*fd, "rb");
  if (f == nullptr) {
    const int e = errno;
    ::close(*fd);
    return error{errc::io_error, "cannot read " + quoted(file) + ": " + std::strerror(e)};
  }
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), f)) {
    crc = crc32c_extend(crc, buf.data(), n);
    total += n;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return error{errc::io_error, "error reading " + quoted(file)};
  if (bytes) *bytes = total;
  return crc;
}

expected<std::vector<manifest_entry>> write_file_manifest(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<manifest_entry> entries;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    auto rel = std::filesystem::relative(it->path(), dir).generic_string();
    if (rel == file_manifest_name || rel == std::string(file_manifest_name) + ".tmp") continue;
    manifest_entry e;
    e.path = rel;
    auto crc = file_crc32c(it->path(), &e.bytes);
    if (!crc) return crc.err();
    e.crc32c = *crc;
    entries.push_back(std::move(e));
  }
  if (ec) return error{errc::io_error, "cannot list " + quoted(dir) + ": " + ec.message()};
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });

  const auto tmp = dir / (std::string(file_manifest_name) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "strata-files 1\n";
    char crc[16];
    for (const auto& e : entries) {
      std::snprintf(crc, sizeof crc, "%08x", e.crc32c);
      out << crc << ' ' << e.bytes << ' ' << e.path << '\n';
    }
    out << "end " << entries.size() << '\n';
    out.flush();
    if (!out) return error{errc::io_error, "cannot write " + quoted(tmp)};
  }
  STRATA_TRY(fsync_path(tmp, false));
  std::filesystem::rename(tmp, dir / file_manifest_name, ec);
  if (ec) return error{errc::io_error, "cannot rename " + quoted(tmp) + ": " + ec.message()};
  STRATA_TRY(fsync_path(dir, true));
  return entries;
}

expected<std::vector<manifest_entry>> verify_file_manifest(const std::filesystem::path& dir) {
  const auto list = dir / file_manifest_name;
  // A FILES that is a device (a link to /dev/zero) would be read forever.
  if (auto regular = check_regular_file(list, "checkpoint file list"); !regular) {
    if (regular.err().code() == errc::invalid_argument)
      return error{errc::corrupt_data, regular.err().message()};
  }
  std::ifstream in(list);
  if (!in)
    return error{errc::not_found,
                 quoted(dir) + " has no " + file_manifest_name + ": an incomplete checkpoint"};
  std::string line;
  if (!std::getline(in, line) || line != "strata-files 1")
    return error{errc::format_mismatch, quoted(list) + ": not a strata file list"};
  std::vector<manifest_entry> entries;
  bool ended = false;
  uint64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    auto malformed = [&] {
      return error{errc::corrupt_data,
                   quoted(list) + ":" + std::to_string(line_no) + ": malformed entry"};
    };
    const char* p = line.data();
    const char* end = line.data() + line.size();
    if (line.rfind("end ", 0) == 0) {
      uint64_t count = 0;
      auto r = std::from_chars(p + 4, end, count);
      if (r.ec != std::errc{} || r.ptr != end) return malformed();
      if (count != entries.size())
        return error{errc::corrupt_data, quoted(list) + ":" + std::to_string(line_no) +
                                             ": count does not match the entries"};
      ended = true;
      break;
    }
    manifest_entry e;
    auto r1 = std::from_chars(p, end, e.crc32c, 16);
    if (r1.ec != std::errc{} || r1.ptr == end || *r1.ptr != ' ') return malformed();
    auto r2 = std::from_chars(r1.ptr + 1, end, e.bytes);
    if (r2.ec != std::errc{} || r2.ptr == end || *r2.ptr != ' ' || r2.ptr + 1 == end)
      return malformed();
    e.path.assign(r2.ptr + 1, end);
    if (e.path.find("..") != std::string::npos || e.path.front() == '/') return malformed();
    entries.push_back(std::move(e));
  }
  if (!ended) return error{errc::corrupt_data, quoted(list) + " is truncated (no end line)"};
  for (const auto& e : entries) {
    const auto file = dir / e.path;
    uint64_t bytes = 0;
    auto crc = file_crc32c(file, &bytes);
    if (!crc)
      return error{crc.err().code(), "checkpoint file " + quoted(file) + " listed in " +
                                         quoted(list) + ": " + crc.err().message()};
    if (bytes != e.bytes)
      return error{errc::corrupt_data, "checkpoint file " + quoted(file) + " has " +
                                           std::to_string(bytes) + " bytes, the list says " +
                                           std::to_string(e.bytes)};
    if (*crc != e.crc32c)
      return error{errc::corrupt_data, "checkpoint file " + quoted(file) + ": checksum mismatch"};
  }
  return entries;
}

}  // namespace strata
