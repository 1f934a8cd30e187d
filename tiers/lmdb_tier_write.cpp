// lmdb_tier's write path: stores, tombstones and erases, each one sorted
// write transaction through a cursor that also keeps the live-row count;
// and sync() for MDB_NOSYNC environments.
#include <lmdb.h>

#include <cstring>
#include <string>

#include "tiers/lmdb_tier.hpp"
#include "tiers/lmdb_tier_internal.hpp"

namespace strata {

using namespace lmdb_detail;

// One write transaction over `order` through a cursor; commits, or aborts
// when `abort_at_end` (tests).
status lmdb_tier::impl::write_sorted(write_kind kind, const_rows_span rows,
                                     std::span<const uint64_t> versions, bool abort_at_end) {
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
  uint64_t written = 0, stale = 0;
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
        // Keep-newer: a row never replaces a newer stored row (a retried
        // flush batch lands behind later ones; its write-behind copies are
        // gone). The put above found the stored value: no extra read.
        // Tombstones (TTL expiry) always delete; a row replaces a tombstone.
        if (kind == write_kind::rows && old_live &&
            stored_version(dv) > meta_of(rows[e.index]).version) {
          ++stale;
          rc = 0;
          continue;
        }
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
  if ((rc = commit_txn(txn, path())) != 0)
    return lmdb_error(rc, "cannot commit a write to " + where, path());
  live = new_live;
  ++stats.transactions;
  if (kind == write_kind::rows) stats.rows_written += written;
  stats.stale_rows_skipped += stale;
  if (kind == write_kind::tombstones) stats.tombstones_written += written;
  return cover_last_page();
}

status lmdb_tier::store(std::span<const uint64_t> keys, const_rows_span rows, bool /*dirty*/,
                        row_buffer& /*spilled*/) {
  if (keys.empty()) return {};
  unstage(keys);  // a staged read of these keys is older than this write
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
  unstage(keys);
  impl_->sort_batch(keys, /*dedupe=*/true);
  return impl_->write_sorted(impl::write_kind::tombstones, {}, versions, false);
}

status lmdb_tier::erase(std::span<const uint64_t> keys) {
  if (keys.empty()) return {};
  unstage(keys);
  impl_->sort_batch(keys, /*dedupe=*/true);
  return impl_->write_sorted(impl::write_kind::erase, {}, {}, false);
}

status lmdb_tier::take_dirty(row_buffer& /*out*/) { return {}; }

status lmdb_tier::sync() {
  const int rc = sync_env(impl_->env->env, impl_->path());
  if (rc != 0) return lmdb_error(rc, "cannot sync " + impl_->where, impl_->path());
  return {};
}

}  // namespace strata
