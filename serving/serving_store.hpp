// The serving store: one embedding table served read-mostly, as HugeCTR's
// Hierarchical Parameter Server did — an embedding cache (cache_backend: the
// CPU backend, or the CUDA one) over a DRAM tier over an LMDB tier.
//
// Rows are kept in the serving layout (weights only, no optimizer state) and
// carry their training version (docs/architecture.md, Semantics: Rows).
// load_checkpoint() copies a checkpoint's rows (every shard copy, opened
// read-only) into the store's own LMDB environment, dropping the optimizer
// state; the LMDB tier then holds every row, the DRAM tier and the cache
// hold the hot ones.
//
// lookup(): the cache answers what it holds; its misses go to DRAM, then to
// LMDB (found rows are promoted into DRAM); keys found nowhere get the
// table's default vector (version 0), which is not an error. Duplicate keys
// get the same row. Rows fetched from below the cache are inserted into it
//   - synchronously (before lookup returns) while the recent hit rate is
//     below `async_insert_hit_rate`: a cold cache fills at once;
//   - asynchronously (queued; insert_pending() does it, the server calls it
//     after the reply is sent) while the hit rate is at or above it: a warm
//     cache keeps misses off the reply's latency.
// The hit rate is measured over the last `hit_rate_window` looked-up keys.
//
// apply_updates(): online updates (key, weights, version). A row is applied
// only if its version is higher than the stored one, so versions never go
// backwards whatever order updates arrive in; a restored training cluster's
// rows (higher incarnation) supersede the old ones. Applied rows are written
// through to LMDB, refreshed in DRAM if resident and in the cache if
// resident (queued cache inserts are done first, so an older queued row
// can never land over a newer update).
//
// Thread-safe. Lookups run concurrently (a backend with
// concurrent_queries(): the CPU one) under a shared lock, misses included:
// their DRAM reads and promotions and the queueing of cache inserts take
// turns, their LMDB reads run side by side, each in a read transaction of
// its own. A synchronous cache insert and every other call (updates,
// prefetch, queued inserts, key listing) hold the store exclusively, so no
// update lands within a lookup: a lookup sees one state of the table.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "tiers/cache_backend.hpp"
#include "tiers/dram_tier.hpp"
#include "tiers/lmdb_tier.hpp"
#include "tiers/row.hpp"

namespace strata::serving {

struct serving_store_config {
  std::string table = "default";
  uint32_t dim = 0;                      // 0: taken from the checkpoint
  std::filesystem::path lmdb_path;       // the store's own environment (emptied at open; see
                                         // prepare_directory)
  uint32_t partitions = 4096;            // the cluster's partition count (LMDB keys)
  size_t dram_bytes = size_t{64} << 20;  // DRAM tier budget
  float default_value = 0.0f;            // every element of the default vector
  double async_insert_hit_rate = 0.9;    // >=: insert misses into the cache asynchronously
  uint32_t hit_rate_window = 4096;       // keys over which the hit rate is measured
  uint32_t warmup_keys = 0;              // most frequent checkpoint keys put in the cache
  // LMDB read handles for misses read side by side (each holds a slot of
  // LMDB's reader table): beyond this many concurrent lookups with misses
  // below DRAM, a lookup waits for a handle. 1 to max_lmdb_read_handles
  // (tiers/lmdb_tier.hpp).
  uint32_t lmdb_read_handles = 16;
};

struct serving_stats {
  uint64_t lookups = 0;  // lookup calls
  uint64_t keys = 0;     // keys looked up
  uint64_t cache_hits = 0;
  uint64_t dram_hits = 0;
  uint64_t lmdb_hits = 0;
  uint64_t defaults = 0;       // keys answered with the default vector
  uint64_t sync_inserts = 0;   // rows inserted into the cache before the reply
  uint64_t async_inserts = 0;  // rows queued and inserted after it
  uint64_t updates_applied = 0;
  uint64_t updates_ignored = 0;  // not newer than the stored row
  uint64_t loaded_rows = 0;
  uint64_t warmed_rows = 0;
  uint64_t lmdb_read_handles = 0;  // open now (idle or lent), at most the config's
  uint64_t lmdb_read_waits = 0;    // lookups whose misses waited for a handle (all were lent)
};

// A lookup's result: n rows of `dim` floats and their versions (0: default).
// With `encoded` set (the binary server and the UCX endpoint, which send
// rows as a rows payload) the store writes each row's version and weights
// straight into `payload` in the wire layout (client/wire.hpp,
// encode_rows: dim, n, versions, weights; sent as it lies, no split and no
// encode copy) and leaves `weights` and `versions` empty. Without it they
// hold the rows and `payload` is left alone.
struct lookup_result {
  uint32_t dim = 0;
  std::vector<float> weights;      // n x dim
  std::vector<uint64_t> versions;  // n
  bool encoded = false;
  std::vector<std::byte> payload;  // encoded: the rows payload

  static constexpr size_t counts_bytes = 8;  // dim and n, two u32
  // True when `payload` holds this result's rows.
  bool has_payload() const { return encoded && payload.size() >= counts_bytes; }
  size_t size() const {
    if (!has_payload()) return versions.size();
    uint32_t n;
    std::memcpy(&n, payload.data() + 4, 4);
    return n;
  }
  uint64_t version(size_t i) const {
    if (!has_payload()) return versions[i];
    uint64_t v;
    std::memcpy(&v, payload.data() + counts_bytes + i * 8, 8);
    return v;
  }
  // Row i's dim weights, whichever form holds them.
  const float* row_weights(size_t i) const {
    if (!has_payload()) return weights.data() + i * dim;
    return reinterpret_cast<const float*>(payload.data() + counts_bytes + size() * 8) + i * dim;
  }
};

// The file that marks a directory as a serving store's own environment.
inline constexpr const char* serving_marker_name = "STRATA_SERVING";

// Makes `path` the store's empty environment directory: creates it (with
// the marker) when absent; when present, deletes data.mdb and lock.mdb only
// if it holds nothing but those and the marker. Any other content, or LMDB
// files without the marker (a shard environment, a checkpoint root, the
// shards' ssd_path), is refused with an error naming the path and what it
// holds, and nothing is removed.
status prepare_directory(const std::filesystem::path& path);

class serving_store {
 public:
  // Opens the store over `cache` (serving layout: dim, with_state = false;
  // the store owns it). Errors name the LMDB path.
  static expected<std::unique_ptr<serving_store>> open(serving_store_config config,
                                                       std::unique_ptr<cache_backend> cache);
  ~serving_store();

  // Copies every row of the checkpoint directory `dir` (ckpt-...) into the
  // store, then warms the cache. The checkpoint's table must be this one
  // and its dim the store's. Errors name the checkpoint and the field.
  status load_checkpoint(const std::filesystem::path& dir);

  const std::string& table() const;
  uint32_t dim() const;

  // Looks up keys (any count, duplicates allowed) into `out`.
  status lookup(std::span<const uint64_t> keys, lookup_result& out);
  // Brings keys into the cache (fetching from DRAM/LMDB) without returning rows.
  status prefetch(std::span<const uint64_t> keys);
  // Inserts the rows queued by asynchronous lookups into the cache.
  status insert_pending();
  bool has_pending() const;  // takes no lock

  // weights: keys.size() x dim floats. Applies rows newer than the stored ones.
  status apply_updates(std::span<const uint64_t> keys, std::span<const float> weights,
                       std::span<const uint64_t> versions);

  // Appends up to `limit` stored keys to `out`, in LMDB order (partition,
  // then key); the LMDB tier holds every row of the store.
  status list_keys(uint32_t limit, std::vector<uint64_t>& out);
  // The version stored for `key` (0 if absent).
  expected<uint64_t> version_of(uint64_t key);
  double recent_hit_rate() const;
  serving_stats stats() const;  // a copy

 private:
  struct impl;
  explicit serving_store(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serving
