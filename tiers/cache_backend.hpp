// The HBM embedding cache interface, implemented by the CPU backend
// (cpu_cache.hpp, always built) and the CUDA backend (gpu/, optional).
//
// Geometry (shared by both backends, so they keep the same resident keys):
// `sets` sets, each of `slabs_per_set` slabs of 32 slots; key -> set is
// cache_set_of(key, sets). Replacement is LRU by a per-batch tick: every
// call (query, insert, update) advances the tick by one and stamps the
// slots it touches; a full set evicts its slot with the smallest tick
// (ties: lowest slot index). Within one batch, keys are processed set by
// set, and inside a set in ascending key order (duplicates collapsed), so
// the outcome is independent of thread scheduling.
//
// Precisely, for a key that is not resident, insert takes the lowest empty
// slot of its set, else evicts the slot with the smallest tick (ties: the
// lowest slot index). Slots touched earlier in the same batch carry the
// current tick, so they are evicted only after every older slot of the set.
// A batch with more distinct new keys for one set than the set has slots
// therefore lets its later keys (ascending order) evict its earlier ones,
// and since those all tie on the current tick, every further key replaces
// the set's lowest slot again: the set ends with the batch's other keys
// plus its *last* new key in slot 0, and each key that passed through slot
// 0 is evicted (returned if dirty, even though this batch inserted it).
// Every query/insert/update call, a rejected one excepted, advances the
// tick — an empty batch too; dump and clear do not. A hit, a skipped
// insert and an update all stamp the slot. The cache stores records byte
// for byte: it never writes row_meta.freq or row_meta.tick (its LRU tick
// lives in slot metadata), so a hit returns exactly the inserted or
// updated bytes.
//
// Errors come through `done`: errc::invalid_argument for buffers of the
// wrong memory kind, buffers below the capacities stated per call, or an
// optimizer that does not match the layout. A rejected call changes nothing.
// Counts are per batch position unless stated otherwise.
//
// Calls are asynchronous: buffers are caller-owned memory_spans (host or
// device, see memory()), counts are written into a caller-owned
// cache_counts, and `done` runs once the results are complete — at once for
// the CPU backend, from a stream callback for the CUDA one. Buffers must
// stay valid until then. Row buffers hold records (row.hpp) packed at
// layout().record_bytes().
//
// A cache instance is owned by one cache-tier actor; calls must not overlap
// unless a backend says otherwise: one whose concurrent_queries() holds
// lets query() and query_weights() calls overlap each other (never any
// other call). Overlapping queries each advance the tick; the slots two of
// them both hit keep either one's tick.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/error.hpp"
#include "tiers/memory_span.hpp"
#include "tiers/optimizer.hpp"
#include "tiers/row.hpp"

namespace strata {

struct cache_geometry {
  static constexpr uint32_t slab_slots = 32;
  uint32_t sets = 1024;
  uint32_t slabs_per_set = 1;
  uint32_t set_slots() const { return slab_slots * slabs_per_set; }
  uint64_t capacity_rows() const { return uint64_t{sets} * set_slots(); }
};

struct cache_counts {
  uint32_t hits = 0;
  uint32_t misses = 0;
  uint32_t evicted = 0;   // dirty rows written to the evicted buffers
  uint32_t skipped = 0;   // insert: rows not stored (present with a higher or equal version)
  uint32_t replaced = 0;  // insert: resident rows overwritten in place by a higher version
};

using cache_completion = std::function<void(status)>;

class cache_backend {
 public:
  virtual ~cache_backend() = default;

  virtual memory_kind memory() const = 0;
  virtual const row_layout& layout() const = 0;
  virtual const cache_geometry& geometry() const = 0;
  virtual size_t size() const = 0;  // resident rows
  // True if query() and query_weights() may run concurrently with each
  // other (several serving threads reading one table); every other call
  // still needs the cache to itself. A backend that says so overrides
  // query_weights(): the default one splits records in the backend's own
  // scratch.
  virtual bool concurrent_queries() const { return false; }

  // For each key: on a hit, copies its record to rows[i] (stride
  // record_bytes); on a miss, appends i to miss_indices (ascending order).
  // counts.hits / counts.misses are set (positions). Duplicates hit or miss
  // together. Capacities: rows >= keys.size() records, miss_indices >=
  // keys.size() (a device backend cannot size it in advance).
  virtual void query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
                     memory_span<uint32_t> miss_indices, cache_counts& counts,
                     cache_completion done) = 0;
  // query() for a reader that sends rows on (serving): a hit writes only its
  // version (8 bytes, u64) to versions[8 i] and its weights (4 dim bytes,
  // layout().dim floats) to weights[4 dim i], as bytes (places in a reply
  // payload, any alignment), instead of its whole record. Misses leave
  // their places untouched; hits, misses, ticks and miss_indices as for
  // query(). Host memory only. Capacities: versions >= 8 keys.size() bytes,
  // weights >= 4 dim keys.size() bytes, miss_indices >= keys.size(). This
  // default queries into records of its own and splits them; the CPU
  // backend copies from each slot straight to both places.
  virtual void query_weights(memory_span<const uint64_t> keys, memory_span<std::byte> versions,
                             memory_span<std::byte> weights, memory_span<uint32_t> miss_indices,
                             cache_counts& counts, cache_completion done);

  // Inserts rows. A key already present keeps the copy with the higher
  // version (equal: the resident one, counts.skipped; it takes the incoming
  // access metadata — freq, tick — if the incoming tick is newer). A full set evicts
  // its least recently used slot; evicted *dirty* rows are written to
  // evicted_keys / evicted_rows (counts.evicted of them; capacity must be
  // >= keys.size()), clean ones are dropped. `dirty` marks the inserted
  // rows dirty (a write-back is owed to the shard); a stored row takes the
  // `dirty` flag, a skipped one keeps its own. Duplicates in the batch
  // collapse to the copy with the highest version (ties: first position),
  // the other copies count as skipped, so stored + skipped = keys.size().
  // Evicted rows appear in processing order (set, then key).
  virtual void insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows,
                      bool dirty, memory_span<uint64_t> evicted_keys,
                      memory_span<std::byte> evicted_rows, cache_counts& counts,
                      cache_completion done) = 0;

  // Applies gradients in place: duplicate keys' gradients are summed in
  // batch order, then the optimizer runs once per key; updated rows are
  // marked dirty and their version bumped. Keys not resident are appended
  // to miss_indices (every position of that key, ascending), counts.misses
  // of them; counts.hits counts the other positions. miss_indices capacity
  // >= keys.size(); grads hold keys.size() x dim floats; optimizer.kind must
  // be the layout's. Sums start from the first copy's gradient and add the
  // later copies left to right; the version goes up by exactly one per key
  // per call, however often the key repeats.
  virtual void update(memory_span<const uint64_t> keys, memory_span<const float> grads,
                      const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
                      cache_counts& counts, cache_completion done) = 0;

  // Copies the dirty rows (include_clean: every resident row) to keys_out /
  // rows_out (capacity >= size(), checked up front) in set, then slot
  // order. With clear_dirty the copied rows are marked clean (pass end: the
  // caller writes them back); without it flags are unchanged (a snapshot).
  // counts.hits is the number of rows written. Does not touch LRU ticks.
  virtual void dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out,
                    bool include_clean, bool clear_dirty, cache_counts& counts,
                    cache_completion done) = 0;

  // Drops every row (dirty ones included: call dump first).
  virtual void clear() = 0;

 private:
  std::vector<std::byte> split_records_;  // the default query_weights()'s records
};

// Checks query_weights()'s buffers (kinds and capacities); an error names
// the first one that is wrong.
status check_query_weights(const cache_backend& cache, size_t keys, memory_kind keys_kind,
                           const memory_span<std::byte>& versions,
                           const memory_span<std::byte>& weights,
                           const memory_span<uint32_t>& miss_indices);

}  // namespace strata
