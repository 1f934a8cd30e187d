// `strata bench e2e`: training examples/s of the whole system on synthetic
// Criteo-layout data, side by side in one run with
//   - pytorch_cpu: the same model, data and batch size in stock PyTorch
//     (bench/torch_baseline.py, Debian's python3-torch): what a user would
//     run instead on one machine;
//   - strata_all_dram: strata with DRAM and caches big enough for every key
//     (no SSD traffic): the cost of the hierarchy.
// Also reports held-out AUC (vs PyTorch and vs the planted model) and the
// cache, DRAM and SSD hit rates of both strata runs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "actors/config.hpp"
#include "bench/report.hpp"

namespace strata::bench {

struct e2e_bench_options {
  // Model, tier sizes, workers, mode: usually deploy/examples/local.yaml.
  // Data paths and windows are replaced by the benchmark's own data.
  actors::cluster_config base;
  uint64_t train_rows = 200000;
  uint64_t heldout_rows = 50000;
  uint64_t distinct_keys = 200000;
  uint32_t threads = 2;                // PyTorch: the better of 1 and this many threads
  std::filesystem::path torch_script;  // bench/torch_baseline.py
  std::string python = "/usr/bin/python3";
  std::filesystem::path work_dir;  // data and LMDB files of both runs
};

void run_e2e_bench(const e2e_bench_options& options, bench_report& report);

}  // namespace strata::bench
