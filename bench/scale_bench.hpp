// `strata bench scale`: the cost of moving partitions between shards
// (docs/scaling.md), in one process on real LMDB environments.
//
//   scale_migrate_rows_per_s: every partition of a shard holding `rows`
//     rows (Adagrad dim 16: weights + accumulators) moved to a fresh shard
//     -- copy, fence, commit on both, and the destination drained (rows
//     durable) -- against lmdb_write, the destination tier's own write
//     rate measured in the same run (the tier benchmark's loop: lmdb_tier
//     store of 10 000-row batches in random key order), the limit here:
//     in-process there is no transport to pull through.
//   scale_migrate_seconds, scale_migrate_mib: the move's time and row bytes.
//   train_during_scale: training throughput (batches/s, 2 workers, async)
//     while a 2 -> 4 scale copies rows/2 rows, against the same run's
//     throughput just before the scale.
#pragma once

#include <cstdint>
#include <filesystem>

#include "bench/report.hpp"

namespace strata::bench {

struct scale_bench_options {
  uint64_t rows = 10'000'000;      // rows moved (--rows)
  std::filesystem::path work_dir;  // LMDB environments go here
};

void run_scale_bench(const scale_bench_options& options, bench_report& report);

}  // namespace strata::bench
