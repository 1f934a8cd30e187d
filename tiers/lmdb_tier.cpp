#include "tiers/lmdb_tier.hpp"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include "common/hash.hpp"

namespace strata {
namespace {

// Layouts and live-row counts of the tables of one environment live in this
// named database, keyed "layout/<table>" and "live/<table>". The live count is
// updated in the same transaction as the rows, so it never drifts.
constexpr char meta_db_name[] = "__strata_meta__";

// Lookup batches at least this large are sorted by LMDB key and read in two
// passes (lookup()). Measured at 1M keys, batches of 4096, warm cache:
// unsorted one-pass 0.79 M rows/s, sorted two-pass 0.92 M rows/s, plain
// mdb_get loop 0.83 M rows/s. A cursor (MDB_SET) was slower than mdb_get.
constexpr size_t sorted_lookup_min = 64;

constexpr size_t key_bytes = 12;

struct lmdb_key {
  unsigned char bytes[key_bytes];
  MDB_val val() { return MDB_val{key_bytes, bytes}; }
};

lmdb_key make_key(uint32_t partition, uint64_t key) {
  static_assert(std::endian::native == std::endian::little);
  lmdb_key k;
  const uint32_t p = __builtin_bswap32(partition);
  const uint64_t q = __builtin_bswap64(key);
  std::memcpy(k.bytes, &p, 4);
  std::memcpy(k.bytes + 4, &q, 8);
  return k;
}

uint32_t partition_of_val(const MDB_val& k) {
  const auto* b = static_cast<const unsigned char*>(k.mv_data);
  uint32_t p = 0;
  for (int i = 0; i < 4; ++i) p = (p << 8) | b[i];
  return p;
}

uint64_t key_of_val(const MDB_val& k) {
  const auto* b = static_cast<const unsigned char*>(k.mv_data);
  uint64_t key = 0;
  for (int i = 4; i < 12; ++i) key = (key << 8) | b[i];
  return key;
}

// A batch entry in LMDB key order: (partition, key), then batch position.
struct sort_entry {
  uint32_t partition;
  uint32_t index;
  uint64_t key;
  bool operator<(const sort_entry& o) const {
    if (partition != o.partition) return partition < o.partition;
    if (key != o.key) return key < o.key;
    return index < o.index;
  }
  bool same_key(const sort_entry& o) const { return partition == o.partition && key == o.key; }
};

// The stored value's tombstone flag (row.hpp: byte 3, bit 0), read without
// decoding; used to keep the live-row count.
bool is_tombstone(const MDB_val& v) {
  return v.mv_size >= 4 && (static_cast<const unsigned char*>(v.mv_data)[3] & 1) != 0;
}

std::string quoted(const std::filesystem::path& p) { return p.string(); }

// `what` names the table or the path; the path is added when it does not.
error lmdb_error(int rc, const std::string& what, const std::filesystem::path& path) {
  std::string msg = what;
  if (what.find(path.string()) == std::string::npos) msg += " (" + quoted(path) + ")";
  msg += ": ";
  msg += mdb_strerror(rc);
  switch (rc) {
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
      return error{errc::disk_full, std::move(msg)};
    case MDB_TXN_FULL:
      return error{errc::capacity_exceeded, std::move(msg)};
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
      return error{errc::corrupt_data, std::move(msg)};
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
      return error{errc::format_mismatch, std::move(msg)};
    default:
      return error{errc::io_error, std::move(msg)};
  }
}

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

// --- shared environments ------------------------------------------------------
// LMDB allows one MDB_env per file per process, so tiers of several tables in
// one directory share it: a process-wide registry of open environments, used
// only while opening (the tiers themselves take no locks).
struct shared_env {
  MDB_env* env = nullptr;
  std::filesystem::path path;
  bool sync = false;
  unsigned page_size = 4096;
  MDB_dbi meta_dbi = 0;
  std::multiset<std::string> open_tables;  // guarded by registry_mutex; one entry per handle
  ~shared_env() {
    if (env != nullptr) mdb_env_close(env);
  }
};

std::mutex registry_mutex;
std::map<std::string, std::weak_ptr<shared_env>> registry;  // by canonical path

expected<std::shared_ptr<shared_env>> open_env(const std::filesystem::path& dir,
                                               const lmdb_tier_config& config) {
  const std::string id = dir.string();
  if (auto it = registry.find(id); it != registry.end()) {
    if (auto env = it->second.lock()) {
      if (env->sync != config.sync) {
        return error{errc::invalid_argument,
                     "LMDB environment " + id +
                         " is already open with sync = " + (env->sync ? "true" : "false")};
      }
      return env;
    }
  }
  STRATA_TRY(check_data_file(dir / "data.mdb"));
  auto env = std::make_shared<shared_env>();
  env->path = dir;
  env->sync = config.sync;
  int rc = mdb_env_create(&env->env);
  if (rc != 0) return lmdb_error(rc, "cannot create LMDB environment", dir);
  // Read-only: a small map, which LMDB raises to the committed size. A
  // reader has no use for the writer's reservation, and 1 TiB of address
  // space per open checkpoint copy ran out in processes reading many
  // (under ThreadSanitizer, whose application range is 1.5 TiB, at the
  // second).
  const size_t map_bytes = config.read_only ? size_t{1} << 20 : config.map_bytes;
  if ((rc = mdb_env_set_mapsize(env->env, map_bytes)) != 0 ||
      (rc = mdb_env_set_maxdbs(env->env, config.max_tables + 1)) != 0) {
    return lmdb_error(rc, "cannot configure LMDB environment", dir);
  }
  // NOTLS: read transactions are not tied to a thread (actors move). NORDAHEAD:
  // lookups are random point reads; readahead would only evict useful pages.
  unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
  if (!config.sync) flags |= MDB_NOSYNC;
  if (config.read_only) flags |= MDB_RDONLY | MDB_NOLOCK;
  if ((rc = mdb_env_open(env->env, dir.c_str(), flags, 0644)) != 0)
    return lmdb_error(rc, "cannot open LMDB environment", dir);
  MDB_stat st;
  if ((rc = mdb_env_stat(env->env, &st)) != 0) return lmdb_error(rc, "mdb_env_stat", dir);
  env->page_size = st.ms_psize;
  registry[id] = env;
  return env;
}

std::string layout_record(const row_layout& l) {
  return "format " + std::to_string(row_format_version) + ", dim " + std::to_string(l.dim) +
         ", optimizer " + std::string(to_string(l.optimizer)) + ", " +
         (l.with_state ? "with" : "without") + " optimizer state";
}

struct meta_key {
  std::string text;
  MDB_val val() { return MDB_val{text.size(), text.data()}; }
};

}  // namespace

// --- the tier -----------------------------------------------------------------

struct lmdb_tier::impl {
  row_layout layout;
  lmdb_tier_config config;
  std::shared_ptr<shared_env> env;
  MDB_dbi dbi = 0;
  std::string where;  // "table 'T' at PATH"
  meta_key live_key;
  uint64_t live = 0;
  lmdb_tier_stats stats;

  MDB_txn* reader = nullptr;  // reset between batches, renewed per batch
  std::vector<sort_entry> order;
  std::vector<std::byte> value;        // one encoded row
  std::vector<std::byte> scratch_row;  // decoded tombstones land here
  std::vector<uint32_t> batch_misses;
  std::vector<MDB_val> found_values;  // per sorted lookup entry

  ~impl() {
    if (reader != nullptr) mdb_txn_abort(reader);
    if (env) {
      std::lock_guard lock(registry_mutex);
      if (auto it = env->open_tables.find(config.table); it != env->open_tables.end())
        env->open_tables.erase(it);
      // the environment closes with its last tier
      env.reset();
    }
  }

  const std::filesystem::path& path() const { return env->path; }
  status open_table();

  // Fills `order` with the batch sorted by LMDB key; keeps only the last
  // copy of a repeated key when `dedupe`.
  void sort_batch(std::span<const uint64_t> keys, bool dedupe) {
    order.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      order[i] =
          sort_entry{partition_of(keys[i], config.partitions), static_cast<uint32_t>(i), keys[i]};
    std::sort(order.begin(), order.end());
    if (!dedupe) return;
    size_t out = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i + 1 < order.size() && order[i].same_key(order[i + 1])) continue;  // a later copy wins
      order[out++] = order[i];
    }
    order.resize(out);
  }

  enum class write_kind { rows, tombstones, erase };

  // One write transaction over `order` through a cursor; commits, or aborts
  // when `abort_at_end` (tests).
  status write_sorted(write_kind kind, const_rows_span rows, std::span<const uint64_t> versions,
                      bool abort_at_end) {
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env->env, nullptr, 0, &txn);
    if (rc != 0) return lmdb_error(rc, "cannot begin a write to " + where, path());
    MDB_cursor* cursor = nullptr;
    if ((rc = mdb_cursor_open(txn, dbi, &cursor)) != 0) {
      mdb_txn_abort(txn);
      return lmdb_error(rc, "cannot open a cursor on " + where, path());
    }
    const size_t value_bytes =
        kind == write_kind::rows ? layout.encoded_bytes() : encoded_header_bytes;
    value.resize(layout.encoded_bytes());
    int64_t live_delta = 0;
    uint64_t written = 0;
    for (const sort_entry& e : order) {
      lmdb_key k = make_key(e.partition, e.key);
      MDB_val kv = k.val();
      if (kind == write_kind::erase) {
        MDB_val old;
        rc = mdb_cursor_get(cursor, &kv, &old, MDB_SET);
        if (rc == MDB_NOTFOUND) continue;
        if (rc == 0) {
          if (!is_tombstone(old)) --live_delta;
          rc = mdb_cursor_del(cursor, 0);
        }
      } else {
        if (kind == write_kind::rows) {
          encode_row(layout, e.key, rows[e.index], value.data());
        } else {
          encode_tombstone(layout, e.key, versions[e.index], value.data());
        }
        const bool new_live = kind == write_kind::rows;
        MDB_val dv{value_bytes, value.data()};
        // NOOVERWRITE finds the old value (for the live count) with the same
        // search that inserts a new key; an existing one is replaced in place.
        rc = mdb_cursor_put(cursor, &kv, &dv, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) {
          const bool old_live = !is_tombstone(dv);
          MDB_val nv{value_bytes, value.data()};
          rc = mdb_cursor_put(cursor, &kv, &nv, MDB_CURRENT);
          live_delta += int64_t{new_live} - int64_t{old_live};
        } else if (rc == 0) {
          live_delta += int64_t{new_live};
        }
        ++written;
      }
      if (rc != 0) {
        mdb_cursor_close(cursor);
        mdb_txn_abort(txn);
        return lmdb_error(rc, "cannot write key " + std::to_string(e.key) + " to " + where, path());
      }
    }
    mdb_cursor_close(cursor);
    // Another handle of the same table (a shard's reader and its ssd_flush
    // writer share the table) may have written since: the count stored in
    // this transaction is the authority, not our cached copy.
    uint64_t base = live;
    {
      MDB_val kv = live_key.val();
      MDB_val dv;
      if (mdb_get(txn, env->meta_dbi, &kv, &dv) == 0 && dv.mv_size == sizeof base)
        std::memcpy(&base, dv.mv_data, sizeof base);
    }
    const uint64_t new_live = static_cast<uint64_t>(static_cast<int64_t>(base) + live_delta);
    if (live_delta != 0) {
      MDB_val kv = live_key.val();
      MDB_val dv{sizeof new_live, const_cast<uint64_t*>(&new_live)};
      if ((rc = mdb_put(txn, env->meta_dbi, &kv, &dv, 0)) != 0) {
        mdb_txn_abort(txn);
        return lmdb_error(rc, "cannot update the row count of " + where, path());
      }
    }
    if (abort_at_end) {
      mdb_txn_abort(txn);
      return {};
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
      return lmdb_error(rc, "cannot commit a write to " + where, path());
    live = new_live;
    ++stats.transactions;
    if (kind == write_kind::rows) stats.rows_written += written;
    if (kind == write_kind::tombstones) stats.tombstones_written += written;
    return cover_last_page();
  }

  // LMDB skips writing pages that were allocated and freed in the same
  // transaction ("loose" pages, mdb_page_flush). Were such a page the last
  // one, the file would end before the page its meta records and the
  // truncation check would refuse a healthy file. Not seen in practice (a
  // randomized churn of stores, tombstones and erases never produced it), but
  // one fstat per commit keeps "file size >= (last page + 1) * page size"
  // true by construction; posix_fallocate only ever extends.
  status cover_last_page() {
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

  struct reader_guard {
    MDB_txn* txn;
    ~reader_guard() { mdb_txn_reset(txn); }
  };

  status begin_read() {
    int rc = reader == nullptr ? mdb_txn_begin(env->env, nullptr, MDB_RDONLY, &reader)
                               : mdb_txn_renew(reader);
    if (rc != 0) return lmdb_error(rc, "cannot begin a read of " + where, path());
    return {};
  }

  // Finds keys[i]'s stored value; mv_data = nullptr when absent. The value
  // stays valid until the read transaction is reset.
  status find(uint64_t key, uint32_t partition, MDB_val& value) {
    lmdb_key k = make_key(partition, key);
    MDB_val kv = k.val();
    const int rc = mdb_get(reader, dbi, &kv, &value);
    if (rc == MDB_NOTFOUND) {
      value = MDB_val{0, nullptr};
      return {};
    }
    if (rc != 0)
      return lmdb_error(rc, "cannot read key " + std::to_string(key) + " of " + where, path());
    return {};
  }

  // Checks and decodes a found value into `record`; true if it is a live row
  // (a tombstone is a miss and leaves `record` untouched).
  expected<bool> decode(uint64_t key, const MDB_val& value, std::byte* record) {
    if (value.mv_data == nullptr) return false;
    const bool tomb = is_tombstone(value);
    auto kind =
        decode_row(layout, key, {static_cast<const std::byte*>(value.mv_data), value.mv_size},
                   tomb ? scratch_row.data() : record, where);
    if (!kind) return kind.err();
    return *kind == decoded_kind::row;
  }

  status lookup(std::span<const uint64_t> keys, rows_span out, std::vector<uint32_t>& misses) {
    if (keys.empty()) return {};
    STRATA_TRY(begin_read());
    reader_guard guard{reader};
    size_t hits = 0;
    if (keys.size() < sorted_lookup_min) {
      for (size_t i = 0; i < keys.size(); ++i) {
        MDB_val value;
        STRATA_TRY(find(keys[i], partition_of(keys[i], config.partitions), value));
        auto found = decode(keys[i], value, out[i]);
        if (!found) return found.err();
        if (*found) {
          ++hits;
        } else {
          misses.push_back(static_cast<uint32_t>(i));
        }
      }
    } else {
      // Two passes: first every tree search in key order (branch pages stay
      // in cache), prefetching each value; then checksums and copies, whose
      // cache misses the prefetches have overlapped with the searches.
      sort_batch(keys, /*dedupe=*/false);
      found_values.resize(order.size());
      for (size_t j = 0; j < order.size(); ++j) {
        const sort_entry& e = order[j];
        MDB_val& v = found_values[j];
        if (j > 0 && order[j - 1].same_key(e)) {
          v = found_values[j - 1];
          continue;
        }
        STRATA_TRY(find(e.key, e.partition, v));
        const auto* p = static_cast<const char*>(v.mv_data);
        for (size_t off = 0; off < v.mv_size; off += 64) __builtin_prefetch(p + off);
      }
      batch_misses.clear();
      for (size_t j = 0; j < order.size(); ++j) {
        const sort_entry& e = order[j];
        auto found = decode(e.key, found_values[j], out[e.index]);
        if (!found) return found.err();
        if (*found) {
          ++hits;
        } else {
          batch_misses.push_back(e.index);
        }
      }
      std::sort(batch_misses.begin(), batch_misses.end());
      misses.insert(misses.end(), batch_misses.begin(), batch_misses.end());
    }
    stats.hits += hits;
    stats.misses += keys.size() - hits;
    return {};
  }

  // Visits live rows from the cursor's position while `more(key)` holds.
  template <class More>
  status scan(MDB_cursor_op first, uint32_t partition, More more, const row_visitor& visit) {
    MDB_txn* txn = nullptr;  // its own transaction: `visit` may call lookup()
    int rc = mdb_txn_begin(env->env, nullptr, MDB_RDONLY, &txn);
    if (rc != 0) return lmdb_error(rc, "cannot begin a scan of " + where, path());
    MDB_cursor* cursor = nullptr;
    if ((rc = mdb_cursor_open(txn, dbi, &cursor)) != 0) {
      mdb_txn_abort(txn);
      return lmdb_error(rc, "cannot open a cursor on " + where, path());
    }
    std::vector<std::byte> record(layout.record_bytes());
    lmdb_key start = make_key(partition, 0);
    MDB_val kv = start.val();
    MDB_val dv;
    status result;
    for (rc = mdb_cursor_get(cursor, &kv, &dv, first); rc == 0;
         rc = mdb_cursor_get(cursor, &kv, &dv, MDB_NEXT)) {
      if (kv.mv_size != key_bytes) {
        result = error{errc::corrupt_data,
                       "stored key of " + std::to_string(kv.mv_size) + " bytes in " + where};
        break;
      }
      if (!more(kv)) break;
      const uint64_t key = key_of_val(kv);
      auto kind = decode_row(layout, key, {static_cast<const std::byte*>(dv.mv_data), dv.mv_size},
                             record.data(), where);
      if (!kind) {
        result = kind.err();
        break;
      }
      if (*kind == decoded_kind::row) visit(key, record.data());
    }
    if (result && rc != 0 && rc != MDB_NOTFOUND)
      result = lmdb_error(rc, "cannot scan " + where, path());
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    return result;
  }
};

// Checks or records the table's layout and reads its live-row count, in one
// write transaction that also creates the table's database.
status lmdb_tier::impl::open_table() {
  impl& t = *this;
  shared_env& env = *t.env;
  MDB_txn* txn = nullptr;
  const bool read_only = t.config.read_only;
  const unsigned create = read_only ? 0u : unsigned{MDB_CREATE};
  int rc = mdb_txn_begin(env.env, nullptr, read_only ? MDB_RDONLY : 0u, &txn);
  if (rc != 0) return lmdb_error(rc, "cannot begin opening " + t.where, env.path);
  auto fail = [&](error e) {
    mdb_txn_abort(txn);
    return e;
  };
  if ((rc = mdb_dbi_open(txn, meta_db_name, create, &env.meta_dbi)) != 0)
    return fail(lmdb_error(rc, "cannot open the table directory of " + t.where, env.path));
  if ((rc = mdb_dbi_open(txn, t.config.table.c_str(), create, &t.dbi)) != 0)
    return fail(lmdb_error(rc, "cannot open " + t.where, env.path));

  const std::string want = layout_record(t.layout);
  meta_key layout_key{"layout/" + t.config.table};
  MDB_val kv = layout_key.val();
  MDB_val dv;
  rc = mdb_get(txn, env.meta_dbi, &kv, &dv);
  bool write_meta = false;
  if (rc == 0) {
    std::string have(static_cast<const char*>(dv.mv_data), dv.mv_size);
    if (have != want) {
      return fail(error{errc::format_mismatch,
                        t.where + " holds rows of " + have + "; opened with " + want});
    }
  } else if (rc == MDB_NOTFOUND) {
    write_meta = true;
  } else {
    return fail(lmdb_error(rc, "cannot read the layout of " + t.where, env.path));
  }

  kv = t.live_key.val();
  rc = mdb_get(txn, env.meta_dbi, &kv, &dv);
  if (rc == 0 && dv.mv_size == sizeof(uint64_t)) {
    std::memcpy(&t.live, dv.mv_data, sizeof t.live);
  } else if (rc == 0 || rc == MDB_NOTFOUND) {
    // No count recorded (a table written by something else): count once.
    MDB_cursor* cursor = nullptr;
    if ((rc = mdb_cursor_open(txn, t.dbi, &cursor)) != 0)
      return fail(lmdb_error(rc, "cannot open a cursor on " + t.where, env.path));
    MDB_val k, v;
    t.live = 0;
    for (rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
      if (!is_tombstone(v)) ++t.live;
    }
    mdb_cursor_close(cursor);
    if (rc != MDB_NOTFOUND) return fail(lmdb_error(rc, "cannot count " + t.where, env.path));
    write_meta = true;
  } else {
    return fail(lmdb_error(rc, "cannot read the row count of " + t.where, env.path));
  }

  if (write_meta && !read_only) {
    MDB_val lv{want.size(), const_cast<char*>(want.data())};
    kv = layout_key.val();
    if ((rc = mdb_put(txn, env.meta_dbi, &kv, &lv, 0)) != 0)
      return fail(lmdb_error(rc, "cannot record the layout of " + t.where, env.path));
    MDB_val cv{sizeof t.live, &t.live};
    kv = t.live_key.val();
    if ((rc = mdb_put(txn, env.meta_dbi, &kv, &cv, 0)) != 0)
      return fail(lmdb_error(rc, "cannot record the row count of " + t.where, env.path));
  }
  // Committed even when nothing changed: an aborted transaction would close
  // the database handles it opened.
  if ((rc = mdb_txn_commit(txn)) != 0)
    return lmdb_error(rc, "cannot commit opening " + t.where, env.path);
  return {};
}

expected<std::unique_ptr<lmdb_tier>> lmdb_tier::open(row_layout layout, lmdb_tier_config config) {
  if (config.table.empty() || config.table == meta_db_name)
    return error{errc::invalid_argument, "invalid LMDB table name '" + config.table + "'"};
  if (config.partitions == 0)
    return error{errc::invalid_argument, "LMDB tier needs at least one partition"};
  if (layout.dim == 0 || layout.dim > 0xffff || layout.state_words() > 0xffff)
    return error{errc::invalid_argument, "unsupported row layout for LMDB table '" + config.table +
                                             "': dim " + std::to_string(layout.dim)};
  std::error_code ec;
  if (config.read_only && !std::filesystem::is_directory(config.directory, ec))
    return error{errc::not_found, "no LMDB environment at " + quoted(config.directory)};
  if (!config.read_only) std::filesystem::create_directories(config.directory, ec);
  if (ec) {
    return error{errc::io_error,
                 "cannot create LMDB directory " + quoted(config.directory) + ": " + ec.message()};
  }
  auto dir = std::filesystem::canonical(config.directory, ec);
  if (ec) {
    return error{errc::io_error,
                 "cannot resolve LMDB directory " + quoted(config.directory) + ": " + ec.message()};
  }

  auto t = std::make_unique<impl>();
  t->layout = layout;
  t->config = config;
  t->where = "table '" + config.table + "' at " + dir.string();
  t->live_key.text = "live/" + config.table;
  t->scratch_row.resize(layout.record_bytes());

  std::lock_guard lock(registry_mutex);  // also serializes mdb_dbi_open
  auto env = open_env(dir, config);
  if (!env) return env.err();
  if ((*env)->open_tables.count(config.table) != 0 && !config.shared_handle)
    return error{errc::invalid_argument, t->where + " is already open in this process"};
  t->env = std::move(*env);
  if (auto opened = t->open_table(); !opened) {
    t->env.reset();  // must not erase an open_tables entry we did not add
    return opened.err();
  }
  t->env->open_tables.insert(config.table);
  return std::unique_ptr<lmdb_tier>(new lmdb_tier(std::move(t)));
}

lmdb_tier::lmdb_tier(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}

status lmdb_tier::copy_compacted(const std::filesystem::path& destination) {
  const int rc = mdb_env_copy2(impl_->env->env, destination.c_str(), MDB_CP_COMPACT);
  if (rc != 0)
    return lmdb_error(rc, "cannot copy " + impl_->where + " to " + destination.string(),
                      impl_->path());
  return {};
}
lmdb_tier::~lmdb_tier() = default;

const row_layout& lmdb_tier::layout() const { return impl_->layout; }
size_t lmdb_tier::size() const {
  // Re-read: another handle of this table may have written meanwhile.
  MDB_txn* txn = nullptr;
  if (mdb_txn_begin(impl_->env->env, nullptr, MDB_RDONLY, &txn) == 0) {
    MDB_val kv = impl_->live_key.val();
    MDB_val dv;
    if (mdb_get(txn, impl_->env->meta_dbi, &kv, &dv) == 0 && dv.mv_size == sizeof impl_->live)
      std::memcpy(&impl_->live, dv.mv_data, sizeof impl_->live);
    mdb_txn_abort(txn);
  }
  return impl_->live;
}
const std::filesystem::path& lmdb_tier::path() const { return impl_->path(); }
const lmdb_tier_stats& lmdb_tier::stats() const { return impl_->stats; }

status lmdb_tier::lookup(std::span<const uint64_t> keys, rows_span out,
                         std::vector<uint32_t>& misses) {
  return impl_->lookup(keys, out, misses);
}

status lmdb_tier::store(std::span<const uint64_t> keys, const_rows_span rows, bool /*dirty*/,
                        row_buffer& /*spilled*/) {
  if (keys.empty()) return {};
  impl_->sort_batch(keys, /*dedupe=*/true);
  return impl_->write_sorted(impl::write_kind::rows, rows, {}, false);
}

status lmdb_tier::write_then_abort(std::span<const uint64_t> keys, const_rows_span rows) {
  if (keys.empty()) return {};
  impl_->sort_batch(keys, /*dedupe=*/true);
  return impl_->write_sorted(impl::write_kind::rows, rows, {}, true);
}

status lmdb_tier::store_tombstones(std::span<const uint64_t> keys,
                                   std::span<const uint64_t> versions) {
  if (keys.size() != versions.size()) {
    return error{errc::invalid_argument, std::to_string(keys.size()) + " keys but " +
                                             std::to_string(versions.size()) +
                                             " tombstone versions for " + impl_->where};
  }
  if (keys.empty()) return {};
  impl_->sort_batch(keys, /*dedupe=*/true);
  return impl_->write_sorted(impl::write_kind::tombstones, {}, versions, false);
}

status lmdb_tier::erase(std::span<const uint64_t> keys) {
  if (keys.empty()) return {};
  impl_->sort_batch(keys, /*dedupe=*/true);
  return impl_->write_sorted(impl::write_kind::erase, {}, {}, false);
}

status lmdb_tier::take_dirty(row_buffer& /*out*/) { return {}; }

status lmdb_tier::dump(const row_visitor& visit) {
  return impl_->scan(
      MDB_FIRST, 0, [](const MDB_val&) { return true; }, visit);
}

status lmdb_tier::range_scan(uint32_t partition, const row_visitor& visit) {
  return impl_->scan(
      MDB_SET_RANGE, partition,
      [partition](const MDB_val& k) { return partition_of_val(k) == partition; }, visit);
}

status lmdb_tier::sync() {
  const int rc = mdb_env_sync(impl_->env->env, 1);
  if (rc != 0) return lmdb_error(rc, "cannot sync " + impl_->where, impl_->path());
  return {};
}

}  // namespace strata
