// DRAM tier: the in-memory row store of a shard.
//
// An open-addressing hash index (key -> slot, linear probing from
// dram_slot_hash, tombstone-free backward-shift deletion) over an arena of
// fixed-size records. Capacity is a byte budget covering everything the tier
// allocates (arena, index, policy metadata); the number of row slots is
// derived from it. When full, a store evicts by the configured policy:
//
//   lru: CLOCK approximation of LRU. Each access sets the slot's reference
//        bit; the hand sweeps slots in arena order, clearing set bits and
//        evicting the first slot found clear. Tie-break: arena order from
//        the hand.
//   lfu: evicts the resident row with the smallest access frequency
//        (row_meta::freq); ties broken by the oldest last-access tick, then
//        by the smallest key. A newly stored row starts at freq 1.
//        (A lazily repaired binary min-heap over slots: hits only bump the
//        record's freq/tick; the heap catches up when a stale entry reaches
//        its root, so a hit costs no heap work.)
//
// Accesses. A lookup hit, a push and a store of a key are all accesses:
// each increments freq (saturating at 2^32-1), sets tick to the current
// tick and sets the CLOCK reference bit. The tier keeps its own access
// metadata: a stored record's incoming freq/tick are ignored (a new row
// starts at freq 1, an overwrite continues the resident row's count).
//
// Within one store() batch, rows stored by that batch are not chosen as
// victims while any other row can be; only a batch with more distinct keys
// than capacity_rows() evicts its own earlier rows (CLOCK: from the hand;
// LFU: by the same order). Dirty bits are sticky: a clean store over a
// dirty row leaves it dirty, so a write-down obligation is never lost.
//
// Dirty rows (stored with dirty = true, or updated by push) are the only
// ones ever written down: eviction spills them, take_dirty() hands them all
// over and marks them clean. Lookups touch access metadata only.
//
// Access time is a tick passed in by the owner (set_tick), never read from a
// clock. TTL: rows whose last access is more than ttl_ticks old are removed
// by expire(), which returns their keys so the chain can write tombstones.
//
// Owned by one shard actor; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tiers/optimizer.hpp"
#include "tiers/row_store.hpp"

namespace strata {

enum class eviction_policy : uint8_t { lru = 0, lfu = 1 };

struct dram_tier_config {
  size_t capacity_bytes = size_t{1} << 30;  // everything the tier allocates
  eviction_policy policy = eviction_policy::lru;
  uint32_t ttl_ticks = 0;  // 0: rows never expire
};

struct dram_tier_stats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;        // rows pushed out to make room
  uint64_t dirty_evictions = 0;  // of which were spilled (dirty)
  uint64_t expired = 0;          // rows removed by TTL
};

class dram_tier final : public row_store {
 public:
  dram_tier(row_layout layout, dram_tier_config config);
  ~dram_tier() override;

  std::string_view name() const override { return "dram"; }
  const row_layout& layout() const override;
  status lookup(std::span<const uint64_t> keys, rows_span out,
                std::vector<uint32_t>& misses) override;
  status store(std::span<const uint64_t> keys, const_rows_span rows, bool dirty,
               row_buffer& spilled) override;
  status erase(std::span<const uint64_t> keys) override;
  status take_dirty(row_buffer& out) override;
  status dump(const row_visitor& visit) override;
  size_t size() const override;

  // Applies one optimizer step per key to resident rows and marks them
  // dirty. `keys` must be unique (the caller reduced duplicates);
  // grads[i * grad_stride .. + dim] is key i's gradient. Absent keys are
  // appended to `misses` and left alone.
  status push(std::span<const uint64_t> keys, const float* grads, size_t grad_stride,
              const optimizer_config& optimizer, std::vector<uint32_t>& misses);

  // True if the key is resident (no access recorded).
  bool contains(uint64_t key) const;
  void set_tick(uint32_t tick);
  // Removes rows not accessed within ttl_ticks of the current tick; appends
  // their keys to `expired`. Dirty expired rows are dropped (a tombstone
  // supersedes them).
  void expire(std::vector<uint64_t>& expired);

  size_t capacity_rows() const;
  size_t memory_bytes() const;  // bytes allocated, all structures included
  // The smallest capacity_bytes that holds `rows` rows of `layout` under
  // `policy` (for sizing a tier by rows; tests, benchmarks).
  static size_t budget_for_rows(const row_layout& layout, eviction_policy policy, size_t rows);
  const dram_tier_stats& stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata
