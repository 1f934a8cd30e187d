// staged_cache: host buffers in, cuda_cache on the device; see
// staged_cache.hpp.
//
// A call: inputs -> pinned (CPU memcpy) -> device on the copy stream; the
// compute stream waits for that upload and runs the cuda_cache operation;
// cuda_cache's completion thread then runs this file's `finish_*` step,
// which downloads exactly the results the counts call for on the copy
// stream (while the compute stream runs the next call), copies them into
// the caller's buffers, frees the staging set and runs the caller's `done`.
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "gpu/cuda_cache.hpp"
#include "gpu/cuda_check.cuh"
#include "gpu/staged_cache.hpp"

namespace strata::gpu {
namespace {

error bad_argument(std::string what) {
  return error(errc::invalid_argument, "staged_cache: " + std::move(what));
}

template <class T>
bool is_host(const memory_span<T>& s) {
  return s.kind() == memory_kind::host;
}

}  // namespace

struct staged_cache::impl {
  // One call's buffers: pinned on the host, the same on the device.
  struct staging_set {
    size_t capacity = 0;  // keys
    uint64_t* h_keys = nullptr;
    std::byte* h_rows = nullptr;
    uint32_t* h_miss = nullptr;
    float* h_grads = nullptr;
    uint64_t* d_keys = nullptr;
    std::byte* d_rows = nullptr;
    uint32_t* d_miss = nullptr;
    float* d_grads = nullptr;
    uint64_t* d_ev_keys = nullptr;
    std::byte* d_ev_rows = nullptr;
    cudaEvent_t uploaded = nullptr;
    cache_counts counts;
    bool busy = false;  // under impl::mutex
  };

  row_layout layout;
  size_t record_bytes = 0;
  std::unique_ptr<cuda_cache> cache;
  cudaStream_t compute = nullptr;  // the cache's stream
  cudaStream_t copy = nullptr;
  staging_set sets[2];
  uint32_t next = 0;
  std::mutex mutex;
  std::condition_variable freed;

  ~impl() {
    wait_idle();
    cache.reset();  // joins its completion thread
    for (staging_set& s : sets) {
      free_set(s);
      if (s.uploaded) (void)cudaEventDestroy(s.uploaded);
    }
    if (copy) (void)cudaStreamDestroy(copy);
  }

  static void free_set(staging_set& s) {
    (void)cudaFreeHost(s.h_keys);
    (void)cudaFreeHost(s.h_rows);
    (void)cudaFreeHost(s.h_miss);
    (void)cudaFreeHost(s.h_grads);
    (void)cudaFree(s.d_keys);
    (void)cudaFree(s.d_rows);
    (void)cudaFree(s.d_miss);
    (void)cudaFree(s.d_grads);
    (void)cudaFree(s.d_ev_keys);
    (void)cudaFree(s.d_ev_rows);
    s.h_keys = nullptr;
    s.h_rows = nullptr;
    s.h_miss = nullptr;
    s.h_grads = nullptr;
    s.d_keys = nullptr;
    s.d_rows = nullptr;
    s.d_miss = nullptr;
    s.d_grads = nullptr;
    s.d_ev_keys = nullptr;
    s.d_ev_rows = nullptr;
    s.capacity = 0;
  }

  template <class T>
  static cudaError_t host_alloc(T*& p, size_t count) {
    return cudaHostAlloc(reinterpret_cast<void**>(&p), sizeof(T) * std::max<size_t>(count, 1),
                         cudaHostAllocDefault);
  }
  template <class T>
  static cudaError_t device_alloc(T*& p, size_t count) {
    return cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * std::max<size_t>(count, 1));
  }

  // Sizes a free set for `n` keys (no-op when it already holds them).
  status grow(staging_set& s, size_t n) {
    if (n <= s.capacity) return {};
    free_set(s);
    const size_t cap = std::max<size_t>(n, 1024);
    const size_t rows = cap * record_bytes;
    STRATA_CUDA_TRY(host_alloc(s.h_keys, cap));
    STRATA_CUDA_TRY(host_alloc(s.h_rows, rows));
    STRATA_CUDA_TRY(host_alloc(s.h_miss, cap));
    STRATA_CUDA_TRY(host_alloc(s.h_grads, cap * layout.dim));
    STRATA_CUDA_TRY(device_alloc(s.d_keys, cap));
    STRATA_CUDA_TRY(device_alloc(s.d_rows, rows));
    STRATA_CUDA_TRY(device_alloc(s.d_miss, cap));
    STRATA_CUDA_TRY(device_alloc(s.d_grads, cap * layout.dim));
    STRATA_CUDA_TRY(device_alloc(s.d_ev_keys, cap));
    STRATA_CUDA_TRY(device_alloc(s.d_ev_rows, rows));
    s.capacity = cap;
    return {};
  }

  // The next staging set, once its previous call completed, sized for n.
  expected<staging_set*> acquire(size_t n) {
    staging_set& s = sets[next];
    next ^= 1u;
    {
      std::unique_lock lock(mutex);
      freed.wait(lock, [&] { return !s.busy; });
    }
    STRATA_TRY(grow(s, n));
    s.counts = {};
    s.busy = true;
    return &s;
  }

  void release(staging_set& s) {
    {
      std::lock_guard lock(mutex);
      s.busy = false;
    }
    freed.notify_all();
  }

  void wait_idle() {
    std::unique_lock lock(mutex);
    freed.wait(lock, [&] { return !sets[0].busy && !sets[1].busy; });
  }

  // Uploads `bytes` from pinned `h` to `d` on the copy stream.
  status upload(void* d, const void* h, size_t bytes) {
    if (bytes == 0) return {};
    STRATA_CUDA_TRY(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, copy));
    return {};
  }
  // The compute stream waits for the uploads queued so far.
  status fence_uploads(staging_set& s) {
    STRATA_CUDA_TRY(cudaEventRecord(s.uploaded, copy));
    STRATA_CUDA_TRY(cudaStreamWaitEvent(compute, s.uploaded, 0));
    return {};
  }
  // Downloads on the copy stream and waits (completion thread only).
  status download(void* h, const void* d, size_t bytes) {
    if (bytes == 0) return {};
    STRATA_CUDA_TRY(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, copy));
    STRATA_CUDA_TRY(cudaStreamSynchronize(copy));
    return {};
  }

  // Ends a call on cuda_cache's completion thread: `step` downloads and
  // copies out; then the set is freed and the caller's done runs.
  template <class Step>
  cache_completion completion(staging_set& s, cache_counts& counts, cache_completion done,
                              Step step) {
    return [this, &s, &counts, done = std::move(done), step = std::move(step)](status st) mutable {
      status out = st ? step() : std::move(st);
      if (out) counts = s.counts;
      release(s);
      if (done) done(std::move(out));
    };
  }

  // A call whose enqueueing failed before the cache saw it.
  void fail(staging_set& s, cache_completion& done, error e) {
    release(s);
    if (done) done(std::move(e));
  }
};

expected<std::unique_ptr<staged_cache>> staged_cache::create(row_layout layout,
                                                             cache_geometry geometry,
                                                             size_t max_batch) {
  auto made = cuda_cache::create(layout, geometry);
  if (!made) return made.err();
  auto m = std::make_unique<impl>();
  m->layout = layout;
  m->record_bytes = layout.record_bytes();
  m->cache = std::move(*made);
  m->compute = m->cache->stream();
  STRATA_CUDA_TRY(cudaStreamCreateWithFlags(&m->copy, cudaStreamNonBlocking));
  for (impl::staging_set& s : m->sets) {
    STRATA_CUDA_TRY(cudaEventCreateWithFlags(&s.uploaded, cudaEventDisableTiming));
    STRATA_TRY(m->grow(s, max_batch));
  }
  return std::unique_ptr<staged_cache>(new staged_cache(std::move(m)));
}

staged_cache::staged_cache(std::unique_ptr<impl> m) : impl_(std::move(m)) {}
staged_cache::~staged_cache() = default;

const row_layout& staged_cache::layout() const { return impl_->layout; }
const cache_geometry& staged_cache::geometry() const { return impl_->cache->geometry(); }
size_t staged_cache::size() const { return impl_->cache->size(); }

void staged_cache::query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
                         memory_span<uint32_t> miss_indices, cache_counts& counts,
                         cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t n = keys.size();
  const size_t rb = m.record_bytes;
  if (!is_host(keys) || !is_host(rows) || !is_host(miss_indices)) {
    if (done) done(bad_argument("query: buffers must be host memory"));
    return;
  }
  if (rows.size() < n * rb || miss_indices.size() < n) {
    if (done) done(bad_argument("query: rows or miss_indices hold fewer than keys.size() entries"));
    return;
  }
  auto got = m.acquire(n);
  if (!got) {
    if (done) done(got.err());
    return;
  }
  impl::staging_set& s = **got;
  std::memcpy(s.h_keys, keys.data(), n * sizeof(uint64_t));
  if (status st = m.upload(s.d_keys, s.h_keys, n * sizeof(uint64_t)); !st)
    return m.fail(s, done, st.err());
  if (status st = m.fence_uploads(s); !st) return m.fail(s, done, st.err());
  std::byte* out = rows.data();
  uint32_t* miss_out = miss_indices.data();
  m.cache->query(
      device_span<const uint64_t>(s.d_keys, n), device_span<std::byte>(s.d_rows, n * rb),
      device_span<uint32_t>(s.d_miss, n), s.counts,
      m.completion(s, counts, std::move(done), [&m, &s, n, rb, out, miss_out]() -> status {
        const uint32_t misses = s.counts.misses;
        STRATA_TRY(m.download(s.h_miss, s.d_miss, size_t{misses} * sizeof(uint32_t)));
        if (s.counts.hits > 0) STRATA_TRY(m.download(s.h_rows, s.d_rows, n * rb));
        std::memcpy(miss_out, s.h_miss, size_t{misses} * sizeof(uint32_t));
        // Hit positions only: the runs between misses.
        size_t from = 0;
        for (uint32_t k = 0; k <= misses; ++k) {
          const size_t to = k < misses ? s.h_miss[k] : n;
          if (to > from) std::memcpy(out + from * rb, s.h_rows + from * rb, (to - from) * rb);
          from = to + 1;
        }
        return {};
      }));
}

void staged_cache::insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows,
                          bool dirty, memory_span<uint64_t> evicted_keys,
                          memory_span<std::byte> evicted_rows, cache_counts& counts,
                          cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t n = keys.size();
  const size_t rb = m.record_bytes;
  if (!is_host(keys) || !is_host(rows) || !is_host(evicted_keys) || !is_host(evicted_rows)) {
    if (done) done(bad_argument("insert: buffers must be host memory"));
    return;
  }
  if (rows.size() < n * rb || evicted_keys.size() < n || evicted_rows.size() < n * rb) {
    if (done)
      done(bad_argument("insert: rows or evicted buffers hold fewer than keys.size() rows"));
    return;
  }
  auto got = m.acquire(n);
  if (!got) {
    if (done) done(got.err());
    return;
  }
  impl::staging_set& s = **got;
  std::memcpy(s.h_keys, keys.data(), n * sizeof(uint64_t));
  std::memcpy(s.h_rows, rows.data(), n * rb);
  if (status st = m.upload(s.d_keys, s.h_keys, n * sizeof(uint64_t)); !st)
    return m.fail(s, done, st.err());
  if (status st = m.upload(s.d_rows, s.h_rows, n * rb); !st) return m.fail(s, done, st.err());
  if (status st = m.fence_uploads(s); !st) return m.fail(s, done, st.err());
  uint64_t* ek = evicted_keys.data();
  std::byte* er = evicted_rows.data();
  m.cache->insert(
      device_span<const uint64_t>(s.d_keys, n), device_span<const std::byte>(s.d_rows, n * rb),
      dirty, device_span<uint64_t>(s.d_ev_keys, n), device_span<std::byte>(s.d_ev_rows, n * rb),
      s.counts, m.completion(s, counts, std::move(done), [&m, &s, rb, ek, er]() -> status {
        const size_t e = s.counts.evicted;
        // h_keys / h_rows are free again: the upload completed.
        STRATA_TRY(m.download(s.h_keys, s.d_ev_keys, e * sizeof(uint64_t)));
        STRATA_TRY(m.download(s.h_rows, s.d_ev_rows, e * rb));
        std::memcpy(ek, s.h_keys, e * sizeof(uint64_t));
        std::memcpy(er, s.h_rows, e * rb);
        return {};
      }));
}

void staged_cache::update(memory_span<const uint64_t> keys, memory_span<const float> grads,
                          const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
                          cache_counts& counts, cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t n = keys.size();
  const size_t dim = m.layout.dim;
  if (!is_host(keys) || !is_host(grads) || !is_host(miss_indices)) {
    if (done) done(bad_argument("update: buffers must be host memory"));
    return;
  }
  if (grads.size() < n * dim || miss_indices.size() < n) {
    if (done)
      done(bad_argument("update: grads or miss_indices hold fewer than keys.size() entries"));
    return;
  }
  auto got = m.acquire(n);
  if (!got) {
    if (done) done(got.err());
    return;
  }
  impl::staging_set& s = **got;
  std::memcpy(s.h_keys, keys.data(), n * sizeof(uint64_t));
  std::memcpy(s.h_grads, grads.data(), n * dim * sizeof(float));
  if (status st = m.upload(s.d_keys, s.h_keys, n * sizeof(uint64_t)); !st)
    return m.fail(s, done, st.err());
  if (status st = m.upload(s.d_grads, s.h_grads, n * dim * sizeof(float)); !st)
    return m.fail(s, done, st.err());
  if (status st = m.fence_uploads(s); !st) return m.fail(s, done, st.err());
  uint32_t* miss_out = miss_indices.data();
  m.cache->update(device_span<const uint64_t>(s.d_keys, n),
                  device_span<const float>(s.d_grads, n * dim), optimizer,
                  device_span<uint32_t>(s.d_miss, n), s.counts,
                  m.completion(s, counts, std::move(done), [&m, &s, miss_out]() -> status {
                    const size_t misses = s.counts.misses;
                    STRATA_TRY(m.download(s.h_miss, s.d_miss, misses * sizeof(uint32_t)));
                    std::memcpy(miss_out, s.h_miss, misses * sizeof(uint32_t));
                    return {};
                  }));
}

void staged_cache::dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out,
                        bool include_clean, bool clear_dirty, cache_counts& counts,
                        cache_completion done) {
  counts = {};
  impl& m = *impl_;
  const size_t rb = m.record_bytes;
  if (!is_host(keys_out) || !is_host(rows_out)) {
    if (done) done(bad_argument("dump: buffers must be host memory"));
    return;
  }
  m.wait_idle();  // size() is current once earlier calls completed
  const size_t resident = m.cache->size();
  if (keys_out.size() < resident || rows_out.size() < resident * rb) {
    if (done) done(bad_argument("dump: output buffers hold fewer than size() rows"));
    return;
  }
  auto got = m.acquire(resident);
  if (!got) {
    if (done) done(got.err());
    return;
  }
  impl::staging_set& s = **got;
  uint64_t* ko = keys_out.data();
  std::byte* ro = rows_out.data();
  m.cache->dump(device_span<uint64_t>(s.d_keys, resident),
                device_span<std::byte>(s.d_rows, resident * rb), include_clean, clear_dirty,
                s.counts,
                m.completion(s, counts, std::move(done), [&m, &s, rb, ko, ro]() -> status {
                  const size_t k = s.counts.hits;
                  STRATA_TRY(m.download(s.h_keys, s.d_keys, k * sizeof(uint64_t)));
                  STRATA_TRY(m.download(s.h_rows, s.d_rows, k * rb));
                  std::memcpy(ko, s.h_keys, k * sizeof(uint64_t));
                  std::memcpy(ro, s.h_rows, k * rb);
                  return {};
                }));
}

void staged_cache::clear() {
  impl_->wait_idle();
  impl_->cache->clear();
}

}  // namespace strata::gpu
