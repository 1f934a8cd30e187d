// `strata bench scale --nodes 3`: scaling a cluster of several nodes at run
// time (docs/scaling.md, docs/multi-node.md), with real `strata node`
// processes over UCX on loopback (started by `strata launch`, reaped).
//
//   scale_migrate_rows_per_s_nodes3: rows a 3 -> 5 scale moved (copy and
//     fence; shards 3 and 4 placed on n1 and n2, so rows stream between
//     processes as migrate_in batches) per second of the scale request,
//     against transport_frames_rows: the transport alone, in the same run,
//     one-way frames of one migrate_in batch's size (a partition's rows at
//     the table's record width) over loopback TCP.
//   train_during_scale_nodes3: examples/s of the cluster (3 workers, async)
//     while the scale runs, against the same run just before the scale.
//   train_scale_moved_rows_nodes3, train_scale_seconds_nodes3.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "bench/report.hpp"

namespace strata::bench {

struct scale_nodes_bench_options {
  uint32_t nodes = 3;                 // only 3 is built (3 -> 5 shards)
  uint64_t keys = 200000;             // distinct keys of the generated data (--rows)
  uint64_t migration_rows_per_s = 0;  // shards.migration_rows_per_s (0: unlimited)
  // Training before the measured part: longer stores more keys, so the
  // scale moves more rows (--warmup-seconds).
  std::chrono::seconds warmup{5};
  std::string self_binary;            // the strata binary
  std::filesystem::path work_dir;     // manifest, data, LMDB environments
};

void run_scale_nodes_bench(const scale_nodes_bench_options& options, bench_report& report);

}  // namespace strata::bench
