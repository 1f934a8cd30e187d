// `strata bench gpu`: CUDA cache throughput against the device's own
// cudaMemcpy device-to-device bandwidth (measured in the same run) and
// HugeCTR's published floor for its cache test (500 GiB/s effective at
// 65536 keys, dim 128). Without a usable device it prints why and adds
// nothing. Built with gpu/ only; the CLI links it when STRATA_CUDA_ENABLED.
#pragma once

#include <iosfwd>

#include "bench/report.hpp"

namespace strata::bench {

struct gpu_bench_options {
  bool small = false;  // smoke sizes
  int batches = 64;    // batches per measured shape
};

// Results: gpu_query_<keys>_hit<pct>_gbps (baseline cudaMemcpy_d2d, and
// for 65536 keys also hugectr_floor), gpu_query_..._keys_per_s,
// gpu_update_adagrad_<keys>_keys_per_s. Returns false when skipped.
bool run_gpu_bench(const gpu_bench_options& options, bench_report& report, std::ostream& log);

}  // namespace strata::bench
