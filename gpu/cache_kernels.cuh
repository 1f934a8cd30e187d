// Kernels of the CUDA cache (internal to gpu/). Every launcher enqueues on
// the given stream and returns the launch error (cudaGetLastError); device
// faults surface at the stream's completion callback. Semantics mirror
// tiers/cpu_cache.cpp line by line; docs/gpu.md maps one to the other.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/device_optimizer.hpp"

namespace strata::gpu {

inline constexpr uint32_t slot_valid = 1;
inline constexpr uint32_t slot_dirty = 2;

// The resident slots: metadata and records, slot = set * set_slots + i.
struct slot_table {
  uint64_t* keys = nullptr;
  uint64_t* ticks = nullptr;
  uint32_t* flags = nullptr;
  std::byte* arena = nullptr;  // records at arena_stride (a multiple of 8)
  uint32_t sets = 0;
  uint32_t slabs_per_set = 0;
  uint32_t set_slots = 0;
  size_t arena_stride = 0;
  size_t record_bytes = 0;    // packed record size of caller buffers
  uint32_t record_words = 0;  // record_bytes / 4
  uint32_t dim = 0;
};

// Per-call results on the device, copied to pinned memory at completion.
struct device_state {
  uint32_t hits;
  uint32_t misses;
  uint32_t evicted;
  uint32_t skipped;
  uint32_t segments;  // heads found by the last compaction (scratch)
  uint32_t replaced;
  unsigned long long resident;  // persists across calls
};
inline constexpr size_t per_call_state_bytes = 6 * sizeof(uint32_t);

// Scratch for one batch of up to `capacity` keys.
struct batch_scratch {
  size_t capacity = 0;
  uint64_t* sort_keys[3] = {};
  uint32_t* sort_vals[3] = {};
  uint64_t* order_key = nullptr;  // sorted by (set, key, position)
  uint32_t* order_set = nullptr;
  uint32_t* order_pos = nullptr;
  uint32_t* flags = nullptr;
  uint32_t* scan = nullptr;
  uint32_t* heads = nullptr;
  uint64_t* evict_keys = nullptr;  // by sorted index
  std::byte* evict_rows = nullptr;
  void* temp = nullptr;  // CUB temporary storage
  size_t temp_bytes = 0;
};

// CUB temporary bytes for sorting and scanning `n` items.
cudaError_t cub_temp_bytes(size_t n, size_t& bytes);

// Fills order_key/order_set/order_pos for keys[0, n).
cudaError_t sort_batch(const uint64_t* keys, uint32_t n, uint32_t sets, batch_scratch& s,
                       cudaStream_t stream);

// out[0, *count) = the indices i < n with flags[i] != 0, ascending (one
// CUB select pass).
cudaError_t compact(const uint32_t* flags, uint32_t n, uint32_t* out, uint32_t* count, void* temp,
                    size_t temp_bytes, cudaStream_t stream);

cudaError_t launch_query(const slot_table& t, const uint64_t* keys, uint32_t n, std::byte* rows,
                         uint32_t* missed, uint64_t tick, cudaStream_t stream);

// Marks the first position of each set run (insert) or key run (update).
cudaError_t launch_mark_heads(const batch_scratch& s, uint32_t n, bool by_key, cudaStream_t stream);

cudaError_t launch_insert(const slot_table& t, const batch_scratch& s, uint32_t n,
                          const device_state* st_heads, const std::byte* rows, uint32_t new_flags,
                          uint64_t tick, device_state* st, cudaStream_t stream);

// Copies the evictions flagged in s.flags (prefix sums in s.scan) to the
// caller's buffers in sorted-index order; sets st->evicted.
cudaError_t launch_gather_evictions(const slot_table& t, const batch_scratch& s, uint32_t n,
                                    uint64_t* evicted_keys, std::byte* evicted_rows,
                                    device_state* st, cudaStream_t stream);

cudaError_t launch_update(const slot_table& t, const batch_scratch& s, uint32_t n,
                          const device_state* st_heads, const float* grads,
                          const optimizer_params& params, uint64_t tick, uint32_t* missed,
                          cudaStream_t stream);

cudaError_t launch_dump(const slot_table& t, uint32_t slots, bool include_clean, bool clear_dirty,
                        uint32_t* sel, uint32_t* scan, uint64_t* keys_out, std::byte* rows_out,
                        device_state* st, void* temp, size_t temp_bytes, cudaStream_t stream);

}  // namespace strata::gpu
