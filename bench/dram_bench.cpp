// DRAM tier benchmarks, each against the two baselines it must beat or
// approach:
//
//   raw_gather     the same rows gathered from a flat float array by index
//                  (no hashing, no metadata: the memory-bandwidth ceiling);
//   unordered_map  std::unordered_map<uint64_t, std::vector<float>>
//                  find + copy (the obvious hash-map implementation).
//
// Lookups use the SGD layout (no optimizer state: weights only, as served);
// pushes use Adagrad (weights + accumulators) and apply the same Adagrad
// arithmetic in every variant. Batches are 4096 random keys (unique keys for
// push, as the tier requires); only the operation itself is timed, batch
// generation is not. Keys are splitmix64(i), so the tier hashes real 64-bit
// keys while the flat array is indexed by i directly.
//
// The embedding cache's lookup (cpu_cache::query_weights, what a serving
// lookup runs for its hits) is measured the same way against raw_gather:
// `cache_query_dim64`, the cache twice the rows' size, every key resident;
// its insert of newer copies of resident rows as `cache_insert_dim64`, of
// rows it does not hold into a full cache (each evicting) as
// `cache_insert_new_dim64`.
//
// Each structure is built, measured and freed before the next one, so the
// peak memory is one structure (~6 GB at the full sizes).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bench/report.hpp"
#include "tiers/cpu_cache.hpp"
#include "tiers/dram_tier.hpp"
#include "tiers/optimizer.hpp"

namespace strata::bench {
namespace {

using bench_clock = std::chrono::steady_clock;

constexpr size_t batch_size = 4096;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t key_of(uint64_t i) { return splitmix64(i); }

struct bench_sizes {
  uint64_t keys_small_dims;  // dim 16 and 64
  uint64_t keys_dim128;
  double seconds;  // timed seconds per measurement
};

double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

void progress(const std::string& what) { std::cerr << "dram bench: " << what << std::endl; }

// A flat array of floats on huge pages when the kernel grants them, like the
// tier's arena, so the baseline is not slowed by TLB misses the tier avoids.
class flat_floats {
 public:
  explicit flat_floats(size_t count) : bytes_(std::max<size_t>(count * sizeof(float), 1)) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    (void)::madvise(p, bytes_, MADV_HUGEPAGE);
    data_ = static_cast<float*>(p);
  }
  ~flat_floats() { ::munmap(data_, bytes_); }
  flat_floats(const flat_floats&) = delete;
  flat_floats& operator=(const flat_floats&) = delete;
  float* data() const { return data_; }

 private:
  float* data_;
  size_t bytes_;
};

// Random batches: indices in [0, n) and their keys. Unique ones for push.
class batch_source {
 public:
  batch_source(uint64_t n, bool unique, uint64_t seed) : n_(n), unique_(unique), state_(seed) {}
  void next() {
    indices_.clear();
    seen_.clear();
    while (indices_.size() < batch_size) {
      const uint64_t index = splitmix64(state_++) % n_;
      if (unique_ && !seen_.insert(index).second) continue;
      indices_.push_back(index);
    }
    keys_.resize(indices_.size());
    for (size_t i = 0; i < indices_.size(); ++i) keys_[i] = key_of(indices_[i]);
  }
  const std::vector<uint64_t>& indices() const { return indices_; }
  const std::vector<uint64_t>& keys() const { return keys_; }

 private:
  uint64_t n_;
  bool unique_;
  uint64_t state_;
  std::vector<uint64_t> indices_;
  std::vector<uint64_t> keys_;
  std::unordered_set<uint64_t> seen_;
};

// Times `op` over fresh batches until `seconds` of timed work; rows/s.
template <class Op>
double rows_per_second(batch_source& batches, double seconds, Op&& op) {
  for (int i = 0; i < 3; ++i) {  // warm-up
    batches.next();
    op(batches);
  }
  double timed = 0;
  uint64_t rows = 0;
  while (timed < seconds) {
    batches.next();
    const auto start = bench_clock::now();
    op(batches);
    timed += seconds_since(start);
    rows += batches.keys().size();
  }
  return static_cast<double>(rows) / timed;
}

// The weights (and accumulators) of row i: deterministic, non-trivial.
float initial_value(uint64_t i, uint32_t j) {
  return static_cast<float>((i * 31 + j) % 1000) * 0.001f;
}

// --- Adagrad, as tiers/optimizer.cpp computes it -------------------------------
inline void adagrad_step(const optimizer_config& c, uint32_t dim, float* w, float* acc,
                         const float* grad) {
  for (uint32_t i = 0; i < dim; ++i) {
    const float g = grad[i] + (c.l2 * w[i]);
    acc[i] = acc[i] + (g * g);
    w[i] = w[i] - ((c.learning_rate * g) / (std::sqrt(acc[i]) + c.epsilon));
  }
}

// --- the three structures ------------------------------------------------------

// Flat array of n rows x `words` floats (weights, then accumulators if any).
std::unique_ptr<flat_floats> build_flat(uint64_t n, uint32_t words) {
  auto flat = std::make_unique<flat_floats>(n * words);
  for (uint64_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < words; ++j) flat->data()[i * words + j] = initial_value(i, j);
  return flat;
}

using float_map = std::unordered_map<uint64_t, std::vector<float>>;
std::unique_ptr<float_map> build_map(uint64_t n, uint32_t words) {
  auto map = std::make_unique<float_map>();
  map->reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    std::vector<float> row(words);
    for (uint32_t j = 0; j < words; ++j) row[j] = initial_value(i, j);
    map->emplace(key_of(i), std::move(row));
    if ((i + 1) % 2000000 == 0) progress("  map " + std::to_string(i + 1) + " rows");
  }
  return map;
}

std::unique_ptr<dram_tier> build_tier(uint64_t n, const row_layout& layout) {
  dram_tier_config config;
  config.policy = eviction_policy::lru;
  config.capacity_bytes = dram_tier::budget_for_rows(layout, config.policy, n);
  auto tier = std::make_unique<dram_tier>(layout, config);
  row_buffer rows(layout);
  row_buffer spilled(layout);
  for (uint64_t base = 0; base < n; base += batch_size) {
    rows.clear();
    const uint64_t end = std::min<uint64_t>(n, base + batch_size);
    for (uint64_t i = base; i < end; ++i) {
      std::byte* rec = rows.append(key_of(i));
      meta_of(rec) = row_meta{1, 0, 0};
      float* v = weights_of(rec);
      for (uint32_t j = 0; j < layout.value_words(); ++j) v[j] = initial_value(i, j);
    }
    auto st = tier->store(rows.keys(), rows.rows(), false, spilled);
    if (!st) throw std::runtime_error("dram bench: store failed: " + st.err().to_string());
    if (end % 2000000 < batch_size && end >= 2000000)
      progress("  dram tier " + std::to_string(end) + " rows");
  }
  if (tier->size() != n || !spilled.empty())
    throw std::runtime_error("dram bench: the tier did not keep every row resident");
  return tier;
}

// --- lookup ----------------------------------------------------------------------
// The raw_gather baseline of a lookup: rows of `dim` floats gathered by
// index from a flat array of n rows (batches of seed `seed`).
double raw_gather_rows_per_s(uint32_t dim, uint64_t n, double seconds, uint64_t seed) {
  progress("building flat array, dim " + std::to_string(dim) + ", " + std::to_string(n) + " rows");
  auto flat = build_flat(n, dim);
  std::vector<float> out(batch_size * dim);
  batch_source batches(n, false, seed);
  return rows_per_second(batches, seconds, [&](const batch_source& b) {
    const auto& idx = b.indices();
    const float* base = flat->data();
    for (size_t i = 0; i < idx.size(); ++i)
      std::memcpy(out.data() + i * dim, base + idx[i] * dim, sizeof(float) * dim);
  });
}

// The pushes' optimizer and one batch of gradients.
optimizer_config bench_adagrad() {
  optimizer_config adagrad;
  adagrad.kind = optimizer_kind::adagrad;
  adagrad.learning_rate = 0.01f;
  return adagrad;
}
std::vector<float> bench_grads(uint32_t dim) {
  std::vector<float> grads(batch_size * dim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
  return grads;
}

// The Adagrad baseline: rows (weights and accumulators) of a flat array,
// updated in place at the batch's indices.
double raw_adagrad_rows_per_s(const optimizer_config& adagrad, uint32_t dim, uint64_t n,
                              double seconds, const std::vector<float>& grads) {
  progress("building flat array, Adagrad dim " + std::to_string(dim) + ", " + std::to_string(n) +
           " rows");
  const uint32_t words = 2 * dim;
  auto flat = build_flat(n, words);
  batch_source batches(n, true, 2);
  return rows_per_second(batches, seconds, [&](const batch_source& b) {
    const auto& idx = b.indices();
    for (size_t i = 0; i < idx.size(); ++i) {
      float* row = flat->data() + idx[i] * words;
      adagrad_step(adagrad, dim, row, row + dim, grads.data() + i * dim);
    }
  });
}

void bench_lookup(uint32_t dim, uint64_t n, double seconds, bench_report& report) {
  const row_layout layout{dim, optimizer_kind::sgd, true};
  const std::string name = "dram_lookup_dim" + std::to_string(dim);
  std::vector<float> out_floats(batch_size * dim);
  const double raw = raw_gather_rows_per_s(dim, n, seconds, 1);
  double map_rate = 0;
  double tier_rate = 0;
  {
    progress("building dram tier, dim " + std::to_string(dim));
    const auto start = bench_clock::now();
    auto tier = build_tier(n, layout);
    progress("  built in " + std::to_string(seconds_since(start)) + " s, " +
             std::to_string(tier->memory_bytes() >> 20) + " MiB");
    std::vector<std::byte> out(batch_size * layout.record_bytes());
    std::vector<uint32_t> misses;
    batch_source batches(n, false, 1);
    tier_rate = rows_per_second(batches, seconds, [&](const batch_source& b) {
      misses.clear();
      auto st = tier->lookup(b.keys(), rows_span{out.data(), layout.record_bytes()}, misses);
      if (!st || !misses.empty()) throw std::runtime_error("dram bench: lookup missed");
    });
  }
  {
    progress("building unordered_map, dim " + std::to_string(dim));
    auto map = build_map(n, dim);
    batch_source batches(n, false, 1);
    map_rate = rows_per_second(batches, seconds, [&](const batch_source& b) {
      const auto& keys = b.keys();
      for (size_t i = 0; i < keys.size(); ++i) {
        auto it = map->find(keys[i]);
        if (it == map->end()) throw std::runtime_error("dram bench: map lookup missed");
        std::memcpy(out_floats.data() + i * dim, it->second.data(), sizeof(float) * dim);
      }
    });
  }
  report.add({name, tier_rate, "rows/s", "raw_gather", raw});
  report.add({name, tier_rate, "rows/s", "unordered_map", map_rate});
}

// --- push (Adagrad) and bytes per key ----------------------------------------------
void bench_push(uint32_t dim, uint64_t n, double seconds, bench_report& report) {
  const row_layout layout{dim, optimizer_kind::adagrad, true};
  const optimizer_config adagrad = bench_adagrad();
  const std::vector<float> grads = bench_grads(dim);
  const std::string name = "dram_push_adagrad_dim" + std::to_string(dim);
  const uint32_t words = layout.value_words();
  const double raw = raw_adagrad_rows_per_s(adagrad, dim, n, seconds, grads);
  double map_rate = 0;
  double tier_rate = 0;
  double bytes_per_key = 0;
  {
    progress("building dram tier, Adagrad dim " + std::to_string(dim));
    auto tier = build_tier(n, layout);
    bytes_per_key = static_cast<double>(tier->memory_bytes()) / static_cast<double>(tier->size());
    std::vector<uint32_t> misses;
    batch_source batches(n, true, 2);
    tier_rate = rows_per_second(batches, seconds, [&](const batch_source& b) {
      misses.clear();
      auto st = tier->push(b.keys(), grads.data(), dim, adagrad, misses);
      if (!st || !misses.empty()) throw std::runtime_error("dram bench: push missed");
    });
  }
  {
    progress("building unordered_map, Adagrad dim " + std::to_string(dim));
    auto map = build_map(n, words);
    batch_source batches(n, true, 2);
    map_rate = rows_per_second(batches, seconds, [&](const batch_source& b) {
      const auto& keys = b.keys();
      for (size_t i = 0; i < keys.size(); ++i) {
        auto it = map->find(keys[i]);
        if (it == map->end()) throw std::runtime_error("dram bench: map push missed");
        float* row = it->second.data();
        adagrad_step(adagrad, dim, row, row + dim, grads.data() + i * dim);
      }
    });
  }
  report.add({name, tier_rate, "rows/s", "raw_gather", raw});
  report.add({name, tier_rate, "rows/s", "unordered_map", map_rate});
  report.add({"dram_bytes_per_key", bytes_per_key, "bytes", "raw_row_bytes",
              static_cast<double>(layout.raw_bytes())});
}

// Several tables (issue 20) in one shard's DRAM, each table in a tier of
// its own (per-table arenas: a tier holds one row width): bytes per key
// over all three against their raw rows (weights and optimizer state), and
// per table. Widths and optimizers as in the three-table test.
void bench_bytes_multi(uint64_t n, bench_report& report) {
  struct table {
    const char* name;
    uint32_t dim;
    optimizer_kind optimizer;
  };
  const table tables[] = {{"dim8_adagrad", 8, optimizer_kind::adagrad},
                          {"dim16_adam", 16, optimizer_kind::adam},
                          {"dim64_ftrl", 64, optimizer_kind::ftrl}};
  double bytes = 0, keys = 0, raw = 0;
  for (const auto& t : tables) {
    const row_layout layout{t.dim, t.optimizer, true};
    progress(std::string("building dram tier of table ") + t.name);
    auto tier = build_tier(n / 3, layout);
    const double size = static_cast<double>(tier->size());
    bytes += static_cast<double>(tier->memory_bytes());
    keys += size;
    raw += static_cast<double>(layout.raw_bytes()) * size;
    report.add({std::string("dram_bytes_per_key_multi_") + t.name,
                static_cast<double>(tier->memory_bytes()) / size, "bytes", "raw_row_bytes",
                static_cast<double>(layout.raw_bytes())});
  }
  report.add({"dram_bytes_per_key_multi", bytes / keys, "bytes", "raw_row_bytes", raw / keys});
}

}  // namespace

// --- the embedding cache: lookup (serving's hit path) and update -------------------

namespace {

// Inserts clean rows into a cache (as a cache tier's fill does), with room
// for the dirty rows a batch may evict.
class cache_filler {
 public:
  explicit cache_filler(const row_layout& layout)
      : evicted_keys_(batch_size), evicted_(batch_size * layout.record_bytes()) {}
  cache_counts insert(cpu_cache& cache, std::span<const uint64_t> keys,
                      std::span<const std::byte> records) {
    cache_counts counts;
    cache.insert(host_span(keys), host_span(records), false,
                 host_span(std::span<uint64_t>(evicted_keys_)),
                 host_span(std::span<std::byte>(evicted_)), counts, {});
    return counts;
  }

 private:
  std::vector<uint64_t> evicted_keys_;
  std::vector<std::byte> evicted_;
};

// batch_size records of version 1 whose element j is j.
std::vector<std::byte> insert_records(const row_layout& layout) {
  std::vector<std::byte> records(batch_size * layout.record_bytes());
  for (size_t i = 0; i < batch_size; ++i) {
    std::byte* rec = records.data() + i * layout.record_bytes();
    meta_of(rec) = row_meta{1, 0, 0};
    for (uint32_t j = 0; j < layout.dim; ++j) weights_of(rec)[j] = float(j);
  }
  return records;
}

// A cpu_cache of 32-slot sets with `slots_per_row` slots per row of keys
// 0..n-1: 2, half full, holding them all (bar a rare set's overflow); 1,
// full: keys n, n+1, ... are inserted after them until every slot holds a
// row (a set's share of n keys varies, so some sets overflow and evict
// while others still have room), or until 4n keys in all.
std::unique_ptr<cpu_cache> build_cache(uint64_t n, const row_layout& layout,
                                       uint64_t slots_per_row = 2) {
  progress("building cpu_cache, dim " + std::to_string(layout.dim) + ", " + std::to_string(n) +
           " rows");
  const uint32_t sets = static_cast<uint32_t>(std::max<uint64_t>(1, n * slots_per_row / 32));
  auto cache = std::make_unique<cpu_cache>(layout, cache_geometry{sets, 1});
  const size_t slots = size_t{sets} * 32;
  row_buffer rows(layout);
  cache_filler filler(layout);
  const uint64_t end = slots_per_row == 1 ? 4 * n : n;
  for (uint64_t base = 0; base < end; base += batch_size) {
    if (base >= n && cache->size() >= slots) break;
    rows.clear();
    for (uint64_t i = base; i < std::min<uint64_t>(end, base + batch_size); ++i) {
      std::byte* rec = rows.append(key_of(i));
      meta_of(rec) = row_meta{1, 0, 0};
      for (uint32_t j = 0; j < layout.value_words(); ++j) weights_of(rec)[j] = initial_value(i, j);
    }
    filler.insert(*cache, rows.keys(),
                  std::span<const std::byte>(rows.record(0), rows.size() * layout.record_bytes()));
  }
  if (slots_per_row == 1 && cache->size() < slots)
    progress("cpu_cache: " + std::to_string(slots - cache->size()) + " of " +
             std::to_string(slots) + " slots still empty after " + std::to_string(end) + " keys");
  return cache;
}

// rows/s of `call` (it returns how many of the batch's keys hit) over
// `batches`; an error if under 99% of the keys were resident.
template <class Call>
double resident_rows_per_second(batch_source& batches, double seconds, Call call) {
  uint64_t hits = 0, asked = 0;
  const double rate = rows_per_second(batches, seconds, [&](const batch_source& b) {
    hits += call(b);
    asked += b.keys().size();
  });
  if (hits < asked * 99 / 100)
    throw std::runtime_error("cache bench: only " + std::to_string(hits) + " of " +
                             std::to_string(asked) + " keys were resident");
  return rate;
}

}  // namespace

void bench_cache_query(uint32_t dim, uint64_t n, double seconds, bench_report& report) {
  const row_layout layout{dim, optimizer_kind::sgd, false};  // the serving layout
  const std::string name = "cache_query_dim" + std::to_string(dim);
  const double raw = raw_gather_rows_per_s(dim, n, seconds, 3);
  auto cache = build_cache(n, layout);
  std::vector<std::byte> versions(batch_size * 8), weights(batch_size * size_t{4} * dim);
  std::vector<uint32_t> misses(batch_size);
  batch_source batches(n, false, 3);
  const double rate = resident_rows_per_second(batches, seconds, [&](const batch_source& b) {
    cache_counts counts;
    cache->query_weights(host_span(std::span<const uint64_t>(b.keys())),
                         host_span(std::span<std::byte>(versions)),
                         host_span(std::span<std::byte>(weights)),
                         host_span(std::span<uint32_t>(misses)), counts, {});
    return counts.hits;
  });
  report.add({name, rate, "rows/s", "raw_gather", raw});
}

// A cache tier's fill of rows it holds an older copy of (a refreshed row, a
// pull that raced a write-back): every key resident, each batch's copy one
// version newer, so every row replaces its slot's. The version is written
// into the batch's 4096 records per call (timed, in cache: small beside the
// inserts' random slots).
void bench_cache_insert(uint32_t dim, uint64_t n, double seconds, bench_report& report) {
  const row_layout layout{dim, optimizer_kind::sgd, false};
  const std::string name = "cache_insert_dim" + std::to_string(dim);
  const double raw = raw_gather_rows_per_s(dim, n, seconds, 5);
  auto cache = build_cache(n, layout);
  std::vector<std::byte> records = insert_records(layout);
  cache_filler filler(layout);
  uint64_t version = 1;
  batch_source batches(n, true, 4);
  const double rate = resident_rows_per_second(batches, seconds, [&](const batch_source& b) {
    ++version;
    for (size_t i = 0; i < b.keys().size(); ++i)
      meta_of(records.data() + i * layout.record_bytes()) = row_meta{version, 0, 0};
    return filler.insert(*cache, b.keys(), records).replaced;
  });
  report.add({name, rate, "rows/s", "raw_gather", raw});
}

// A cache tier's fill of rows it does not hold into a full cache (a
// lookup's misses fetched from the shards; build_cache fills every slot):
// every key new, so each takes its set's least recently used slot (clean
// rows: nothing written back).
void bench_cache_insert_new(uint32_t dim, uint64_t n, double seconds, bench_report& report) {
  const row_layout layout{dim, optimizer_kind::sgd, false};
  const std::string name = "cache_insert_new_dim" + std::to_string(dim);
  const double raw = raw_gather_rows_per_s(dim, n, seconds, 6);
  auto cache = build_cache(n, layout, 1);
  const std::vector<std::byte> records = insert_records(layout);
  cache_filler filler(layout);
  // Keys drawn from 2^40 indices: none of the n built ones, bar chance.
  batch_source batches(uint64_t{1} << 40, true, 7);
  uint64_t stored = 0, asked = 0;
  const double rate = rows_per_second(batches, seconds, [&](const batch_source& b) {
    const cache_counts counts = filler.insert(*cache, b.keys(), records);
    stored += b.keys().size() - counts.skipped - counts.replaced;
    asked += b.keys().size();
  });
  if (stored < asked * 99 / 100)
    throw std::runtime_error("cache bench: only " + std::to_string(stored) + " of " +
                             std::to_string(asked) + " inserted keys were new");
  report.add({name, rate, "rows/s", "raw_gather", raw});
}

// The training path's push into a cache tier: Adagrad on resident rows.
void bench_cache_update(uint32_t dim, uint64_t n, double seconds, bench_report& report) {
  const row_layout layout{dim, optimizer_kind::adagrad, true};
  const optimizer_config adagrad = bench_adagrad();
  const std::vector<float> grads = bench_grads(dim);
  const std::string name = "cache_update_adagrad_dim" + std::to_string(dim);
  const double raw = raw_adagrad_rows_per_s(adagrad, dim, n, seconds, grads);
  auto cache = build_cache(n, layout);
  std::vector<uint32_t> misses(batch_size);
  batch_source batches(n, true, 2);
  const double rate = resident_rows_per_second(batches, seconds, [&](const batch_source& b) {
    cache_counts counts;
    cache->update(host_span(std::span<const uint64_t>(b.keys())),
                  host_span(std::span<const float>(grads.data(), b.keys().size() * dim)), adagrad,
                  host_span(std::span<uint32_t>(misses)), counts, {});
    return counts.hits;
  });
  report.add({name, rate, "rows/s", "raw_adagrad", raw});
}

void run_dram_bench(const tiers_bench_options& options, bench_report& report) {
  const bench_sizes sizes =
      options.small ? bench_sizes{50000, 50000, 0.2} : bench_sizes{10000000, 4000000, 1.5};
  bench_lookup(16, sizes.keys_small_dims, sizes.seconds, report);
  bench_lookup(64, sizes.keys_small_dims, sizes.seconds, report);
  bench_lookup(128, sizes.keys_dim128, sizes.seconds, report);
  bench_push(64, sizes.keys_small_dims, sizes.seconds, report);
  bench_cache_query(64, sizes.keys_small_dims / 5, sizes.seconds, report);
  bench_cache_insert(64, sizes.keys_small_dims / 5, sizes.seconds, report);
  bench_cache_insert_new(64, sizes.keys_small_dims / 5, sizes.seconds, report);
  bench_cache_update(64, sizes.keys_small_dims / 5, sizes.seconds, report);
  bench_bytes_multi(sizes.keys_small_dims, report);
}

}  // namespace strata::bench
