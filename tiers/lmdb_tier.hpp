// SSD tier: one LMDB environment per shard directory, one named database per
// table.
//
// Keys are 12 bytes big-endian (partition u32, key u64), so one partition is
// one contiguous key range (range_scan). Values are encoded rows (row.hpp)
// with a CRC32C over key and value: a corrupt value is reported with its key,
// table and path, never returned. Writes are batched: store() sorts the
// batch by LMDB key and writes it in one transaction through a cursor
// (last copy wins for repeated keys); an aborted transaction leaves the
// previous state intact. No MDB_WRITEMAP (a full disk would become SIGBUS);
// the environment reserves a large sparse map up front (growing the map
// would need every transaction closed); reads run in MDB_NOTLS transactions
// so they don't pin a thread. Before opening, the data file's size is
// checked against the last page LMDB's meta page records, so a truncated
// file is refused (LMDB itself dies with SIGBUS on one).
//
// Durability: with sync = false writes use MDB_NOSYNC and sync() makes them
// durable (checkpoints call it); with sync = true every commit is durable.
//
// Owned by one actor at a time; the environment handle itself may be shared
// by a reader and a writer object in one process (LMDB allows one writer).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tiers/row_store.hpp"

namespace strata {

// LMDB's reader table: 126 slots (the default; mdb_env_set_maxreaders is
// not called). Each open read transaction holds one.
inline constexpr uint32_t lmdb_reader_slots = 126;
// Read handles one user of an environment may keep open side by side (the
// serving store's pool, serving.lmdb_read_handles): the rest of the reader
// table is left to its other handles and to readers of its copies.
inline constexpr uint32_t max_lmdb_read_handles = 100;

struct lmdb_tier_config {
  std::filesystem::path directory;     // created if missing
  std::string table = "default";       // named database
  uint32_t partitions = 4096;          // P of the cluster (key -> partition_of)
  size_t map_bytes = size_t{1} << 40;  // reserved sparse map (1 TiB); not when read_only
  bool sync = false;                   // false: MDB_NOSYNC between sync() calls
  uint32_t max_tables = 64;            // named databases per environment
  // Open another handle of a table already open in this process: a shard
  // reads through one while its ssd_flush actor writes through the other
  // (LMDB: many readers, one writer). Without it a second open is refused.
  bool shared_handle = false;
  // Open an existing environment read-only without a lock file
  // (MDB_RDONLY | MDB_NOLOCK): reading a checkpoint's copy leaves its
  // directory untouched. The table must exist; writes fail. Only the
  // committed pages are mapped (map_bytes is not reserved).
  bool read_only = false;
};

struct lmdb_tier_stats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t rows_written = 0;
  uint64_t transactions = 0;
  uint64_t tombstones_written = 0;
  uint64_t stale_rows_skipped = 0;  // rows not stored: the stored copy was newer
  uint64_t read_transactions = 0;   // lookups that opened a read transaction
  uint64_t staged_hits = 0;         // keys a lookup served from staged reads (no transaction)
};

class lmdb_tier final : public row_store {
 public:
  // Opens (or creates) the environment and the table's database. Errors name
  // the path: io_error, disk_full, corrupt_data (truncated file),
  // format_mismatch.
  static expected<std::unique_ptr<lmdb_tier>> open(row_layout layout, lmdb_tier_config config);
  ~lmdb_tier() override;

  std::string_view name() const override { return "lmdb"; }
  const row_layout& layout() const override;
  // A tombstoned key is a miss. A corrupt value is an error naming the key.
  status lookup(std::span<const uint64_t> keys, rows_span out,
                std::vector<uint32_t>& misses) override;
  // One sorted write transaction for the whole batch. Never spills.
  status store(std::span<const uint64_t> keys, const_rows_span rows, bool dirty,
               row_buffer& spilled) override;
  status erase(std::span<const uint64_t> keys) override;
  status take_dirty(row_buffer& out) override;  // nothing is ever dirty here
  status dump(const row_visitor& visit) override;
  size_t size() const override;  // live rows (tombstones excluded)

  // Writes tombstones (TTL expiry) so older copies never come back.
  status store_tombstones(std::span<const uint64_t> keys, std::span<const uint64_t> versions);
  // Visits the rows of one partition with one cursor range scan.
  status range_scan(uint32_t partition, const row_visitor& visit);
  // Flushes MDB_NOSYNC writes to disk.
  status sync();
  // Writes a compacted copy of the whole environment (every table, the
  // committed state of one read transaction) to `destination`, an existing
  // empty directory (checkpoints). Errors name both paths.
  status copy_compacted(const std::filesystem::path& destination);
  const std::filesystem::path& path() const;
  const lmdb_tier_stats& stats() const;

  // Staged reads: rows another handle of this table read off the owner's
  // thread (the shard's reader) wait here until a lookup asks for them;
  // lookup() serves a staged key without a read transaction and drops it.
  // record == nullptr stages "not stored" (the lookup reports a miss). The
  // owner unstages keys whose stored copy may have changed since the read
  // (a flush landed); writes through this handle unstage their keys.
  void stage(uint64_t key, const std::byte* record);
  void unstage(std::span<const uint64_t> keys);
  void clear_staged();
  bool is_staged(uint64_t key) const;
  size_t staged_rows() const;

  // For tests: runs a write transaction that writes `keys` and then aborts.
  status write_then_abort(std::span<const uint64_t> keys, const_rows_span rows);

 private:
  struct impl;
  explicit lmdb_tier(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata
