// `strata bench transport`: pull and push of 4096 keys x dim 64 and 128
// between two node processes, `in_flight` requests outstanding, through the
// UCX transport's shard proxy to a real shard in the peer process; side by
// side with (a) `ucx_perftest` ucp_am_bw at the pull reply's size on the same
// connection type, run as subprocesses in the same run, and (b) the same
// exchange through CAF's io::middleman remote actors (baseline caf_io).
// Connection types: same-host shared memory (worker-address path) and
// loopback TCP (UCX_TLS=tcp, listener path).
#pragma once

#include <filesystem>
#include <string>

#include "bench/report.hpp"

namespace strata::bench {

struct transport_bench_options {
  bool small = false;              // few iterations (a smoke run)
  uint32_t in_flight = 8;          // requests outstanding
  std::string self_binary;         // the strata binary, started as the peer
  std::filesystem::path work_dir;  // the peer's LMDB files
};

// Rows: transport_{pull,push}_dim{64,128}_{shm,tcp} in GB/s against
// ucx_perftest, the same against caf_io, and rows/s.
void run_transport_bench(const transport_bench_options& options, bench_report& report);

// The transport alone at a row width: one-way frames of `rows_per_frame`
// records of `record_bytes` through a bridge to a peer process on
// loopback TCP (the listener path); rows/s. The ceiling a cross-node
// migration's migrate_in batches stream against (bench/scale_nodes_bench).
double transport_frame_rows_per_s(const std::string& self_binary,
                                  const std::filesystem::path& work_dir, size_t record_bytes,
                                  size_t rows_per_frame, uint32_t iterations);

// The peer process (`strata bench transport --transport-peer shm|tcp`):
// serves shards of dim 64 and 128 over UCX and CAF io, prints its ports,
// runs until stdin closes. Returns the exit code.
int run_transport_bench_peer(const std::string& mode, const std::filesystem::path& work_dir);

}  // namespace strata::bench
