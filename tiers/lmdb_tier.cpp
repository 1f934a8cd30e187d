// lmdb_tier: opening and closing environments and tables, the table
// directory (layout and live-row count), and the small accessors. The read
// path, the write path and the data-file helpers are in lmdb_tier_read.cpp,
// lmdb_tier_write.cpp and lmdb_tier_file.cpp.
#include "tiers/lmdb_tier.hpp"

#include <lmdb.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include "tiers/lmdb_tier_internal.hpp"

namespace strata {

using namespace lmdb_detail;

namespace lmdb_detail {

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
    case EIO: {
      // LMDB turns a short write into EIO, and a full file system makes
      // exactly that: a write that ran out of space part-way. Said as
      // what it is when the path's file system has (almost) nothing left.
      struct statvfs fs {};
      if (::statvfs(path.c_str(), &fs) == 0 &&
          uint64_t{fs.f_bavail} * fs.f_frsize < full_disk_bytes) {
        msg += ": No space left on device (" +
               std::to_string(uint64_t{fs.f_bavail} * fs.f_frsize) +
               " bytes free on the file system of " + quoted(path) + ")";
        return error{errc::disk_full, std::move(msg)};
      }
      return error{errc::io_error, std::move(msg)};
    }
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

}  // namespace lmdb_detail

namespace {

// Layouts and live-row counts of the tables of one environment live in this
// named database, keyed "layout/<table>" and "live/<table>". The live count is
// updated in the same transaction as the rows, so it never drifts.
constexpr char meta_db_name[] = "__strata_meta__";

// --- shared environments ------------------------------------------------------
// LMDB allows one MDB_env per file per process, so tiers of several tables in
// one directory share it: a process-wide registry of open environments, used
// only while opening (the tiers themselves take no locks).
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

}  // namespace

lmdb_tier::impl::~impl() {
  if (reader != nullptr) mdb_txn_abort(reader);
  if (env) {
    std::lock_guard lock(registry_mutex);
    if (auto it = env->open_tables.find(config.table); it != env->open_tables.end())
      env->open_tables.erase(it);
    // the environment closes with its last tier
    env.reset();
  }
}

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

}  // namespace strata
