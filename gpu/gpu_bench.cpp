#include "gpu/gpu_bench.hpp"

#include <chrono>
#include <future>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda_cache.hpp"
#include "gpu/device_memory.hpp"
#include "gpu/staged_cache.hpp"

namespace strata::bench {
namespace {

using clock_type = std::chrono::steady_clock;

// Enqueues `calls` operations back to back (the stream orders them) and
// waits for the last one's completion; returns seconds, or -1 on error.
template <class Issue>
double timed(int calls, Issue&& issue, std::ostream& log) {
  std::vector<cache_counts> counts(calls);
  std::promise<status> last;
  auto result = last.get_future();
  const auto start = clock_type::now();
  for (int c = 0; c < calls; ++c) {
    cache_completion done;
    if (c == calls - 1) done = [&last](status st) { last.set_value(std::move(st)); };
    issue(c, counts[c], std::move(done));
  }
  const status st = result.get();
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  if (!st) {
    log << "strata bench gpu: " << st.err().to_string() << '\n';
    return -1;
  }
  return s;
}

}  // namespace

bool run_gpu_bench(const gpu_bench_options& o, bench_report& report, std::ostream& log) {
  if (const std::string why = gpu::unavailable_reason(); !why.empty()) {
    log << "strata bench gpu: skipped: " << why << '\n';
    return false;
  }
  if (auto d = gpu::device_description()) log << "strata bench gpu: device " << *d << '\n';
  const auto bw = gpu::copy_bandwidth(o.small ? (64u << 20) : (1024u << 20), 10);
  if (!bw) {
    log << "strata bench gpu: " << bw.err().to_string() << '\n';
    return false;
  }
  const double memcpy_gbps = *bw / 1e9;
  report.add({"gpu_memcpy_d2d_gbps", memcpy_gbps, "GB/s", "", 0});
  constexpr double hugectr_floor_gbps = 500.0 * 1073741824.0 / 1e9;  // 500 GiB/s

  const uint32_t dim = 128;
  const int batches = o.small ? 4 : o.batches;
  for (const uint32_t n : {1024u, 65536u}) {
    for (const int hit_pct : {50, 90, 100}) {
      const row_layout layout{dim, optimizer_kind::sgd, true};
      const size_t rb = layout.record_bytes();
      // Resident keys 1..n*4; capacity 4x that (one slab per set holds
      // its ~8 keys without overflow), so hits are exactly as planned.
      const uint64_t resident = uint64_t{n} * 4;
      const cache_geometry geo{static_cast<uint32_t>(resident * 4 / 32), 1};
      auto made = gpu::cuda_cache::create(layout, geo);
      if (!made) {
        log << "strata bench gpu: " << made.err().to_string() << '\n';
        return false;
      }
      gpu::cuda_cache& cache = **made;
      gpu::device_memory mem;
      // Fill: insert the resident keys in batches of n.
      std::vector<uint64_t> fill(resident);
      for (uint64_t i = 0; i < resident; ++i) fill[i] = i + 1;
      std::vector<std::byte> rows(size_t{n} * rb, std::byte{0});
      for (size_t i = 0; i < n; ++i) meta_of(rows.data() + i * rb).version = 1;
      auto* d_keys = reinterpret_cast<uint64_t*>(mem.allocate(resident * 8));
      auto* d_rows = mem.allocate(rows.size());
      auto* d_ek = reinterpret_cast<uint64_t*>(mem.allocate(size_t{n} * 8));
      auto* d_er = mem.allocate(rows.size());
      mem.upload(reinterpret_cast<std::byte*>(d_keys), fill.data(), resident * 8);
      mem.upload(d_rows, rows.data(), rows.size());
      const double fill_s = timed(
          static_cast<int>(resident / n),
          [&](int c, cache_counts& counts, cache_completion done) {
            cache.insert(device_span<const uint64_t>(d_keys + size_t(c) * n, n),
                         device_span<const std::byte>(d_rows, rows.size()), false,
                         device_span<uint64_t>(d_ek, n), device_span<std::byte>(d_er, rows.size()),
                         counts, std::move(done));
          },
          log);
      if (fill_s < 0) return false;

      // Query batches: hit_pct% resident keys, the rest absent.
      std::mt19937_64 rng(n + hit_pct);
      std::vector<uint64_t> q(size_t(batches) * n);
      for (auto& k : q)
        k = (int(rng() % 100) < hit_pct) ? 1 + rng() % resident : resident + 1 + rng() % resident;
      auto* d_q = reinterpret_cast<uint64_t*>(mem.allocate(q.size() * 8));
      mem.upload(reinterpret_cast<std::byte*>(d_q), q.data(), q.size() * 8);
      auto* d_out = mem.allocate(size_t{n} * rb);
      auto* d_miss = reinterpret_cast<uint32_t*>(mem.allocate(size_t{n} * 4));
      auto query = [&](int c, cache_counts& counts, cache_completion done) {
        cache.query(device_span<const uint64_t>(d_q + size_t(c) * n, n),
                    device_span<std::byte>(d_out, size_t{n} * rb), device_span<uint32_t>(d_miss, n),
                    counts, std::move(done));
      };
      if (timed(2, query, log) < 0) return false;  // warm-up
      const double s = timed(batches, query, log);
      if (s < 0) return false;
      const double keys = double(batches) * n;
      const double gbps = keys * (hit_pct / 100.0) * double(rb) / s / 1e9;
      const std::string name = "gpu_query_" + std::to_string(n) + "_hit" + std::to_string(hit_pct);
      report.add({name + "_keys_per_s", keys / s, "keys/s", "", 0});
      report.add({name + "_gbps", gbps, "GB/s", "cudaMemcpy_d2d", memcpy_gbps});
      if (n == 65536)
        report.add({name + "_vs_hugectr", gbps, "GB/s", "hugectr_floor", hugectr_floor_gbps});
    }
    // Update (gradient + Adagrad), every key resident.
    const row_layout layout{dim, optimizer_kind::adagrad, true};
    const size_t rb = layout.record_bytes();
    const cache_geometry geo{std::max<uint32_t>(1, n * 4 / 32), 1};
    auto made = gpu::cuda_cache::create(layout, geo);
    if (!made) {
      log << "strata bench gpu: " << made.err().to_string() << '\n';
      return false;
    }
    gpu::cuda_cache& cache = **made;
    gpu::device_memory mem;
    std::vector<uint64_t> keys(n);
    for (uint32_t i = 0; i < n; ++i) keys[i] = i + 1;
    std::vector<std::byte> rows(size_t{n} * rb, std::byte{0});
    for (size_t i = 0; i < n; ++i) meta_of(rows.data() + i * rb).version = 1;
    std::vector<float> grads(size_t{n} * dim, 0.01f);
    auto* d_keys = reinterpret_cast<uint64_t*>(mem.allocate(size_t{n} * 8));
    auto* d_rows = mem.allocate(rows.size());
    auto* d_ek = reinterpret_cast<uint64_t*>(mem.allocate(size_t{n} * 8));
    auto* d_er = mem.allocate(rows.size());
    auto* d_g = reinterpret_cast<float*>(mem.allocate(grads.size() * 4));
    auto* d_miss = reinterpret_cast<uint32_t*>(mem.allocate(size_t{n} * 4));
    mem.upload(reinterpret_cast<std::byte*>(d_keys), keys.data(), size_t{n} * 8);
    mem.upload(d_rows, rows.data(), rows.size());
    mem.upload(reinterpret_cast<std::byte*>(d_g), grads.data(), grads.size() * 4);
    const double fill_s = timed(
        1,
        [&](int, cache_counts& counts, cache_completion done) {
          cache.insert(device_span<const uint64_t>(d_keys, n),
                       device_span<const std::byte>(d_rows, rows.size()), false,
                       device_span<uint64_t>(d_ek, n), device_span<std::byte>(d_er, rows.size()),
                       counts, std::move(done));
        },
        log);
    if (fill_s < 0) return false;
    optimizer_config opt;
    opt.kind = optimizer_kind::adagrad;
    auto update = [&](int, cache_counts& counts, cache_completion done) {
      cache.update(device_span<const uint64_t>(d_keys, n),
                   device_span<const float>(d_g, grads.size()), opt,
                   device_span<uint32_t>(d_miss, n), counts, std::move(done));
    };
    if (timed(2, update, log) < 0) return false;
    const double s = timed(batches, update, log);
    if (s < 0) return false;
    report.add({"gpu_update_adagrad_" + std::to_string(n) + "_keys_per_s", double(batches) * n / s,
                "keys/s", "", 0});
  }
  // Staged (what the cache-tier actor uses with caches.backend: gpu): host
  // buffers in and out through pinned memory, queries of 4096 keys at 90%
  // hits, dim 128 SGD rows.
  {
    const uint32_t n = 4096;
    const row_layout layout{dim, optimizer_kind::sgd, true};
    const size_t rb = layout.record_bytes();
    const uint64_t resident = uint64_t{n} * 4;
    const cache_geometry geo{static_cast<uint32_t>(resident * 4 / 32), 1};
    auto made = gpu::staged_cache::create(layout, geo, n);
    if (!made) {
      log << "strata bench gpu: " << made.err().to_string() << '\n';
      return false;
    }
    gpu::staged_cache& cache = **made;
    std::vector<uint64_t> keys(n), ev_keys(n);
    std::vector<std::byte> rows(size_t{n} * rb, std::byte{0}), ev_rows(rows.size());
    for (size_t i = 0; i < n; ++i) meta_of(rows.data() + i * rb).version = 1;
    for (uint64_t b0 = 0; b0 < resident; b0 += n) {
      for (uint32_t i = 0; i < n; ++i) keys[i] = b0 + i + 1;
      const double s = timed(
          1,
          [&](int, cache_counts& counts, cache_completion done) {
            cache.insert(host_span(std::span<const uint64_t>(keys)),
                         host_span(std::span<const std::byte>(rows)), false,
                         host_span(std::span<uint64_t>(ev_keys)),
                         host_span(std::span<std::byte>(ev_rows)), counts, std::move(done));
          },
          log);
      if (s < 0) return false;
    }
    std::mt19937_64 rng(7);
    const int calls = o.small ? 4 : 256;
    std::vector<std::vector<uint64_t>> q(2, std::vector<uint64_t>(n));
    for (auto& batch : q)
      for (auto& k : batch)
        k = (rng() % 100 < 90) ? 1 + rng() % resident : resident + 1 + rng() % resident;
    std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(size_t{n} * rb));
    std::vector<std::vector<uint32_t>> miss(2, std::vector<uint32_t>(n));
    auto query = [&](int c, cache_counts& counts, cache_completion done) {
      const int b = c % 2;  // two calls in flight use different buffers
      cache.query(host_span(std::span<const uint64_t>(q[b])),
                  host_span(std::span<std::byte>(out[b])), host_span(std::span<uint32_t>(miss[b])),
                  counts, std::move(done));
    };
    if (timed(2, query, log) < 0) return false;
    const double s = timed(calls, query, log);
    if (s < 0) return false;
    const double keys_done = double(calls) * n;
    report.add({"gpu_staged_query_4096_hit90_keys_per_s", keys_done / s, "keys/s", "", 0});
    report.add({"gpu_staged_query_4096_hit90_gbps", keys_done * 0.9 * double(rb) / s / 1e9, "GB/s",
                "", 0});
  }
  return true;
}

}  // namespace strata::bench
