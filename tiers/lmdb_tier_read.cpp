// lmdb_tier's read path: point lookups (one pass, or sorted two-pass for
// larger batches), full dumps and per-partition range scans.
#include <lmdb.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "tiers/lmdb_tier.hpp"
#include "tiers/lmdb_tier_internal.hpp"

namespace strata {

using namespace lmdb_detail;

namespace {

// Lookup batches at least this large are sorted by LMDB key and read in two
// passes (lookup()). Measured at 1M keys, batches of 4096, warm cache:
// unsorted one-pass 0.79 M rows/s, sorted two-pass 0.92 M rows/s, plain
// mdb_get loop 0.83 M rows/s. A cursor (MDB_SET) was slower than mdb_get.
constexpr size_t sorted_lookup_min = 64;

}  // namespace

status lmdb_tier::impl::begin_read() {
  int rc = reader == nullptr ? mdb_txn_begin(env->env, nullptr, MDB_RDONLY, &reader)
                             : mdb_txn_renew(reader);
  if (rc != 0) return lmdb_error(rc, "cannot begin a read of " + where, path());
  return {};
}

// Finds keys[i]'s stored value; mv_data = nullptr when absent. The value
// stays valid until the read transaction is reset.
status lmdb_tier::impl::find(uint64_t key, uint32_t partition, MDB_val& value) {
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
expected<bool> lmdb_tier::impl::decode(uint64_t key, const MDB_val& value, std::byte* record) {
  if (value.mv_data == nullptr) return false;
  const bool tomb = is_tombstone(value);
  auto kind = decode_row(layout, key, {static_cast<const std::byte*>(value.mv_data), value.mv_size},
                         tomb ? scratch_row.data() : record, where);
  if (!kind) return kind.err();
  return *kind == decoded_kind::row;
}

status lmdb_tier::impl::lookup(std::span<const uint64_t> keys, rows_span out,
                               std::vector<uint32_t>& misses) {
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
status lmdb_tier::impl::scan(MDB_cursor_op first, uint32_t partition, More more,
                             const row_visitor& visit) {
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

status lmdb_tier::lookup(std::span<const uint64_t> keys, rows_span out,
                         std::vector<uint32_t>& misses) {
  impl& m = *impl_;
  if (m.staged.empty()) {
    if (!keys.empty()) ++m.stats.read_transactions;
    return m.lookup(keys, out, misses);
  }
  // Staged keys are served from their staged copy; the rest are read in
  // one transaction. A key repeated in the batch is served from the same
  // staged copy, so the staged entries are dropped only at the end.
  const size_t rb = m.layout.record_bytes();
  auto& left = m.unstaged_keys;
  auto& left_at = m.unstaged_at;
  left.clear();
  left_at.clear();
  const size_t misses_before = misses.size();
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const uint32_t* slot = m.staged.find(keys[i]);
    if (slot == nullptr) {
      left.push_back(keys[i]);
      left_at.push_back(i);
      continue;
    }
    ++m.stats.staged_hits;
    if (m.staged_present[*slot]) {
      std::memcpy(out[i], m.staged_records.data() + size_t{*slot} * rb, rb);
      ++m.stats.hits;
    } else {
      misses.push_back(i);
      ++m.stats.misses;
    }
  }
  if (!left.empty()) {
    // Read into the caller's rows at their own positions: one row per
    // position, so the rows of the left keys are read into a packed span
    // and moved only when the batch is mixed.
    auto& left_misses = m.unstaged_misses;
    left_misses.clear();
    ++m.stats.read_transactions;
    if (left.size() == keys.size()) {
      STRATA_TRY(m.lookup(left, out, left_misses));
      misses.insert(misses.end(), left_misses.begin(), left_misses.end());
    } else {
      auto& rows = m.unstaged_rows;
      rows.resize(left.size() * rb);
      STRATA_TRY(m.lookup(left, {rows.data(), rb}, left_misses));
      size_t j = 0;
      for (size_t i = 0; i < left.size(); ++i) {
        if (j < left_misses.size() && left_misses[j] == i) {
          misses.push_back(left_at[i]);
          ++j;
          continue;
        }
        std::memcpy(out[left_at[i]], rows.data() + i * rb, rb);
      }
    }
  }
  std::sort(misses.begin() + static_cast<std::ptrdiff_t>(misses_before), misses.end());
  for (uint64_t k : keys) m.unstage(k);
  return {};
}

void lmdb_tier::stage(uint64_t key, const std::byte* record) {
  impl& m = *impl_;
  const size_t rb = m.layout.record_bytes();
  uint32_t slot;
  if (const uint32_t* at = m.staged.find(key)) {
    slot = *at;
  } else {
    if (!m.staged_free.empty()) {
      slot = m.staged_free.back();
      m.staged_free.pop_back();
    } else {
      slot = static_cast<uint32_t>(m.staged_present.size());
      m.staged_present.push_back(0);
      m.staged_records.resize(m.staged_records.size() + rb);
    }
    m.staged.try_emplace(key, slot);
  }
  m.staged_present[slot] = record != nullptr;
  if (record != nullptr) std::memcpy(m.staged_records.data() + size_t{slot} * rb, record, rb);
}

void lmdb_tier::unstage(std::span<const uint64_t> keys) {
  if (impl_->staged.empty()) return;
  for (uint64_t k : keys) impl_->unstage(k);
}

void lmdb_tier::clear_staged() {
  impl_->staged.clear();
  impl_->staged_free.clear();
  impl_->staged_present.clear();
  impl_->staged_records.clear();
}

bool lmdb_tier::is_staged(uint64_t key) const { return impl_->staged.contains(key); }
size_t lmdb_tier::staged_rows() const { return impl_->staged.size(); }

status lmdb_tier::dump(const row_visitor& visit) {
  return impl_->scan(
      MDB_FIRST, 0, [](const MDB_val&) { return true; }, visit);
}

status lmdb_tier::range_scan(uint32_t partition, const row_visitor& visit) {
  return impl_->scan(
      MDB_SET_RANGE, partition,
      [partition](const MDB_val& k) { return partition_of_val(k) == partition; }, visit);
}

}  // namespace strata
