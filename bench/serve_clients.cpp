#include "bench/serve_clients.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "client/client.hpp"
#include "serving/binary_server.hpp"
#include "serving/service.hpp"
#include "tiers/cpu_cache.hpp"
#include "tiers/dram_tier.hpp"

namespace strata::bench {

using bench_clock = std::chrono::steady_clock;

uint64_t serve_key_of(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

serve_rows make_serve_rows(uint64_t rows, uint32_t dim) {
  serve_rows out{std::vector<uint64_t>(rows), std::vector<float>(rows * dim)};
  for (uint64_t i = 0; i < rows; ++i) {
    out.keys[i] = serve_key_of(i);
    for (uint32_t d = 0; d < dim; ++d)
      out.weights[i * dim + d] = float(i % 1000) * 0.001f + float(d);
  }
  return out;
}

lookup_fn serving_lookup(uint16_t port, const std::string& table) {
  auto conn = client::serving_client::connect({{{"127.0.0.1", port}}});
  if (!conn) throw std::runtime_error(conn.err().to_string());
  auto shared = std::make_shared<client::serving_client>(std::move(*conn));
  return [shared, table, got = client::rows()](const std::vector<uint64_t>& k) mutable {
    auto ok = shared->lookup_into(table, k, got);
    if (!ok) throw std::runtime_error(ok.err().to_string());
    if (got.versions.size() != k.size()) throw std::runtime_error("serving returned a short reply");
  };
}

std::vector<std::vector<uint64_t>> random_batches(uint64_t rows, uint32_t batch, size_t count,
                                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint64_t>> batches(count, std::vector<uint64_t>(batch));
  for (auto& b : batches)
    for (auto& k : b) k = serve_key_of(rng() % rows);
  return batches;
}

double concurrent_keys_per_s(std::vector<lookup_fn>& lookups, size_t clients, uint32_t batch,
                             uint64_t rows, double seconds, size_t batch_count) {
  std::atomic<uint64_t> keys{0};
  std::atomic<size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::exception_ptr> errors(clients);
  std::vector<std::thread> threads;
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        const auto batches = random_batches(rows, batch, batch_count, uint64_t(batch) * 131 + c);
        lookups[c](batches[0]);  // a warm connection
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        const auto t0 = bench_clock::now();
        uint64_t mine = 0;
        for (size_t i = 0; std::chrono::duration<double>(bench_clock::now() - t0).count() < seconds;
             ++i) {
          lookups[c](batches[i % batches.size()]);
          mine += batch;
        }
        keys.fetch_add(mine);
      } catch (...) {
        errors[c] = std::current_exception();
        ready.fetch_add(1);
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const auto start = bench_clock::now();
  go.store(true);
  for (auto& t : threads) t.join();
  const double took = std::chrono::duration<double>(bench_clock::now() - start).count();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return double(keys.load()) / took;
}

void run_serve_misses_bench(uint64_t rows, double seconds, int rounds,
                            const std::vector<size_t>& client_counts,
                            const std::filesystem::path& work_dir, bench_report& report) {
  constexpr uint32_t dim = 64;
  constexpr uint32_t batch = 1024;
  const auto [keys, weights] = make_serve_rows(rows, dim);
  serving::serving_store_config sc;
  sc.table = "bench_misses";
  sc.dim = dim;
  sc.partitions = 4096;
  sc.lmdb_path = work_dir / "serve-misses-lmdb";
  const row_layout layout{dim, optimizer_kind::sgd, false};
  sc.dram_bytes = dram_tier::budget_for_rows(layout, eviction_policy::lru, rows / 8);
  const uint32_t sets = uint32_t(std::max<uint64_t>(64, rows / 16 / 32));
  auto store = serving::serving_store::open(
      sc, std::make_unique<cpu_cache>(layout, cache_geometry{sets, 1}));
  if (!store) throw std::runtime_error(store.err().to_string());
  if (auto ok = (*store)->apply_updates(keys, weights, std::vector<uint64_t>(rows, 1)); !ok)
    throw std::runtime_error(ok.err().to_string());
  serving::serving_service service({1u << 20});
  service.add_table(std::move(*store));
  serving::binary_server server(service);
  if (auto ok = server.start("127.0.0.1", 0); !ok) throw std::runtime_error(ok.err().to_string());
  std::vector<lookup_fn> clients;
  const size_t most = *std::max_element(client_counts.begin(), client_counts.end());
  for (size_t c = 0; c < most; ++c)
    clients.push_back(serving_lookup(server.port(), "bench_misses"));
  // 256 batches per client (262 144 keys, more than the table's rows): the
  // cache cannot learn a client's batches.
  constexpr size_t batch_count = 256;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const uint64_t lmdb_before = service.stats().at("bench_misses").lmdb_hits;
  const uint64_t keys_before = service.stats().at("bench_misses").keys;
  for (size_t n : client_counts) {
    std::vector<double> one, many;
    for (int round = 0; round < rounds; ++round) {
      one.push_back(concurrent_keys_per_s(clients, 1, batch, rows, seconds / rounds, batch_count));
      many.push_back(concurrent_keys_per_s(clients, n, batch, rows, seconds / rounds, batch_count));
    }
    report.add({"serve_misses_keys_per_s_b1024_clients" + std::to_string(n), median(many), "keys/s",
                "serve_misses_1_client", median(one)});
  }
  const auto stats = service.stats().at("bench_misses");
  const uint64_t looked_up = stats.keys - keys_before;
  report.add({"serve_misses_lmdb_share",
              looked_up ? double(stats.lmdb_hits - lmdb_before) / double(looked_up) : 0.0,
              "of keys", "", 0});
  server.stop();
}

}  // namespace strata::bench
