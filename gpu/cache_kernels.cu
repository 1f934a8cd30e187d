// Kernels of the CUDA cache; see cache_kernels.cuh and docs/gpu.md. Each
// comment "CPU:" names the tiers/cpu_cache.cpp step a block mirrors.
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include "gpu/cache_kernels.cuh"
#include "gpu/xxh3.hpp"

namespace strata::gpu {
namespace {

constexpr unsigned full_mask = 0xffffffffu;
constexpr int block_threads = 256;
constexpr int warps_per_block = block_threads / 32;

unsigned blocks_for_threads(size_t threads) {
  return static_cast<unsigned>((threads + block_threads - 1) / block_threads);
}
unsigned blocks_for_warps(size_t warps) {
  return static_cast<unsigned>((warps + warps_per_block - 1) / warps_per_block);
}

__device__ __forceinline__ unsigned lane_id() { return threadIdx.x & 31u; }
__device__ __forceinline__ size_t global_thread() {
  return size_t{blockIdx.x} * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t global_warp() { return global_thread() >> 5; }

// Caller buffers pack records at record_bytes (a multiple of 4, not of 8):
// they are read and written as 32-bit words only.
__device__ __forceinline__ void copy_words(uint32_t* dst, const uint32_t* src, uint32_t words,
                                           unsigned lane) {
  for (uint32_t w = lane; w < words; w += 32) dst[w] = src[w];
}
__device__ __forceinline__ uint64_t version_of(const uint32_t* record) {
  return uint64_t{record[0]} | (uint64_t{record[1]} << 32);
}
// row_meta: version (words 0-1), freq (word 2), tick (word 3).
constexpr uint32_t freq_word = 2;
constexpr uint32_t tick_word = 3;

__device__ __forceinline__ uint32_t* arena_words(const slot_table& t, size_t slot) {
  return reinterpret_cast<uint32_t*>(t.arena + slot * t.arena_stride);
}
__device__ __forceinline__ const uint32_t* batch_words(const std::byte* rows, const slot_table& t,
                                                       size_t pos) {
  return reinterpret_cast<const uint32_t*>(rows + pos * t.record_bytes);
}

// CPU: impl::find. The set-relative slot of `key`, or -1; a warp probes a
// slab (32 slots) per step. Warp-uniform result; all 32 lanes must call.
__device__ int find_slot(const slot_table& t, uint32_t set, uint64_t key, unsigned lane) {
  const size_t base = size_t{set} * t.set_slots;
  for (uint32_t slab = 0; slab < t.slabs_per_set; ++slab) {
    const size_t slot = base + slab * 32u + lane;
    // Both loads issue together (no short circuit between them).
    const uint32_t flags = t.flags[slot];
    const uint64_t resident_key = t.keys[slot];
    const bool hit = (flags & slot_valid) != 0 && resident_key == key;
    const unsigned m = __ballot_sync(full_mask, hit);
    if (m) return static_cast<int>(slab * 32u + (__ffs(m) - 1));
  }
  return -1;
}

// CPU: impl::victim. The lowest empty slot, else the smallest tick (ties:
// lowest slot). Warp-uniform result; all 32 lanes must call.
__device__ uint32_t victim_slot(const slot_table& t, uint32_t set, unsigned lane) {
  const size_t base = size_t{set} * t.set_slots;
  for (uint32_t slab = 0; slab < t.slabs_per_set; ++slab) {
    const bool empty = !(t.flags[base + slab * 32u + lane] & slot_valid);
    const unsigned m = __ballot_sync(full_mask, empty);
    if (m) return slab * 32u + (__ffs(m) - 1);
  }
  // Each lane's slots ascend, so strict < keeps its lowest on ties.
  uint64_t best_tick = t.ticks[base + lane];
  uint32_t best = lane;
  for (uint32_t slab = 1; slab < t.slabs_per_set; ++slab) {
    const uint64_t tk = t.ticks[base + slab * 32u + lane];
    if (tk < best_tick) {
      best_tick = tk;
      best = slab * 32u + lane;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t other_tick = __shfl_xor_sync(full_mask, best_tick, offset);
    const uint32_t other = __shfl_xor_sync(full_mask, best, offset);
    if (other_tick < best_tick || (other_tick == best_tick && other < best)) {
      best_tick = other_tick;
      best = other;
    }
  }
  return best;
}

// --- sort -------------------------------------------------------------------------

__global__ void init_sort_kernel(const uint64_t* keys, uint32_t n, uint64_t* out_keys,
                                 uint32_t* out_pos) {
  const size_t i = global_thread();
  if (i >= n) return;
  out_keys[i] = keys[i];
  out_pos[i] = static_cast<uint32_t>(i);
}

__global__ void set_of_kernel(const uint64_t* sorted_keys, uint32_t n, uint32_t sets,
                              uint64_t* out_sets, uint32_t* out_index) {
  const size_t i = global_thread();
  if (i >= n) return;
  out_sets[i] = device_cache_set_of(sorted_keys[i], sets);
  out_index[i] = static_cast<uint32_t>(i);
}

__global__ void gather_order_kernel(const uint64_t* by_set_sets, const uint32_t* by_set_index,
                                    const uint64_t* by_key_keys, const uint32_t* by_key_pos,
                                    uint32_t n, uint64_t* order_key, uint32_t* order_set,
                                    uint32_t* order_pos) {
  const size_t k = global_thread();
  if (k >= n) return;
  const uint32_t j = by_set_index[k];
  order_set[k] = static_cast<uint32_t>(by_set_sets[k]);
  order_key[k] = by_key_keys[j];
  order_pos[k] = by_key_pos[j];
}

__global__ void mark_heads_kernel(const uint64_t* order_key, const uint32_t* order_set, uint32_t n,
                                  bool by_key, uint32_t* flags) {
  const size_t k = global_thread();
  if (k >= n) return;
  bool head = k == 0 || order_set[k] != order_set[k - 1];
  if (by_key && !head) head = order_key[k] != order_key[k - 1];
  flags[k] = head ? 1u : 0u;
}

// --- query ------------------------------------------------------------------------

// CPU: cpu_cache::query, one warp per batch position. With Wide, records
// (record_bytes a multiple of 16, 16-byte aligned buffers) move as 16-byte
// words.
template <bool Wide>
__global__ void query_kernel(slot_table t, const uint64_t* keys, uint32_t n, std::byte* rows,
                             uint32_t* missed, uint64_t tick) {
  const size_t i = global_warp();
  if (i >= n) return;
  const unsigned lane = lane_id();
  const uint64_t key = keys[i];
  const uint32_t set = device_cache_set_of(key, t.sets);
  const int rel = find_slot(t, set, key, lane);
  if (rel < 0) {
    if (lane == 0) missed[i] = 1;
    return;
  }
  const size_t slot = size_t{set} * t.set_slots + static_cast<uint32_t>(rel);
  if (lane == 0) {
    t.ticks[slot] = tick;  // duplicates write the same tick
    missed[i] = 0;
  }
  if constexpr (Wide) {
    // Loads of up to four 16-byte words per lane in flight before the
    // stores (the buffers may alias as far as the compiler knows).
    auto* dst = reinterpret_cast<uint4*>(rows + i * t.record_bytes);
    const auto* src = reinterpret_cast<const uint4*>(t.arena + slot * t.arena_stride);
    const uint32_t words = t.record_words / 4;
    for (uint32_t w0 = lane; w0 < words; w0 += 4 * 32) {
      uint4 v[4];
#pragma unroll
      for (uint32_t u = 0; u < 4; ++u)
        if (w0 + u * 32 < words) v[u] = __ldg(src + w0 + u * 32);
#pragma unroll
      for (uint32_t u = 0; u < 4; ++u)
        if (w0 + u * 32 < words) dst[w0 + u * 32] = v[u];
    }
  } else {
    copy_words(reinterpret_cast<uint32_t*>(rows + i * t.record_bytes), arena_words(t, slot),
               t.record_words, lane);
  }
}

// --- insert -----------------------------------------------------------------------

// CPU: cpu_cache::insert's for_each_key, one warp per set present in the
// batch, walking that set's keys in ascending order. Evictions go to the
// scratch by sorted index k (evict_flag[k]) and are compacted afterwards,
// so they come out in processing order.
__global__ void insert_kernel(slot_table t, const uint64_t* order_key, const uint32_t* order_set,
                              const uint32_t* order_pos, uint32_t n, const uint32_t* heads,
                              const uint32_t* head_count, const std::byte* rows, uint32_t new_flags,
                              uint64_t tick, uint32_t* evict_flag, uint64_t* evict_keys,
                              std::byte* evict_rows, device_state* st) {
  const size_t w = global_warp();
  if (w >= *head_count) return;
  const unsigned lane = lane_id();
  uint32_t k = heads[w];
  const uint32_t set = order_set[k];
  const size_t base = size_t{set} * t.set_slots;
  long long resident_delta = 0;
  uint32_t skipped = 0;
  uint32_t replaced = 0;
  while (k < n && order_set[k] == set) {
    const uint64_t key = order_key[k];
    uint32_t last = k + 1;
    while (last < n && order_key[last] == key && order_set[last] == set) ++last;
    // Duplicates collapse to the highest version (ties: first position).
    uint32_t best_pos = order_pos[k];
    uint64_t best_version = version_of(batch_words(rows, t, best_pos));
    for (uint32_t i = k + 1; i < last; ++i) {
      const uint64_t v = version_of(batch_words(rows, t, order_pos[i]));
      if (v > best_version) {
        best_version = v;
        best_pos = order_pos[i];
      }
    }
    skipped += last - k - 1;
    const uint32_t* best = batch_words(rows, t, best_pos);

    const int found = find_slot(t, set, key, lane);
    if (found >= 0) {
      const size_t slot = base + static_cast<uint32_t>(found);
      uint32_t* resident = arena_words(t, slot);
      const uint64_t resident_version = version_of(resident);
      const uint32_t resident_tick = resident[tick_word];
      __syncwarp();
      if (best_version > resident_version) {
        copy_words(resident, best, t.record_words, lane);
        if (lane == 0) t.flags[slot] = new_flags;
        ++replaced;
      } else {
        if (best_version == resident_version && best[tick_word] > resident_tick && lane == 0) {
          resident[tick_word] = best[tick_word];
          resident[freq_word] = best[freq_word];
        }
        ++skipped;
      }
      if (lane == 0) t.ticks[slot] = tick;
    } else {
      const size_t slot = base + victim_slot(t, set, lane);
      const uint32_t f = t.flags[slot];
      if (f & slot_valid) {
        if (f & slot_dirty) {
          copy_words(reinterpret_cast<uint32_t*>(evict_rows + size_t{k} * t.record_bytes),
                     arena_words(t, slot), t.record_words, lane);
          if (lane == 0) {
            evict_keys[k] = t.keys[slot];
            evict_flag[k] = 1;
          }
        }
        --resident_delta;
      }
      __syncwarp();
      copy_words(arena_words(t, slot), best, t.record_words, lane);
      if (lane == 0) {
        t.keys[slot] = key;
        t.ticks[slot] = tick;
        t.flags[slot] = new_flags;
      }
      ++resident_delta;
    }
    __syncwarp();  // this key's writes are visible to every lane
    k = last;
  }
  if (lane == 0) {
    if (skipped) atomicAdd(&st->skipped, skipped);
    if (replaced) atomicAdd(&st->replaced, replaced);
    if (resident_delta) atomicAdd(&st->resident, static_cast<unsigned long long>(resident_delta));
  }
}

__global__ void gather_evictions_kernel(slot_table t, const uint32_t* evict_flag,
                                        const uint32_t* scan, uint32_t n,
                                        const uint64_t* evict_keys, const std::byte* evict_rows,
                                        uint64_t* out_keys, std::byte* out_rows, device_state* st) {
  const size_t k = global_warp();
  if (k >= n) return;
  const unsigned lane = lane_id();
  if (k == n - 1 && lane == 0) st->evicted = scan[k] + (evict_flag[k] ? 1u : 0u);
  if (!evict_flag[k]) return;
  const uint32_t e = scan[k];
  if (lane == 0) out_keys[e] = evict_keys[k];
  copy_words(reinterpret_cast<uint32_t*>(out_rows + size_t{e} * t.record_bytes),
             reinterpret_cast<const uint32_t*>(evict_rows + k * t.record_bytes), t.record_words,
             lane);
}

// --- update -----------------------------------------------------------------------

// CPU: cpu_cache::update's for_each_key, one warp per distinct key; lanes
// stride over the row's elements. The gradient sum starts from the first
// position's and adds the later ones in batch order, as the CPU does.
__global__ void update_kernel(slot_table t, const uint64_t* order_key, const uint32_t* order_set,
                              const uint32_t* order_pos, uint32_t n, const uint32_t* heads,
                              const uint32_t* head_count, const float* grads,
                              optimizer_params params, uint64_t tick, uint32_t* missed) {
  const size_t w = global_warp();
  if (w >= *head_count) return;
  const unsigned lane = lane_id();
  const uint32_t k = heads[w];
  const uint64_t key = order_key[k];
  const uint32_t set = order_set[k];
  uint32_t last = k + 1;
  while (last < n && order_key[last] == key && order_set[last] == set) ++last;

  const int found = find_slot(t, set, key, lane);
  if (found < 0) {
    for (uint32_t i = k + lane; i < last; i += 32) missed[order_pos[i]] = 1;
    return;
  }
  const size_t slot = size_t{set} * t.set_slots + static_cast<uint32_t>(found);
  std::byte* record = t.arena + slot * t.arena_stride;
  float* weights = reinterpret_cast<float*>(record + 16);
  float* state = weights + t.dim;
  uint32_t* step_word = reinterpret_cast<uint32_t*>(state) + 2 * size_t{t.dim};
  const uint32_t old_step = params.kind == 2 ? *step_word : 0u;
  const row_prologue prologue = make_prologue(params, old_step);
  __syncwarp();
  if (params.kind == 2 && lane == 0) *step_word = prologue.adam_step;
  const uint32_t dim = t.dim;
  for (uint32_t j = lane; j < dim; j += 32) {
    float sum = grads[size_t{order_pos[k]} * dim + j];
    for (uint32_t i = k + 1; i < last; ++i)
      sum = fp::add(sum, grads[size_t{order_pos[i]} * dim + j]);
    apply_element(params, prologue, dim, j, weights, state, sum);
  }
  if (lane == 0) {
    // row_meta.version: make_version(incarnation, counter + 1).
    uint64_t* version = reinterpret_cast<uint64_t*>(record);
    constexpr uint64_t counter_mask = (uint64_t{1} << 48) - 1;
    const uint64_t v = *version;
    *version = (v & ~counter_mask) | (((v & counter_mask) + 1) & counter_mask);
    t.ticks[slot] = tick;
    t.flags[slot] |= slot_dirty;
  }
}

// --- dump -------------------------------------------------------------------------

__global__ void dump_select_kernel(slot_table t, uint32_t slots, bool include_clean,
                                   uint32_t* sel) {
  const size_t s = global_thread();
  if (s >= slots) return;
  const uint32_t f = t.flags[s];
  sel[s] = ((f & slot_valid) && (include_clean || (f & slot_dirty))) ? 1u : 0u;
}

// CPU: cpu_cache::dump, in set then slot order (the scan's order).
__global__ void dump_copy_kernel(slot_table t, uint32_t slots, bool clear_dirty,
                                 const uint32_t* sel, const uint32_t* scan, uint64_t* keys_out,
                                 std::byte* rows_out, device_state* st) {
  const size_t s = global_warp();
  if (s >= slots) return;
  const unsigned lane = lane_id();
  if (s == slots - 1 && lane == 0) st->hits = scan[s] + sel[s];
  if (!sel[s]) return;
  const uint32_t e = scan[s];
  copy_words(reinterpret_cast<uint32_t*>(rows_out + size_t{e} * t.record_bytes), arena_words(t, s),
             t.record_words, lane);
  if (lane == 0) {
    keys_out[e] = t.keys[s];
    if (clear_dirty) t.flags[s] = slot_valid;
  }
}

}  // namespace

cudaError_t cub_temp_bytes(size_t n, size_t& bytes) {
  size_t sort_bytes = 0, scan_bytes = 0;
  const int items = static_cast<int>(std::max<size_t>(n, 1));
  cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint64_t*)nullptr,
                                                  (uint64_t*)nullptr, (const uint32_t*)nullptr,
                                                  (uint32_t*)nullptr, items);
  if (e != cudaSuccess) return e;
  e = cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, (const uint32_t*)nullptr,
                                    (uint32_t*)nullptr, items);
  if (e != cudaSuccess) return e;
  size_t select_bytes = 0;
  e = cub::DeviceSelect::Flagged(nullptr, select_bytes, thrust::counting_iterator<uint32_t>(0),
                                 (const uint32_t*)nullptr, (uint32_t*)nullptr, (uint32_t*)nullptr,
                                 items);
  if (e != cudaSuccess) return e;
  bytes = std::max({sort_bytes, scan_bytes, select_bytes});
  return cudaSuccess;
}

cudaError_t sort_batch(const uint64_t* keys, uint32_t n, uint32_t sets, batch_scratch& s,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int items = static_cast<int>(n);
  init_sort_kernel<<<blocks_for_threads(n), block_threads, 0, stream>>>(keys, n, s.sort_keys[0],
                                                                        s.sort_vals[0]);
  // Stable LSD radix sorts: by key, then by set, gives (set, key, position).
  size_t temp = s.temp_bytes;
  cudaError_t e =
      cub::DeviceRadixSort::SortPairs(s.temp, temp, s.sort_keys[0], s.sort_keys[1], s.sort_vals[0],
                                      s.sort_vals[1], items, 0, 64, stream);
  if (e != cudaSuccess) return e;
  set_of_kernel<<<blocks_for_threads(n), block_threads, 0, stream>>>(
      s.sort_keys[1], n, sets, s.sort_keys[0], s.sort_vals[0]);
  int set_bits = 1;
  while (set_bits < 32 && (uint64_t{1} << set_bits) < sets) ++set_bits;
  temp = s.temp_bytes;
  e = cub::DeviceRadixSort::SortPairs(s.temp, temp, s.sort_keys[0], s.sort_keys[2], s.sort_vals[0],
                                      s.sort_vals[2], items, 0, set_bits, stream);
  if (e != cudaSuccess) return e;
  gather_order_kernel<<<blocks_for_threads(n), block_threads, 0, stream>>>(
      s.sort_keys[2], s.sort_vals[2], s.sort_keys[1], s.sort_vals[1], n, s.order_key, s.order_set,
      s.order_pos);
  return cudaGetLastError();
}

cudaError_t compact(const uint32_t* flags, uint32_t n, uint32_t* out, uint32_t* count, void* temp,
                    size_t temp_bytes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return cub::DeviceSelect::Flagged(temp, temp_bytes, thrust::counting_iterator<uint32_t>(0), flags,
                                    out, count, static_cast<int>(n), stream);
}

cudaError_t launch_query(const slot_table& t, const uint64_t* keys, uint32_t n, std::byte* rows,
                         uint32_t* missed, uint64_t tick, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool wide = t.record_bytes % 16 == 0 && t.arena_stride % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(rows) % 16 == 0;
  if (wide)
    query_kernel<true>
        <<<blocks_for_warps(n), block_threads, 0, stream>>>(t, keys, n, rows, missed, tick);
  else
    query_kernel<false>
        <<<blocks_for_warps(n), block_threads, 0, stream>>>(t, keys, n, rows, missed, tick);
  return cudaGetLastError();
}

cudaError_t launch_mark_heads(const batch_scratch& s, uint32_t n, bool by_key,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  mark_heads_kernel<<<blocks_for_threads(n), block_threads, 0, stream>>>(s.order_key, s.order_set,
                                                                         n, by_key, s.flags);
  return cudaGetLastError();
}

cudaError_t launch_insert(const slot_table& t, const batch_scratch& s, uint32_t n,
                          const device_state* st_heads, const std::byte* rows, uint32_t new_flags,
                          uint64_t tick, device_state* st, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  insert_kernel<<<blocks_for_warps(n), block_threads, 0, stream>>>(
      t, s.order_key, s.order_set, s.order_pos, n, s.heads, &st_heads->segments, rows, new_flags,
      tick, s.flags, s.evict_keys, s.evict_rows, st);
  return cudaGetLastError();
}

cudaError_t launch_gather_evictions(const slot_table& t, const batch_scratch& s, uint32_t n,
                                    uint64_t* evicted_keys, std::byte* evicted_rows,
                                    device_state* st, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  size_t temp = s.temp_bytes;
  cudaError_t e =
      cub::DeviceScan::ExclusiveSum(s.temp, temp, s.flags, s.scan, static_cast<int>(n), stream);
  if (e != cudaSuccess) return e;
  gather_evictions_kernel<<<blocks_for_warps(n), block_threads, 0, stream>>>(
      t, s.flags, s.scan, n, s.evict_keys, s.evict_rows, evicted_keys, evicted_rows, st);
  return cudaGetLastError();
}

cudaError_t launch_update(const slot_table& t, const batch_scratch& s, uint32_t n,
                          const device_state* st_heads, const float* grads,
                          const optimizer_params& params, uint64_t tick, uint32_t* missed,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  update_kernel<<<blocks_for_warps(n), block_threads, 0, stream>>>(
      t, s.order_key, s.order_set, s.order_pos, n, s.heads, &st_heads->segments, grads, params,
      tick, missed);
  return cudaGetLastError();
}

cudaError_t launch_dump(const slot_table& t, uint32_t slots, bool include_clean, bool clear_dirty,
                        uint32_t* sel, uint32_t* scan, uint64_t* keys_out, std::byte* rows_out,
                        device_state* st, void* temp, size_t temp_bytes, cudaStream_t stream) {
  dump_select_kernel<<<blocks_for_threads(slots), block_threads, 0, stream>>>(t, slots,
                                                                              include_clean, sel);
  cudaError_t e =
      cub::DeviceScan::ExclusiveSum(temp, temp_bytes, sel, scan, static_cast<int>(slots), stream);
  if (e != cudaSuccess) return e;
  dump_copy_kernel<<<blocks_for_warps(slots), block_threads, 0, stream>>>(
      t, slots, clear_dirty, sel, scan, keys_out, rows_out, st);
  return cudaGetLastError();
}

}  // namespace strata::gpu
