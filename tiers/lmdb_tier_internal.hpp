// Internal to lmdb_tier: shared between tiers/lmdb_tier*.cpp, included by
// nothing else. Holds the key encoding, the shared-environment record and
// lmdb_tier::impl, whose members are defined by seam:
//   lmdb_tier.cpp        environment open/close, table metadata, options
//   lmdb_tier_read.cpp   lookup, dump, range_scan
//   lmdb_tier_write.cpp  store, erase, tombstones, batched transactions, sync
//   lmdb_tier_file.cpp   data-file truncation check, compacting copy
#pragma once

#include <lmdb.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/flat_map.hpp"
#include "common/hash.hpp"
#include "common/io_env.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata {
namespace lmdb_detail {

constexpr size_t key_bytes = 12;

struct lmdb_key {
  unsigned char bytes[key_bytes];
  MDB_val val() { return MDB_val{key_bytes, bytes}; }
};

inline lmdb_key make_key(uint32_t partition, uint64_t key) {
  static_assert(std::endian::native == std::endian::little);
  lmdb_key k;
  const uint32_t p = __builtin_bswap32(partition);
  const uint64_t q = __builtin_bswap64(key);
  std::memcpy(k.bytes, &p, 4);
  std::memcpy(k.bytes + 4, &q, 8);
  return k;
}

inline uint32_t partition_of_val(const MDB_val& k) {
  const auto* b = static_cast<const unsigned char*>(k.mv_data);
  uint32_t p = 0;
  for (int i = 0; i < 4; ++i) p = (p << 8) | b[i];
  return p;
}

inline uint64_t key_of_val(const MDB_val& k) {
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
inline bool is_tombstone(const MDB_val& v) {
  return v.mv_size >= 4 && (static_cast<const unsigned char*>(v.mv_data)[3] & 1) != 0;
}

// The stored value's version (row.hpp: bytes 8..15, little-endian), read
// without decoding; the keep-newer check of a write.
inline uint64_t stored_version(const MDB_val& v) {
  if (v.mv_size < 16) return 0;
  const auto* b = static_cast<const unsigned char*>(v.mv_data) + 8;
  uint64_t out = 0;
  for (int i = 7; i >= 0; --i) out = (out << 8) | b[i];
  return out;
}

inline std::string quoted(const std::filesystem::path& p) { return p.string(); }

// Below this much free space an EIO from LMDB is reported as disk_full.
inline constexpr uint64_t full_disk_bytes = uint64_t{1} << 20;

// `what` names the table or the path; the path is added when it does not.
// EIO on a full file system (LMDB's answer to a short write) is disk_full.
error lmdb_error(int rc, const std::string& what, const std::filesystem::path& path);

// The environment's storage operations through the fault-injection seam
// (common/io_env.hpp): an injected failure aborts the transaction as a
// failed commit would. Each returns 0 or an LMDB/errno code.
inline int commit_txn(MDB_txn* txn, const std::filesystem::path& path) {
  if (const int e = io().fault(io_op::lmdb_commit, path.native())) {
    mdb_txn_abort(txn);
    return e;
  }
  return mdb_txn_commit(txn);
}
inline int sync_env(MDB_env* env, const std::filesystem::path& path) {
  if (const int e = io().fault(io_op::lmdb_sync, path.native())) return e;
  return mdb_env_sync(env, 1);
}
// The copy's path is its destination (a checkpoint's shard directory).
inline int copy_env(MDB_env* env, const std::filesystem::path& destination) {
  if (const int e = io().fault(io_op::lmdb_copy, destination.native())) return e;
  return mdb_env_copy2(env, destination.c_str(), MDB_CP_COMPACT);
}

// Refuses a data file shorter than the pages its newest meta page records
// (lmdb_tier_file.cpp). A missing or empty file is fine.
status check_data_file(const std::filesystem::path& file);

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

struct meta_key {
  std::string text;
  MDB_val val() { return MDB_val{text.size(), text.data()}; }
};

}  // namespace lmdb_detail

// --- the tier -----------------------------------------------------------------

struct lmdb_tier::impl {
  row_layout layout;
  lmdb_tier_config config;
  std::shared_ptr<lmdb_detail::shared_env> env;
  MDB_dbi dbi = 0;
  std::string where;  // "table 'T' at PATH"
  lmdb_detail::meta_key live_key;
  uint64_t live = 0;
  lmdb_tier_stats stats;

  MDB_txn* reader = nullptr;  // reset between batches, renewed per batch
  std::vector<lmdb_detail::sort_entry> order;
  std::vector<std::byte> value;        // one encoded row
  std::vector<std::byte> scratch_row;  // decoded tombstones land here
  std::vector<uint32_t> batch_misses;
  std::vector<MDB_val> found_values;  // per sorted lookup entry

  // Staged reads (lmdb_tier::stage): key -> slot of staged_records;
  // staged_present[slot] = 0 for a key staged as not stored.
  flat_map<uint32_t> staged;
  std::vector<std::byte> staged_records;
  std::vector<uint8_t> staged_present;
  std::vector<uint32_t> staged_free;
  std::vector<uint64_t> unstaged_keys;  // lookup scratch: keys left for LMDB
  std::vector<uint32_t> unstaged_at, unstaged_misses;
  std::vector<std::byte> unstaged_rows;
  void unstage(uint64_t key) {
    if (const uint32_t* slot = staged.find(key)) {
      staged_free.push_back(*slot);
      staged.erase(key);
    }
  }

  ~impl();

  const std::filesystem::path& path() const { return env->path; }
  status open_table();

  // Fills `order` with the batch sorted by LMDB key; keeps only the last
  // copy of a repeated key when `dedupe`.
  void sort_batch(std::span<const uint64_t> keys, bool dedupe) {
    order.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      order[i] = lmdb_detail::sort_entry{partition_of(keys[i], config.partitions),
                                         static_cast<uint32_t>(i), keys[i]};
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

  status write_sorted(write_kind kind, const_rows_span rows, std::span<const uint64_t> versions,
                      bool abort_at_end);
  status cover_last_page();

  struct reader_guard {
    MDB_txn* txn;
    ~reader_guard() { mdb_txn_reset(txn); }
  };

  status begin_read();
  status find(uint64_t key, uint32_t partition, MDB_val& value);
  expected<bool> decode(uint64_t key, const MDB_val& value, std::byte* record);
  status lookup(std::span<const uint64_t> keys, rows_span out, std::vector<uint32_t>& misses);
  template <class More>
  status scan(MDB_cursor_op first, uint32_t partition, More more, const row_visitor& visit);
};

}  // namespace strata
