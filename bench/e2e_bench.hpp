// `strata bench e2e`: training examples/s of the whole system on synthetic
// Criteo-layout data, side by side in one run with
//   - pytorch_cpu: the same model, data and batch size in stock PyTorch
//     (bench/torch_baseline.py, Debian's python3-torch), the better of 1
//     and `threads` threads: what a user would run instead on one machine;
//   - strata_all_dram: strata with DRAM and caches big enough for every key
//     (no SSD traffic): the cost of the hierarchy.
// Also reports held-out AUC (vs PyTorch and vs the planted model), the
// cache, DRAM and SSD hit rates and allocations per trained batch.
//
// Without --manifest, two configurations fixed here (not read from
// deploy/examples/local.yaml, so a change to the demo never moves the
// benchmark), each in async and in pass mode (rows with a `_pass` suffix):
//   - demo (rows e2e_*): dim 8, MLP 64-32, batch 128, 2 shards of 2 MiB
//     DRAM and 2 caches of 8192 rows: rows cycle through LMDB;
//   - wide (rows e2e_wide_*): dim 16, MLP 256-128, batch 1024, 8 MiB DRAM
//     per shard, caches of 131072 rows (a few batches of keys).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "actors/config.hpp"
#include "bench/report.hpp"

namespace strata::bench {

// One configuration to measure: rows are named e2e_<name>_<figure><suffix>
// (e2e_<figure><suffix> for an empty name).
struct e2e_config {
  std::string name;    // "" (demo) or "wide"
  std::string suffix;  // "" (async) or "_pass"
  // Model, tier sizes, workers, mode. Data paths and windows are replaced
  // by the benchmark's own data.
  actors::cluster_config base;
};

// The manifest (YAML, docs/manifest.md) of a fixed configuration: `config`
// "demo" or "wide", `mode` "async" or "pass". The caller parses it
// (deploy::parse_manifest; the bench library does not link the parser).
std::string e2e_manifest(std::string_view config, std::string_view mode);

struct e2e_bench_options {
  std::vector<e2e_config> configs;
  uint64_t train_rows = 200000;
  uint64_t heldout_rows = 50000;
  uint64_t distinct_keys = 200000;
  uint32_t threads = 2;                // PyTorch: the better of 1 and this many threads
  bool allocs_per_batch = true;        // the e2e_allocs_per_batch row (one more short run)
  std::filesystem::path torch_script;  // bench/torch_baseline.py
  std::string python = "/usr/bin/python3";
  std::filesystem::path work_dir;  // data and LMDB files of every run
};

void run_e2e_bench(const e2e_bench_options& options, bench_report& report);

}  // namespace strata::bench
