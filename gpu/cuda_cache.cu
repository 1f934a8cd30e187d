// cuda_cache: argument checks and call sequencing on the host; the kernels
// are in cache_kernels.cu. Each call mirrors the same-named cpu_cache call.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "gpu/cache_kernels.cuh"
#include "gpu/cuda_cache.hpp"
#include "gpu/cuda_check.cuh"
#include "gpu/device_memory.hpp"

namespace strata::gpu {
namespace {

template <class T>
bool is_device(const memory_span<T>& s) {
  return s.kind() == memory_kind::device;
}

error bad_argument(std::string what) {
  return error(errc::invalid_argument, "cuda_cache: " + std::move(what));
}

// Records in the arena start at 16-byte boundaries, so the query gathers
// them with 16-byte loads when the record size allows.
size_t arena_stride_of(const row_layout& layout) { return (layout.record_bytes() + 15) / 16 * 16; }

template <class T>
cudaError_t device_alloc(T*& p, size_t count) {
  return cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * (count == 0 ? 1 : count));
}

}  // namespace

cache_geometry geometry_for_bytes(const row_layout& layout, size_t hbm_bytes,
                                  uint32_t slabs_per_set) {
  // Per slot: key, tick, flags and a record.
  const size_t per_slot = sizeof(uint64_t) * 2 + sizeof(uint32_t) + arena_stride_of(layout) +
                          2 * sizeof(uint32_t);  // dump's select and scan words
  const size_t per_set = per_slot * cache_geometry::slab_slots * slabs_per_set;
  cache_geometry g;
  g.slabs_per_set = slabs_per_set;
  g.sets =
      static_cast<uint32_t>(std::max<size_t>(1, std::min<size_t>(hbm_bytes / per_set, UINT32_MAX)));
  return g;
}

struct cuda_cache::impl {
  row_layout layout;
  cache_geometry geometry;
  size_t record_bytes = 0;
  uint32_t slots = 0;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  slot_table table;
  int device = 0;
  device_state* state = nullptr;  // device
  // Completion: each call copies `state` into its own slot of a pinned
  // ring and records that slot's event; the completion thread waits on the
  // events in call order, reads the slot and runs `done`. The stream never
  // waits for the host (a stream callback would stall it for a round trip
  // per call), and at most ring_size calls are in flight.
  static constexpr uint32_t ring_size = 64;
  device_state* pinned = nullptr;      // host, page-locked, mapped, ring_size entries
  device_state* pinned_dev = nullptr;  // the same memory, as the device addresses it
  cudaEvent_t events[ring_size] = {};
  struct pending_call {
    uint32_t slot = 0;
    uint32_t n = 0;
    bool hits_from_misses = false;  // query, update: hits = n - misses
    bool written = false;           // only `misses` of the slot is current
    cache_counts* counts = nullptr;
    cache_completion done;
  };
  std::mutex mutex;
  std::condition_variable work_cv;  // queue not empty, or stopping
  std::condition_variable room_cv;  // a call completed
  std::deque<pending_call> queue;
  uint64_t issued = 0;     // owner thread only
  uint64_t completed = 0;  // under mutex
  bool stopping = false;
  std::thread completer;
  uint32_t* dump_sel = nullptr;
  uint32_t* dump_scan = nullptr;
  void* dump_temp = nullptr;
  size_t dump_temp_bytes = 0;
  batch_scratch scratch;
  std::atomic<size_t> resident{0};
  uint64_t tick = 0;
  std::optional<error> pending;  // a CUDA error from clear(), for the next call

  ~impl() {
    if (stream) (void)cudaStreamSynchronize(stream);
    if (completer.joinable()) {
      {
        std::lock_guard lock(mutex);
        stopping = true;
      }
      work_cv.notify_all();
      completer.join();  // after the queued completions ran
    }
    for (cudaEvent_t e : events)
      if (e) (void)cudaEventDestroy(e);
    free_scratch();
    (void)cudaFree(table.keys);
    (void)cudaFree(table.ticks);
    (void)cudaFree(table.flags);
    (void)cudaFree(table.arena);
    (void)cudaFree(state);
    (void)cudaFree(dump_sel);
    (void)cudaFree(dump_scan);
    (void)cudaFree(dump_temp);
    if (pinned) (void)cudaFreeHost(pinned);
    if (own_stream && stream) (void)cudaStreamDestroy(stream);
  }

  void free_scratch() {
    batch_scratch& s = scratch;
    for (int i = 0; i < 3; ++i) {
      (void)cudaFree(s.sort_keys[i]);
      (void)cudaFree(s.sort_vals[i]);
    }
    (void)cudaFree(s.order_key);
    (void)cudaFree(s.order_set);
    (void)cudaFree(s.order_pos);
    (void)cudaFree(s.flags);
    (void)cudaFree(s.scan);
    (void)cudaFree(s.heads);
    (void)cudaFree(s.evict_keys);
    (void)cudaFree(s.evict_rows);
    (void)cudaFree(s.temp);
    s = batch_scratch{};
  }

  // Grows the batch scratch to `n` keys (the only allocation after create;
  // waits for in-flight calls, which use the old scratch).
  status reserve(size_t n) {
    if (n <= scratch.capacity) return {};
    STRATA_CUDA_TRY(cudaStreamSynchronize(stream));
    free_scratch();
    const size_t cap = std::max<size_t>(n, 1024);
    batch_scratch& s = scratch;
    for (int i = 0; i < 3; ++i) {
      STRATA_CUDA_TRY(device_alloc(s.sort_keys[i], cap));
      STRATA_CUDA_TRY(device_alloc(s.sort_vals[i], cap));
    }
    STRATA_CUDA_TRY(device_alloc(s.order_key, cap));
    STRATA_CUDA_TRY(device_alloc(s.order_set, cap));
    STRATA_CUDA_TRY(device_alloc(s.order_pos, cap));
    STRATA_CUDA_TRY(device_alloc(s.flags, cap));
    STRATA_CUDA_TRY(device_alloc(s.scan, cap));
    STRATA_CUDA_TRY(device_alloc(s.heads, cap));
    STRATA_CUDA_TRY(device_alloc(s.evict_keys, cap));
    STRATA_CUDA_TRY(device_alloc(s.evict_rows, cap * record_bytes));
    STRATA_CUDA_TRY(cub_temp_bytes(cap, s.temp_bytes));
    STRATA_CUDA_TRY(cudaMalloc(&s.temp, std::max<size_t>(s.temp_bytes, 1)));
    s.capacity = cap;
    return {};
  }

  // Starts a call: reports a pending error, resets the per-call counters.
  // A query writes only `misses` (the rest of its counts come from the
  // host), so it skips the reset.
  status begin(size_t n, bool reset = true) {
    if (pending) {
      error e = std::move(*pending);
      pending.reset();
      return e;
    }
    if (auto st = reserve(n); !st) return st;
    if (reset) STRATA_CUDA_TRY(cudaMemsetAsync(state, 0, per_call_state_bytes, stream));
    return {};
  }

  // Sorts a batch by (set, key, position) and writes its segments (runs
  // of one set, or of one key when by_key) to state->segments: the
  // processing order insert and update share with the CPU backend.
  status segment_batch(const uint64_t* keys, uint32_t count, bool by_key) {
    STRATA_CUDA_TRY(sort_batch(keys, count, geometry.sets, scratch, stream));
    STRATA_CUDA_TRY(launch_mark_heads(scratch, count, by_key, stream));
    STRATA_CUDA_TRY(compact(scratch.flags, count, scratch.heads, &state->segments, scratch.temp,
                            scratch.temp_bytes, stream));
    return {};
  }

  // The completion thread: runs `done` of each call in call order once
  // its event completed. A device fault makes the event wait fail, so
  // `done` always runs, with the error.
  void complete_calls() {
    (void)cudaSetDevice(device);
    for (;;) {
      pending_call c;
      {
        std::unique_lock lock(mutex);
        work_cv.wait(lock, [this] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        c = std::move(queue.front());
        queue.pop_front();
      }
      const cudaError_t code = cudaEventSynchronize(events[c.slot]);
      // (Assigning to a status draws nvcc's bogus "ignoring nodiscard"
      // warning #2810, so statuses here are initialized, never assigned.)
      status st =
          code == cudaSuccess
              ? status()
              : status(cuda_failure(code, "cuda_cache call (its event)", __FILE__, __LINE__));
      if (code == cudaSuccess) {
        const device_state& s = pinned[c.slot];
        c.counts->misses = s.misses;
        if (c.hits_from_misses) {
          c.counts->hits = c.n - s.misses;
        } else {
          c.counts->hits = s.hits;
          c.counts->evicted = s.evicted;
          c.counts->skipped = s.skipped;
          c.counts->replaced = s.replaced;
        }
        if (!c.written) resident.store(static_cast<size_t>(s.resident), std::memory_order_release);
      }
      if (c.done) c.done(std::move(st));
      {
        std::lock_guard lock(mutex);
        ++completed;
      }
      room_cv.notify_all();
    }
  }

  // Ends a call: copies the counters back and completes through `done`.
  // The ring slot of the next call, once one is free.
  uint32_t next_slot() {
    std::unique_lock lock(mutex);
    room_cv.wait(lock, [this] { return issued - completed < ring_size; });
    return static_cast<uint32_t>(issued % ring_size);
  }

  // A query's miss count, written by the device straight into its ring
  // slot (mapped pinned memory): no copy to enqueue.
  uint32_t* mapped_misses(uint32_t slot) { return &pinned_dev[slot].misses; }

  // Ends a call: copies the counters back (unless the device already wrote
  // them into the slot: `written`) and completes through `done`.
  void finish(status enqueued, cache_counts& counts, cache_completion& done, uint32_t n = 0,
              bool hits_from_misses = false, bool written = false) {
    if (!enqueued) {
      if (done) done(std::move(enqueued));
      return;
    }
    const uint32_t slot = next_slot();
    status copied = written
                        ? status()
                        : STRATA_CUDA(cudaMemcpyAsync(pinned + slot, state, sizeof(device_state),
                                                      cudaMemcpyDeviceToHost, stream));
    if (!copied) {
      if (done) done(std::move(copied));
      return;
    }
    status recorded = STRATA_CUDA(cudaEventRecord(events[slot], stream));
    if (!recorded) {
      if (done) done(std::move(recorded));
      return;
    }
    ++issued;
    {
      std::lock_guard lock(mutex);
      queue.push_back(pending_call{slot, n, hits_from_misses, written, &counts, std::move(done)});
    }
    work_cv.notify_one();
  }
};

expected<std::unique_ptr<cuda_cache>> cuda_cache::create(row_layout layout, cache_geometry geometry,
                                                         cuda_stream stream) {
  if (geometry.sets == 0 || geometry.slabs_per_set == 0)
    return bad_argument("create: empty geometry");
  if (layout.dim == 0) return bad_argument("create: layout with dim 0");
  if (geometry.capacity_rows() >= (uint64_t{1} << 31))
    return bad_argument("create: more than 2^31 slots");
  if (const std::string why = unavailable_reason(); !why.empty())
    return error(errc::unavailable, "cuda_cache: " + why);

  auto m = std::make_unique<impl>();
  m->layout = layout;
  m->geometry = geometry;
  m->record_bytes = layout.record_bytes();
  m->slots = static_cast<uint32_t>(geometry.capacity_rows());
  if (stream) {
    m->stream = stream;
  } else {
    STRATA_CUDA_TRY(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    m->own_stream = true;
  }
  slot_table& t = m->table;
  t.sets = geometry.sets;
  t.slabs_per_set = geometry.slabs_per_set;
  t.set_slots = geometry.set_slots();
  t.arena_stride = arena_stride_of(layout);
  t.record_bytes = m->record_bytes;
  t.record_words = static_cast<uint32_t>(m->record_bytes / 4);
  t.dim = layout.dim;
  STRATA_CUDA_TRY(device_alloc(t.keys, m->slots));
  STRATA_CUDA_TRY(device_alloc(t.ticks, m->slots));
  STRATA_CUDA_TRY(device_alloc(t.flags, m->slots));
  STRATA_CUDA_TRY(device_alloc(t.arena, size_t{m->slots} * t.arena_stride));
  STRATA_CUDA_TRY(device_alloc(m->state, 1));
  STRATA_CUDA_TRY(device_alloc(m->dump_sel, m->slots));
  STRATA_CUDA_TRY(device_alloc(m->dump_scan, m->slots));
  STRATA_CUDA_TRY(cub_temp_bytes(m->slots, m->dump_temp_bytes));
  STRATA_CUDA_TRY(cudaMalloc(&m->dump_temp, std::max<size_t>(m->dump_temp_bytes, 1)));
  STRATA_CUDA_TRY(cudaGetDevice(&m->device));
  STRATA_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&m->pinned),
                                sizeof(device_state) * impl::ring_size, cudaHostAllocMapped));
  STRATA_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&m->pinned_dev), m->pinned, 0));
  for (cudaEvent_t& e : m->events)
    STRATA_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
  STRATA_CUDA_TRY(cudaMemsetAsync(t.flags, 0, sizeof(uint32_t) * m->slots, m->stream));
  STRATA_CUDA_TRY(cudaMemsetAsync(t.ticks, 0, sizeof(uint64_t) * m->slots, m->stream));
  STRATA_CUDA_TRY(cudaMemsetAsync(m->state, 0, sizeof(device_state), m->stream));
  STRATA_CUDA_TRY(cudaStreamSynchronize(m->stream));
  impl* raw = m.get();
  m->completer = std::thread([raw] { raw->complete_calls(); });
  return std::unique_ptr<cuda_cache>(new cuda_cache(std::move(m)));
}

cuda_cache::cuda_cache(std::unique_ptr<impl> m) : impl_(std::move(m)) {}
cuda_cache::~cuda_cache() = default;

const row_layout& cuda_cache::layout() const { return impl_->layout; }
const cache_geometry& cuda_cache::geometry() const { return impl_->geometry; }
size_t cuda_cache::size() const { return impl_->resident.load(std::memory_order_acquire); }
cuda_stream cuda_cache::stream() const { return impl_->stream; }

void cuda_cache::query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
                       memory_span<uint32_t> miss_indices, cache_counts& counts,
                       cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t n = keys.size();
  auto reject = [&](error e) {
    if (done) done(std::move(e));
  };
  if (!is_device(keys) || !is_device(rows) || !is_device(miss_indices))
    return reject(bad_argument("query: buffers must be device memory"));
  if (n > UINT32_MAX) return reject(bad_argument("query: batch larger than 2^32 keys"));
  if (rows.size() < n * m.record_bytes)
    return reject(bad_argument("query: rows buffer holds fewer than keys.size() records"));
  if (miss_indices.size() < n)
    return reject(bad_argument("query: miss_indices capacity below keys.size()"));

  if (status st = m.begin(n, /*reset=*/n == 0); !st) return reject(st.err());
  ++m.tick;
  const uint32_t count = static_cast<uint32_t>(n);
  batch_scratch& s = m.scratch;
  // Non-empty: the miss count goes straight to the call's ring slot.
  const bool direct = count > 0;
  status st = [&]() -> status {
    STRATA_CUDA_TRY(
        launch_query(m.table, keys.data(), count, rows.data(), s.flags, m.tick, m.stream));
    if (direct)
      STRATA_CUDA_TRY(compact(s.flags, count, miss_indices.data(), m.mapped_misses(m.next_slot()),
                              s.temp, s.temp_bytes, m.stream));
    return {};
  }();
  m.finish(std::move(st), counts, done, count, /*hits_from_misses=*/true, /*written=*/direct);
}

void cuda_cache::insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows,
                        bool dirty, memory_span<uint64_t> evicted_keys,
                        memory_span<std::byte> evicted_rows, cache_counts& counts,
                        cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t n = keys.size();
  auto reject = [&](error e) {
    if (done) done(std::move(e));
  };
  if (!is_device(keys) || !is_device(rows) || !is_device(evicted_keys) || !is_device(evicted_rows))
    return reject(bad_argument("insert: buffers must be device memory"));
  if (n > UINT32_MAX) return reject(bad_argument("insert: batch larger than 2^32 keys"));
  if (rows.size() < n * m.record_bytes)
    return reject(bad_argument("insert: rows buffer holds fewer than keys.size() records"));
  if (evicted_keys.size() < n || evicted_rows.size() < n * m.record_bytes)
    return reject(bad_argument("insert: evicted buffers hold fewer than keys.size() rows"));

  if (status st = m.begin(n); !st) return reject(st.err());
  ++m.tick;
  const uint32_t count = static_cast<uint32_t>(n);
  batch_scratch& s = m.scratch;
  const uint32_t new_flags = dirty ? (slot_valid | slot_dirty) : slot_valid;
  status st = [&]() -> status {
    if (count == 0) return {};
    if (status seg = m.segment_batch(keys.data(), count, /*by_key=*/false); !seg) return seg;
    // s.flags now holds the eviction flags (by sorted index).
    STRATA_CUDA_TRY(cudaMemsetAsync(s.flags, 0, sizeof(uint32_t) * count, m.stream));
    STRATA_CUDA_TRY(launch_insert(m.table, s, count, m.state, rows.data(), new_flags, m.tick,
                                  m.state, m.stream));
    STRATA_CUDA_TRY(launch_gather_evictions(m.table, s, count, evicted_keys.data(),
                                            evicted_rows.data(), m.state, m.stream));
    return {};
  }();
  m.finish(std::move(st), counts, done);
}

void cuda_cache::update(memory_span<const uint64_t> keys, memory_span<const float> grads,
                        const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
                        cache_counts& counts, cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t n = keys.size();
  const size_t dim = m.layout.dim;
  auto reject = [&](error e) {
    if (done) done(std::move(e));
  };
  if (!is_device(keys) || !is_device(grads) || !is_device(miss_indices))
    return reject(bad_argument("update: buffers must be device memory"));
  if (n > UINT32_MAX) return reject(bad_argument("update: batch larger than 2^32 keys"));
  if (grads.size() < n * dim)
    return reject(bad_argument("update: grads hold fewer than keys.size() x dim floats"));
  if (miss_indices.size() < n)
    return reject(bad_argument("update: miss_indices capacity below keys.size()"));
  if (optimizer.kind != m.layout.optimizer)
    return reject(bad_argument("update: optimizer " + std::string(to_string(optimizer.kind)) +
                               " does not match the layout's " +
                               std::string(to_string(m.layout.optimizer))));
  if (!m.layout.with_state && m.layout.optimizer != optimizer_kind::sgd)
    return reject(bad_argument("update: serving layout carries no optimizer state"));

  if (status st = m.begin(n); !st) return reject(st.err());
  ++m.tick;
  optimizer_params p;
  p.kind = static_cast<uint8_t>(optimizer.kind);
  p.learning_rate = optimizer.learning_rate;
  p.l2 = optimizer.l2;
  p.epsilon = optimizer.epsilon;
  p.beta1 = optimizer.beta1;
  p.beta2 = optimizer.beta2;
  p.ftrl_alpha = optimizer.ftrl_alpha;
  p.ftrl_beta = optimizer.ftrl_beta;
  p.ftrl_l1 = optimizer.ftrl_l1;
  p.ftrl_l2 = optimizer.ftrl_l2;
  const uint32_t count = static_cast<uint32_t>(n);
  batch_scratch& s = m.scratch;
  status st = [&]() -> status {
    if (count == 0) return {};
    if (status seg = m.segment_batch(keys.data(), count, /*by_key=*/true); !seg) return seg;
    // s.flags now holds the miss flags (by batch position).
    STRATA_CUDA_TRY(cudaMemsetAsync(s.flags, 0, sizeof(uint32_t) * count, m.stream));
    STRATA_CUDA_TRY(
        launch_update(m.table, s, count, m.state, grads.data(), p, m.tick, s.flags, m.stream));
    STRATA_CUDA_TRY(compact(s.flags, count, miss_indices.data(), &m.state->misses, s.temp,
                            s.temp_bytes, m.stream));
    return {};
  }();
  m.finish(std::move(st), counts, done, count, /*hits_from_misses=*/true);
}

void cuda_cache::dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out,
                      bool include_clean, bool clear_dirty, cache_counts& counts,
                      cache_completion done) {
  counts = {};
  impl& m = *impl_;
  auto reject = [&](error e) {
    if (done) done(std::move(e));
  };
  if (!is_device(keys_out) || !is_device(rows_out))
    return reject(bad_argument("dump: buffers must be device memory"));
  const size_t resident = size();
  if (keys_out.size() < resident || rows_out.size() < resident * m.record_bytes)
    return reject(bad_argument("dump: output buffers hold fewer than size() rows"));

  if (status st = m.begin(0); !st) return reject(st.err());
  status st = STRATA_CUDA(launch_dump(m.table, m.slots, include_clean, clear_dirty, m.dump_sel,
                                      m.dump_scan, keys_out.data(), rows_out.data(), m.state,
                                      m.dump_temp, m.dump_temp_bytes, m.stream));
  m.finish(std::move(st), counts, done);
}

void cuda_cache::clear() {
  impl& m = *impl_;
  status st = [&]() -> status {
    STRATA_CUDA_TRY(cudaMemsetAsync(m.table.flags, 0, sizeof(uint32_t) * m.slots, m.stream));
    STRATA_CUDA_TRY(cudaMemsetAsync(m.state, 0, sizeof(device_state), m.stream));
    STRATA_CUDA_TRY(cudaStreamSynchronize(m.stream));
    return {};
  }();
  if (st)
    m.resident.store(0, std::memory_order_release);
  else if (!m.pending)
    m.pending = st.err();
}

}  // namespace strata::gpu
