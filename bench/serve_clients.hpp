// Pieces of `strata bench serve` shared by its files: the bench's keys,
// batches drawn from them, and several clients looking up at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench/report.hpp"

namespace strata::bench {

// The key of loaded row i (splitmix64: real 64-bit keys).
uint64_t serve_key_of(uint64_t i);

// The bench's table: `rows` keys (serve_key_of(0..rows)) and their rows of
// `dim` weights, the same in every serving node of the bench.
struct serve_rows {
  std::vector<uint64_t> keys;
  std::vector<float> weights;
};
serve_rows make_serve_rows(uint64_t rows, uint32_t dim);

// `count` batches of `batch` keys drawn uniformly from the `rows` loaded
// rows, the same for the same seed.
std::vector<std::vector<uint64_t>> random_batches(uint64_t rows, uint32_t batch, size_t count,
                                                  uint64_t seed);

// Several clients at once: `lookups[0..clients)` each run on their own
// thread (each owns its connection) for about `seconds`, starting together,
// over `batch_count` batches of their own drawn from `rows`; returns the
// keys/s of all of them together. An exception on a client's thread is
// rethrown here.
using lookup_fn = std::function<void(const std::vector<uint64_t>&)>;

// A client on its own connection to the binary server on loopback `port`
// whose lookups of `table` fail (throw) on an error or a short reply.
lookup_fn serving_lookup(uint16_t port, const std::string& table);
double concurrent_keys_per_s(std::vector<lookup_fn>& lookups, size_t clients, uint32_t batch,
                             uint64_t rows, double seconds, size_t batch_count = 16);

// serve_misses_keys_per_s_b1024_clientsN: a table whose cache holds 1/16
// of its `rows` rows (dim 64) and whose DRAM tier holds 1/8, so most keys
// of a lookup are read from LMDB (its pages in the OS cache): a table
// larger than the serving node's memory, with the store's default
// settings. N clients at once against one client in the same `rounds`
// rounds (serve_misses_1_client): what lookups with misses let through
// side by side. Its own serving node on loopback, files under `work_dir`.
void run_serve_misses_bench(uint64_t rows, double seconds, int rounds,
                            const std::vector<size_t>& client_counts,
                            const std::filesystem::path& work_dir, bench_report& report);

}  // namespace strata::bench
