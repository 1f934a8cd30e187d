// CPU backend of the HBM cache interface (cache_backend.hpp): a real cache,
// used by the cache tier on machines without a GPU and the reference the
// CUDA backend is tested against. Host memory only; completes at once.
//
// Storage: per set, slabs_per_set x 32 slots of (key, tick, flags) metadata
// and a packed record arena. Owned by one cache-tier actor or a serving
// store; queries may overlap each other (concurrent_queries()), nothing else
// may overlap.
#pragma once

#include <memory>

#include "tiers/cache_backend.hpp"

namespace strata {

class cpu_cache final : public cache_backend {
 public:
  cpu_cache(row_layout layout, cache_geometry geometry);
  ~cpu_cache() override;

  memory_kind memory() const override { return memory_kind::host; }
  const row_layout& layout() const override;
  const cache_geometry& geometry() const override;
  size_t size() const override;
  // A query reads slots and stamps their ticks atomically.
  bool concurrent_queries() const override { return true; }

  void query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
             memory_span<uint32_t> miss_indices, cache_counts& counts,
             cache_completion done) override;
  // Copies each hit's version and weights from its slot straight to their
  // places (no record in between).
  void query_weights(memory_span<const uint64_t> keys, memory_span<std::byte> versions,
                     memory_span<std::byte> weights, memory_span<uint32_t> miss_indices,
                     cache_counts& counts, cache_completion done) override;
  void insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows, bool dirty,
              memory_span<uint64_t> evicted_keys, memory_span<std::byte> evicted_rows,
              cache_counts& counts, cache_completion done) override;
  void update(memory_span<const uint64_t> keys, memory_span<const float> grads,
              const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
              cache_counts& counts, cache_completion done) override;
  void dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out, bool include_clean,
            bool clear_dirty, cache_counts& counts, cache_completion done) override;
  void clear() override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata
