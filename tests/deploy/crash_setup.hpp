// The count-objective cluster of the crash and storage-fault tests (real
// processes), and reading what a launcher printed.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>

#include "deploy/manifest.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {

struct crash_setup {
  testing::temp_dir dir;
  fs::path manifest;
  fs::path checkpoints;
};

// A count-objective cluster: 2 shards with small DRAM (rows cycle through
// LMDB), 2 workers, a checkpoint every `interval` batches per worker. The
// shards' LMDB lives under `ssd_path` (default: "state" in the test's
// directory).
inline std::unique_ptr<crash_setup> make_setup(const std::string& on_failure, uint64_t rows,
                                               uint64_t interval, fs::path ssd_path = {}) {
  auto s = std::make_unique<crash_setup>();
  const fs::path d = s->dir.path();
  s->manifest = d / "crash.yaml";
  s->checkpoints = d / "ckpt";
  if (ssd_path.empty()) ssd_path = d / "state";
  std::ofstream m(s->manifest);
  m << "name: crash\nmode: async\npartitions: 64\nthreads: 2\n"
    << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 2\n  dram_bytes: 128KiB\n  ssd_path: " << ssd_path.string()
    << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
    << "caches:\n  count: 1\n  sets: 8\n"
    << "workers:\n  count: 2\n  batch_size: 16\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: " << rows << "\n    distinct_keys: 20000\n    seed: 9\n"
    << "checkpoint:\n  dir: " << s->checkpoints.string() << "\n  interval_batches: " << interval
    << "\n  keep: 1000\n  on_failure: " << on_failure << "\n  max_restarts: 2\n";
  return s;
}

// The pid of node `node` as the launcher printed it.
inline std::optional<pid_t> node_pid(strata_process& launcher, const std::string& node = "crash") {
  std::smatch m;
  const std::string out = launcher.out();
  const std::regex re("\\(node " + node + ", pid ([0-9]+)\\)");
  if (!std::regex_search(out, m, re)) return std::nullopt;
  return static_cast<pid_t>(std::stoi(m[1]));
}

inline std::string resumed_from(const std::string& out) {
  std::smatch m;
  static const std::regex re("resumed from checkpoint ([^:]+):");
  if (!std::regex_search(out, m, re)) return {};
  return m[1];
}

inline uint64_t total_batches(const fs::path& manifest) {
  auto m = deploy::load_manifest(manifest);
  auto split = deploy::resolve_data_split(*m);
  uint64_t total = 0;
  for (const auto& w : m->cluster.workers)
    total += (w.data.limit + w.batch_size - 1) / w.batch_size;
  return total;
}

}  // namespace strata
