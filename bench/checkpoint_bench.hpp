// `strata bench checkpoint`: what a checkpoint and a restore cost, side by
// side with the limit, a plain `cp` of the same LMDB file (+ `sync` of the
// copy, as a checkpoint syncs), and what taking checkpoints costs training.
//
//   checkpoint_rows_per_s / checkpoint_mb_per_s: one shard's environment of
//     `rows` rows (dim 16, Adagrad: 160-byte encoded rows) checkpointed as
//     the shard does it: sync, compacted copy (mdb_env_copy2), shard state,
//     fsync of the directory, FILES (CRC32C of every file). Baseline: cp.
//   restore_rows_per_s / restore_mb_per_s: restore_checkpoint of that
//     checkpoint into a fresh shard (verify every file and row, range scan
//     per partition, rows rewritten with the new incarnation, LMDB synced).
//     Baseline: cp of the checkpoint's data.mdb.
//   train_examples_per_s_checkpointing: training examples/s of the manifest's
//     cluster on generated data with a checkpoint every `interval` batches
//     per worker, against the same run with no checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>

#include "actors/config.hpp"
#include "bench/report.hpp"

namespace strata::bench {

struct checkpoint_bench_options {
  uint64_t rows = 10000000;     // rows in the checkpointed environment
  actors::cluster_config base;  // training part: usually deploy/examples/local.yaml
  uint64_t train_rows = 200000;
  uint64_t distinct_keys = 200000;
  uint64_t interval_batches = 50;
  std::filesystem::path work_dir;
};

void run_checkpoint_bench(const checkpoint_bench_options& options, bench_report& report);

}  // namespace strata::bench
