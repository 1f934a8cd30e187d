// Test harness for cache_backend implementations: stages host vectors into
// the memory a backend accepts (host or device), runs one call, waits for
// its completion (which may arrive on another thread, e.g. a CUDA stream
// callback) and copies the results back, so tests only handle host vectors.
//
// `Factory` is a backend factory as described in cache_conformance.hpp.
// Also small helpers the suite shares (keys of a set, zero records).
// Not thread-safe; one harness per test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/hash.hpp"
#include "tiers/cache_backend.hpp"
#include "tiers/row.hpp"

namespace strata::testing {

// Host memory for backends that take host spans (cpu_cache).
class host_memory {
 public:
  std::byte* allocate(size_t bytes) {
    blocks_.push_back(std::make_unique<std::max_align_t[]>(
        (std::max<size_t>(bytes, 1) + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t)));
    return reinterpret_cast<std::byte*>(blocks_.back().get());
  }
  void upload(std::byte* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const std::byte* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }

 private:
  std::vector<std::unique_ptr<std::max_align_t[]>> blocks_;
};

// Results of one call, copied back to the host.
struct query_result {
  status st;
  cache_counts counts;
  std::vector<std::byte> rows;   // keys.size() records; misses untouched
  std::vector<uint32_t> misses;  // counts.misses entries
};
struct insert_result {
  status st;
  cache_counts counts;
  std::vector<uint64_t> evicted_keys;  // counts.evicted entries
  std::vector<std::byte> evicted_rows;
};
struct update_result {
  status st;
  cache_counts counts;
  std::vector<uint32_t> misses;
};
struct weights_result {
  status st;
  cache_counts counts;
  std::vector<std::byte> versions;  // 8 bytes per key; misses keep the fill byte
  std::vector<std::byte> weights;   // 4 dim bytes per key; the same
  std::vector<uint32_t> misses;
};
struct dump_result {
  status st;
  cache_counts counts;
  std::vector<uint64_t> keys;  // counts.hits entries
  std::vector<std::byte> rows;
};

template <class Factory>
class cache_harness {
 public:
  cache_harness(row_layout layout, cache_geometry geometry)
      : cache_(Factory::make(layout, geometry)), rb_(layout.record_bytes()) {}

  cache_backend& cache() { return *cache_; }
  size_t record_bytes() const { return rb_; }
  memory_kind kind() const { return cache_->memory(); }
  // The memory kind this backend must refuse.
  memory_kind other_kind() const {
    return kind() == memory_kind::host ? memory_kind::device : memory_kind::host;
  }

  query_result query(const std::vector<uint64_t>& keys) {
    typename Factory::memory mem;
    const size_t n = keys.size();
    auto k = stage(mem, keys);
    auto rows = space<std::byte>(mem, n * rb_);
    auto miss = space<uint32_t>(mem, n);
    query_result r;
    r.st = wait([&](cache_completion done) {
      cache_->query(as_const(k), rows, miss, r.counts, std::move(done));
    });
    r.rows = fetch(mem, rows, n * rb_);
    r.misses = fetch(mem, miss, r.st ? r.counts.misses : 0);
    return r;
  }

  insert_result insert(const std::vector<uint64_t>& keys, const std::vector<std::byte>& rows,
                       bool dirty) {
    typename Factory::memory mem;
    const size_t n = keys.size();
    auto k = stage(mem, keys);
    auto r_in = stage(mem, rows);
    auto ek = space<uint64_t>(mem, n);
    auto er = space<std::byte>(mem, n * rb_);
    insert_result r;
    r.st = wait([&](cache_completion done) {
      cache_->insert(as_const(k), as_const(r_in), dirty, ek, er, r.counts, std::move(done));
    });
    const size_t e = r.st ? r.counts.evicted : 0;
    r.evicted_keys = fetch(mem, ek, e);
    r.evicted_rows = fetch(mem, er, e * rb_);
    return r;
  }

  update_result update(const std::vector<uint64_t>& keys, const std::vector<float>& grads,
                       const optimizer_config& opt) {
    typename Factory::memory mem;
    auto k = stage(mem, keys);
    auto g = stage(mem, grads);
    auto miss = space<uint32_t>(mem, keys.size());
    update_result r;
    r.st = wait([&](cache_completion done) {
      cache_->update(as_const(k), as_const(g), opt, miss, r.counts, std::move(done));
    });
    r.misses = fetch(mem, miss, r.st ? r.counts.misses : 0);
    return r;
  }

  // query_weights() on host buffers (its interface takes host memory
  // only), pre-filled with `fill` so that untouched places show.
  weights_result query_weights(const std::vector<uint64_t>& keys, std::byte fill) {
    const size_t n = keys.size();
    const size_t wb = size_t{4} * cache_->layout().dim;
    std::vector<uint64_t> k = keys;
    weights_result r;
    r.versions.assign(n * 8, fill);
    r.weights.assign(n * wb, fill);
    r.misses.assign(n, 0);
    r.st = wait([&](cache_completion done) {
      cache_->query_weights(host_span(std::span<const uint64_t>(k)),
                            host_span(std::span<std::byte>(r.versions)),
                            host_span(std::span<std::byte>(r.weights)),
                            host_span(std::span<uint32_t>(r.misses)), r.counts, std::move(done));
    });
    r.misses.resize(r.st ? r.counts.misses : 0);
    return r;
  }

  dump_result dump(bool include_clean, bool clear_dirty) {
    typename Factory::memory mem;
    const size_t cap = cache_->size();
    auto k = space<uint64_t>(mem, cap);
    auto rows = space<std::byte>(mem, cap * rb_);
    dump_result r;
    r.st = wait([&](cache_completion done) {
      cache_->dump(k, rows, include_clean, clear_dirty, r.counts, std::move(done));
    });
    const size_t h = r.st ? r.counts.hits : 0;
    r.keys = fetch(mem, k, h);
    r.rows = fetch(mem, rows, h * rb_);
    return r;
  }

  // Resident keys, sorted (a dump: changes neither flags nor LRU ticks).
  std::vector<uint64_t> resident() {
    auto d = dump(true, false);
    EXPECT_TRUE(d.st) << d.st.err().to_string();
    std::sort(d.keys.begin(), d.keys.end());
    return d.keys;
  }

  // Runs one call and waits for its completion, which may come from another
  // thread (a CUDA stream callback).
  template <class Call>
  status wait(Call&& call) {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<status> result;
    call([&](status st) {
      std::lock_guard lock(mu);
      result = std::move(st);
      cv.notify_one();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return result.has_value(); });
    return std::move(*result);
  }

  template <class T>
  memory_span<T> space(typename Factory::memory& mem, size_t count) {
    return {reinterpret_cast<T*>(mem.allocate(count * sizeof(T))), count, kind()};
  }

 private:
  template <class T>
  memory_span<T> stage(typename Factory::memory& mem, const std::vector<T>& v) {
    auto s = space<T>(mem, v.size());
    mem.upload(reinterpret_cast<std::byte*>(s.data()), v.data(), v.size() * sizeof(T));
    return s;
  }
  template <class T>
  std::vector<T> fetch(typename Factory::memory& mem, memory_span<T> s, size_t count) {
    std::vector<T> out(count);
    mem.download(out.data(), reinterpret_cast<const std::byte*>(s.data()), count * sizeof(T));
    return out;
  }
  template <class T>
  static memory_span<const T> as_const(memory_span<T> s) {
    return {s.data(), s.size(), s.kind()};
  }

  std::unique_ptr<cache_backend> cache_;
  size_t rb_;
};

// --- helpers -------------------------------------------------------------------

template <class T>
memory_span<T> with_kind(memory_span<T> s, memory_kind kind) {
  return {s.data(), s.size(), kind};
}
template <class T>
memory_span<const T> to_const(memory_span<T> s) {
  return {s.data(), s.size(), s.kind()};
}

// The first `count` keys >= `from` that map to `set` of `sets`.
inline std::vector<uint64_t> keys_in_set(uint32_t set, uint32_t sets, size_t count,
                                         uint64_t from = 1) {
  std::vector<uint64_t> out;
  for (uint64_t k = from; out.size() < count; ++k)
    if (cache_set_of(k, sets) == set) out.push_back(k);
  return out;
}

// A record of `layout` for each key with every value word 0, version `version`.
inline std::vector<std::byte> zero_records(const row_layout& layout, size_t count,
                                           uint64_t version) {
  std::vector<std::byte> out(count * layout.record_bytes(), std::byte{0});
  for (size_t i = 0; i < count; ++i)
    meta_of(out.data() + i * layout.record_bytes()).version = version;
  return out;
}

inline std::vector<uint64_t> sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace strata::testing
