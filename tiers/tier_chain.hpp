// The tier chain inside a shard: DRAM -> write-behind -> LMDB -> initializer.
//
// The tiers are an ordered list of row_store (data, not fields): a lookup
// asks the first tier for every key, passes only the misses to the next,
// and so on; rows found below the first tier are promoted into it (clean);
// keys found nowhere get the table's initializer row. Rows the first tier
// spills (dirty evictions) are stored into the next tier, and so on down.
//
// The write-behind buffer is the bridge to the last (durable) tier: its
// batches are taken with take_flush() and confirmed with flushed(seq). The
// shard actor sends them to its ssd_flush actor; drain() does the same
// synchronously (tests, graceful stop).
//
// Admission: with admission_threshold > 0, a key that reaches the
// initializer is admitted (gets a row in the first tier) only after that
// many sightings, counted by a count-min sketch; until then lookups return
// its initializer row flagged not admitted, and pushes to it are dropped
// and counted. TTL (dram_tier_config::ttl_ticks): expire() removes idle rows from the DRAM
// tier and writes tombstones down so an older LMDB copy never comes back.
//
// Owned by one shard actor; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/flat_map.hpp"
#include "tiers/count_min.hpp"
#include "tiers/dram_tier.hpp"
#include "tiers/lmdb_tier.hpp"
#include "tiers/row_store.hpp"
#include "tiers/table.hpp"
#include "tiers/write_behind.hpp"

namespace strata {

struct tier_chain_config {
  uint32_t admission_threshold = 0;  // 0: every key admitted at once
  uint32_t sketch_width = 1 << 20;
  uint32_t sketch_depth = 4;
  // Incarnation of the cluster (docs/architecture.md, Semantics: Rows):
  // initial rows get version (incarnation, 0), so rows created after a
  // restore outrank every version of the run before it.
  uint16_t incarnation = 0;
};

// Optional seam for metrics: told before and after each tier's lookup (the
// owner times it; the chain reads no clock).
class tier_observer {
 public:
  virtual ~tier_observer() = default;
  virtual void before_lookup(size_t tier) = 0;
  virtual void after_lookup(size_t tier, size_t keys) = 0;
};

struct tier_chain_stats {
  std::vector<uint64_t> hits_per_tier;  // by tier index
  uint64_t initialized = 0;             // keys served by the initializer
  uint64_t not_admitted = 0;            // lookups of keys not yet admitted
  uint64_t dropped_pushes = 0;          // pushes to keys not yet admitted
  uint64_t promoted = 0;
  uint64_t flushed_rows = 0;  // rows the durable tier confirmed (flushed())
  uint64_t tombstones = 0;
};

class tier_chain {
 public:
  // `dram` is the first tier; `durable` the last (may be null: DRAM-only
  // chain, then spills are dropped — only for caches whose rows live
  // elsewhere). The chain owns all three.
  tier_chain(table_config table, tier_chain_config config, std::unique_ptr<dram_tier> dram,
             std::unique_ptr<lmdb_tier> durable);

  const table_config& table() const { return table_; }
  const std::vector<row_store*>& tiers() const { return tiers_; }

  // Looks up every key (duplicates allowed) into out[i]. admitted[i] is set
  // to 0 for keys not yet admitted (served their initializer row), else 1.
  status lookup(std::span<const uint64_t> keys, rows_span out, std::vector<uint8_t>* admitted);

  // Applies gradients: duplicates are summed in batch order, then the
  // optimizer runs once per key (rows brought into DRAM first). Writes the
  // updated rows' versions to new_versions (per input position, 0 for a
  // dropped push) if given.
  status push(std::span<const uint64_t> keys, const float* grads, size_t grad_stride,
              std::vector<uint64_t>* new_versions);

  // Writes whole rows (a cache tier's write-back) as dirty rows into DRAM.
  // A row older than the chain's copy (lower version) is ignored.
  status write_back(std::span<const uint64_t> keys, const_rows_span rows);

  // Flush pipeline to the durable tier.
  bool take_flush(row_buffer& rows, uint64_t& seq);
  // The same, each row handed to append(key, record) (written once, into
  // the caller's flush batch).
  template <class Append>
  bool take_flush_into(Append&& append, uint64_t& seq) {
    return write_behind_->take_batch_into(std::forward<Append>(append), seq);
  }
  void flushed(uint64_t seq);
  // Writes every dirty row down synchronously and syncs the durable tier.
  status drain();

  void set_tick(uint32_t tick);
  uint32_t tick() const { return tick_; }
  // The admission sketch (null without admission), for checkpoints.
  count_min_sketch* sketch() { return sketch_ ? &*sketch_ : nullptr; }
  // TTL: removes rows idle for ttl_ticks from DRAM (and any queued copy)
  // and writes tombstones to the durable tier. While write-behind batches
  // are in flight the tombstones wait, so an older copy landing later can't
  // overwrite them; keys that get a row again meanwhile are skipped.
  status expire();

  dram_tier& dram() { return *dram_; }
  write_behind_buffer& write_behind() { return *write_behind_; }
  lmdb_tier* durable() { return durable_.get(); }
  const tier_chain_stats& stats() const { return stats_; }
  // Not owned; null to stop observing.
  void set_observer(tier_observer* observer) { observer_ = observer; }

 private:
  status store_spilled(row_buffer& spilled);
  // Walks the tiers without promoting: found[i] = index of the tier that
  // had keys[i], or -1.
  status locate(std::span<const uint64_t> keys, rows_span out, std::vector<int>& found);
  status write_tombstones();
  std::vector<uint64_t> pending_tombstones_;
  // Per-call scratch, kept so that a batch allocates nothing once they have
  // grown. Separate sets for locate, lookup and push: push calls lookup,
  // both call locate.
  struct locate_scratch {
    std::vector<uint32_t> pending, still, misses;
    std::vector<uint64_t> sub_keys;
    row_buffer rows;
  } locate_;
  struct lookup_scratch {
    std::vector<int> found;
    row_buffer promote, created, unique, spilled;
    flat_map<uint32_t> fresh;  // key -> first position served by the initializer
    flat_map<uint8_t> seen;
  } lookup_;
  struct push_scratch {
    std::vector<uint64_t> unique, versions, miss_keys;
    std::vector<float> summed;
    std::vector<uint32_t> position_of, misses;
    std::vector<uint8_t> dropped, admitted;
    std::vector<int> found;
    row_buffer rows, updated, spilled;
    flat_map<uint32_t> index;
  } push_;
  table_config table_;
  tier_chain_config config_;
  std::unique_ptr<dram_tier> dram_;
  std::unique_ptr<write_behind_buffer> write_behind_;
  std::unique_ptr<lmdb_tier> durable_;
  std::vector<row_store*> tiers_;
  std::optional<count_min_sketch> sketch_;
  tier_chain_stats stats_;
  tier_observer* observer_ = nullptr;
  uint32_t tick_ = 0;
};

}  // namespace strata
