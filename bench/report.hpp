// Benchmark results, side by side with their baselines.
//
// Every figure a `strata bench SUITE` prints is a bench_result: a measured
// value and the same quantity for the named baseline, measured in the same
// run. Printed as an aligned table, or with --json as one JSON object per
// line: {"name","value","unit","baseline","baseline_value","ratio"} where
// ratio = value / baseline_value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace strata::bench {

struct bench_result {
  std::string name;
  double value = 0;
  std::string unit;
  std::string baseline;
  double baseline_value = 0;
  double ratio() const { return baseline_value != 0 ? value / baseline_value : 0; }
};

class bench_report {
 public:
  // Adds a result and, when streaming, prints it at once (long suites show
  // progress as they go).
  void add(bench_result result);
  void set_streaming(std::ostream* out, bool json) {
    stream_ = out;
    json_ = json;
  }
  const std::vector<bench_result>& results() const { return results_; }
  void print_table(std::ostream& out) const;
  void print_json(std::ostream& out) const;
  static std::string to_json(const bench_result& r);

 private:
  std::vector<bench_result> results_;
  std::ostream* stream_ = nullptr;
  bool json_ = false;
};

struct tiers_bench_options {
  bool small = false;              // tiny sizes: a smoke run for tests
  uint64_t lmdb_keys = 1000000;    // --keys
  std::filesystem::path work_dir;  // LMDB files go here (each variant its own)
};

// bench/dram_bench.cpp: dram_lookup_dim{16,64,128}, dram_push_adagrad_dim64,
// dram_bytes_per_key.
void run_dram_bench(const tiers_bench_options& options, bench_report& report);
// bench/lmdb_bench.cpp: lmdb_read, lmdb_write.
void run_lmdb_bench(const tiers_bench_options& options, bench_report& report);

}  // namespace strata::bench
