// CUDA backend of the HBM cache interface (tiers/cache_backend.hpp): the
// same geometry, hash, LRU and batch rules as cpu_cache, with the slots and
// records in device memory and every operation enqueued on one explicit
// CUDA stream. Device memory only (memory() == device); `done` runs on the
// cache's completion thread, in call order, once the call's event
// completed, so it must be quick (it holds up later completions).
//
// Batches are sorted on the device (CUB radix sort, stable) into the CPU's
// processing order (set, key, position); a warp per set then inserts that
// set's keys in order, a warp per distinct key applies its summed gradient
// (docs/gpu.md). Results, counts and evictions equal cpu_cache's.
//
// Memory: slots and records are allocated once at create(); batch scratch
// grows to the largest batch seen (then never again). Calls may be queued
// back to back without waiting for `done` (the stream orders them), except
// that dump checks its capacity against size(), which is current only once
// earlier inserts completed. Errors: CUDA failures reach `done` (or
// create()) as strata::error naming the CUDA call; errc::invalid_argument as
// cpu_cache. Owned by one cache-tier actor; not thread-safe.
//
// No CUDA header is included: the stream is CUstream_st*, the type
// cudaStream_t names.
#pragma once

#include <memory>

#include "tiers/cache_backend.hpp"

struct CUstream_st;

namespace strata::gpu {

using cuda_stream = ::CUstream_st*;  // == cudaStream_t

// The largest geometry (sets of `slabs_per_set` slabs) whose slots and
// records fit in `hbm_bytes` of device memory, scratch not counted.
cache_geometry geometry_for_bytes(const row_layout& layout, size_t hbm_bytes,
                                  uint32_t slabs_per_set = 2);

class cuda_cache final : public cache_backend {
 public:
  // `stream`: the stream every call is enqueued on; nullptr creates an
  // owned non-blocking stream. Fails with errc::unavailable without a
  // device, capacity_exceeded when the device memory is short.
  static expected<std::unique_ptr<cuda_cache>> create(row_layout layout, cache_geometry geometry,
                                                      cuda_stream stream = nullptr);
  ~cuda_cache() override;

  memory_kind memory() const override { return memory_kind::device; }
  const row_layout& layout() const override;
  const cache_geometry& geometry() const override;
  size_t size() const override;
  cuda_stream stream() const;

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
  // Enqueues the reset and waits for the stream (a CUDA error is reported
  // by the next call's `done`).
  void clear() override;

  struct impl;

 private:
  explicit cuda_cache(std::unique_ptr<impl> m);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::gpu
