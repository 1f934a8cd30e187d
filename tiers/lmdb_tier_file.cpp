// lmdb_tier's data-file helpers: the truncation check run before an
// environment opens, the last-page cover kept after every commit, and the
// compacting copy checkpoints take.
#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tiers/lmdb_tier.hpp"
#include "tiers/lmdb_tier_internal.hpp"

namespace strata {

using namespace lmdb_detail;

namespace {

// --- truncated-file check -----------------------------------------------------
// LMDB 0.9 data file: pages 0 and 1 are meta pages, each a 16-byte page header
// followed by MDB_meta (mdb.c):
//   0 mm_magic u32, 4 mm_version u32, 8 mm_address ptr, 16 mm_mapsize size_t,
//   24 mm_dbs[2] (48 B each; mm_dbs[FREE_DBI].md_pad is the page size),
//   120 mm_last_pg size_t, 128 mm_txnid size_t.
// LMDB uses the meta with the larger txnid. Every page up to mm_last_pg must
// be in the file, or reading it through the map raises SIGBUS.
constexpr uint32_t lmdb_magic = 0xBEEFC0DE;
constexpr size_t page_header_bytes = 16;
constexpr size_t meta_bytes = 136;
static_assert(sizeof(size_t) == 8, "the meta page layout below is LMDB's 64-bit layout");

struct meta_page {
  uint32_t magic = 0;
  uint32_t page_size = 0;
  uint64_t last_page = 0;
  uint64_t txnid = 0;
};

bool read_meta(int fd, uint64_t offset, meta_page& out) {
  unsigned char buf[page_header_bytes + meta_bytes];
  if (::pread(fd, buf, sizeof buf, static_cast<off_t>(offset)) != static_cast<ssize_t>(sizeof buf))
    return false;
  const unsigned char* m = buf + page_header_bytes;
  std::memcpy(&out.magic, m + 0, 4);
  std::memcpy(&out.page_size, m + 24, 4);
  std::memcpy(&out.last_page, m + 120, 8);
  std::memcpy(&out.txnid, m + 128, 8);
  return out.magic == lmdb_magic;
}

}  // namespace

namespace lmdb_detail {

status check_data_file(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};  // a new environment
    return error{errc::io_error,
                 "cannot open LMDB data file " + quoted(file) + ": " + std::strerror(errno)};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return error{errc::io_error, "cannot stat " + quoted(file) + ": " + std::strerror(e)};
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return {};  // LMDB initializes an empty file
  }
  meta_page m0, m1;
  const bool ok0 = read_meta(fd, 0, m0);
  const bool psize_ok = ok0 && m0.page_size >= 512 && m0.page_size <= 65536 &&
                        (m0.page_size & (m0.page_size - 1)) == 0;
  const bool ok1 = psize_ok && read_meta(fd, m0.page_size, m1);
  ::close(fd);
  if (!psize_ok) {
    return error{errc::corrupt_data, "LMDB data file " + quoted(file) +
                                         " has no valid meta page (" + std::to_string(size) +
                                         " bytes): truncated or not an LMDB file"};
  }
  if (!ok1 || size < 2 * uint64_t{m0.page_size}) {
    return error{errc::corrupt_data, "LMDB data file " + quoted(file) + " is truncated: " +
                                         std::to_string(size) + " bytes, second meta page missing"};
  }
  const meta_page& newest = m1.txnid > m0.txnid ? m1 : m0;
  const uint64_t need = (newest.last_page + 1) * uint64_t{m0.page_size};
  if (size < need) {
    return error{errc::corrupt_data,
                 "LMDB data file " + quoted(file) + " is truncated: " + std::to_string(size) +
                     " bytes, but its meta page records " + std::to_string(newest.last_page + 1) +
                     " pages of " + std::to_string(m0.page_size) + " bytes (" +
                     std::to_string(need) + " bytes)"};
  }
  return {};
}

}  // namespace lmdb_detail

// LMDB skips writing pages that were allocated and freed in the same
// transaction ("loose" pages, mdb_page_flush). Were such a page the last
// one, the file would end before the page its meta records and the
// truncation check would refuse a healthy file. Not seen in practice (a
// randomized churn of stores, tombstones and erases never produced it), but
// one fstat per commit keeps "file size >= (last page + 1) * page size"
// true by construction; posix_fallocate only ever extends.
status lmdb_tier::impl::cover_last_page() {
  MDB_envinfo info;
  mdb_env_info(env->env, &info);
  const uint64_t need = (uint64_t{info.me_last_pgno} + 1) * env->page_size;
  int fd = -1;
  if (mdb_env_get_fd(env->env, &fd) != 0 || fd < 0) return {};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {};
  if (static_cast<uint64_t>(st.st_size) >= need) return {};
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(need));
  if (rc != 0) return lmdb_error(rc, "cannot extend the data file of " + where, path());
  return {};
}

status lmdb_tier::copy_compacted(const std::filesystem::path& destination) {
  const int rc = copy_env(impl_->env->env, destination);
  if (rc != 0)
    return lmdb_error(rc, "cannot copy " + impl_->where + " to " + destination.string(),
                      impl_->path());
  return {};
}

}  // namespace strata
