// The CUDA cache behind host memory: a cache_backend whose buffers are
// host memory (memory() == host), as the cache-tier actor and the DRAM tier
// hold rows, with the rows themselves resident in HBM (a cuda_cache).
//
// Each call copies its inputs into a pinned staging buffer, uploads them on
// a copy stream, runs the cuda_cache operation on the compute stream (which
// waits for the upload by an event), downloads the results on the copy
// stream and, on the cache's completion thread, copies them from pinned
// memory into the caller's buffers before `done` runs. Two staging sets
// alternate, so a call queued behind another uploads while the other
// computes; a third call waits for the first to complete.
//
// Semantics, counts and errors are cuda_cache's (and so cpu_cache's): a
// query writes only the hit positions of `rows`; insert returns the evicted
// dirty rows; dump copies size() rows. Staging buffers grow to the largest
// batch seen (create's `max_batch` sizes them up front, so steady-state
// calls never allocate). Not thread-safe: one owner (a cache-tier actor).
#pragma once

#include <memory>

#include "tiers/cache_backend.hpp"

namespace strata::gpu {

class staged_cache final : public cache_backend {
 public:
  // errc::unavailable without a device; capacity_exceeded when HBM or
  // pinned memory is short.
  static expected<std::unique_ptr<staged_cache>> create(row_layout layout, cache_geometry geometry,
                                                        size_t max_batch = 4096);
  ~staged_cache() override;

  memory_kind memory() const override { return memory_kind::host; }
  const row_layout& layout() const override;
  const cache_geometry& geometry() const override;
  size_t size() const override;

  void query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
             memory_span<uint32_t> miss_indices, cache_counts& counts,
             cache_completion done) override;
  void insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows, bool dirty,
              memory_span<uint64_t> evicted_keys, memory_span<std::byte> evicted_rows,
              cache_counts& counts, cache_completion done) override;
  void update(memory_span<const uint64_t> keys, memory_span<const float> grads,
              const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
              cache_counts& counts, cache_completion done) override;
  void dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out, bool include_clean,
            bool clear_dirty, cache_counts& counts, cache_completion done) override;
  void clear() override;

  struct impl;

 private:
  explicit staged_cache(std::unique_ptr<impl> m);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
