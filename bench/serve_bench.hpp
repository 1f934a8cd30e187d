// `strata bench serve`: serving lookups through the binary protocol on
// loopback (a serving node in this process, a client on its own
// connection), side by side in one run with
//   redis_mget      Redis on loopback (redis-server started by the bench on
//                   a free port, no persistence): one MGET of the same keys,
//                   values the same 64 x f32 rows — the network volatile
//                   store HugeCTR's HPS offered;
//   dram_in_process a DRAM-tier lookup in this process: the limit without
//                   a network;
//   loopback_stream the same reply bytes streamed over a loopback TCP
//                   connection by a bare loop (no framing, lookup or
//                   checksum): the wire's limit here.
// The UCX rows (serve_ucx_*) run over shared memory only (UCX_TLS=sm,self,
// set by the bench).
// For each batch size the three alternate in 5 short rounds (a burst of
// load on a shared machine hits all alike): keys/s is the median round
// (one request in flight), p50/p99 pool every request. Results: serve_keys_per_s_bB (baselines
// redis_mget, dram_in_process, loopback_stream), serve_p50_us_bB /
// serve_p99_us_bB / serve_p999_us_bB (baseline redis), serve_p99_over_p50_bB
// (target 2), serve_pipelined_keys_per_s_bB (the same lookups through
// serving_client::lookup_pipelined, up to 4 in flight; baseline
// loopback_stream), serve_keys_per_s_b1024_clientsN (N clients at once, each
// on its own connection and thread; baselines serve_1_client, one client in
// the same rounds, and redis_mget_same_clients, Redis with N connections),
// serve_misses_keys_per_s_b1024_clientsN (the same on a table whose lookups
// mostly miss the cache and DRAM: bench/serve_clients.hpp).
// Batches draw keys uniformly from the
// loaded rows; every row is cache-resident after the first pass.
#pragma once

#include <filesystem>
#include <vector>

#include "bench/report.hpp"

namespace strata::bench {

struct serve_bench_options {
  bool small = false;      // a smoke run: few keys, few requests
  uint64_t keys = 200000;  // rows loaded (dim 64)
  std::vector<uint32_t> batches = {1, 32, 1024, 16384};
  double seconds_per_case = 1.0;  // measuring time per batch size and system
  std::filesystem::path work_dir;
};

void run_serve_bench(const serve_bench_options& options, bench_report& report);

}  // namespace strata::bench
