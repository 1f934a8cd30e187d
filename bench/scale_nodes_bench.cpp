#include "bench/scale_nodes_bench.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "bench/transport_bench.hpp"
#include "common/child_process.hpp"
#include "tiers/row.hpp"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
constexpr uint32_t partitions = 256;
constexpr uint32_t dim = 16;

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("scale bench: no free loopback port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

void progress(const std::string& line) { std::cerr << "bench scale --nodes 3: " << line << std::endl; }

// Three nodes, adagrad dim 16, shards spilling to LMDB (small DRAM), CTR
// objective on generated data; epochs enough that the bench stops the run.
fs::path write_manifest(const scale_nodes_bench_options& o) {
  const fs::path d = o.work_dir / "nodes3";
  fs::create_directories(d);
  const fs::path file = d / "scale-nodes3.yaml";
  std::ofstream m(file);
  m << "name: bench-scale-nodes3\nmode: async\npartitions: " << partitions << "\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "bench.secret").string()
    << "\n  create_if_missing: true\nnodes:\n";
  for (int i = 0; i < 3; ++i)
    m << "  - name: n" << i << "\n    host: 127.0.0.1\n    transport_port: " << free_port()
      << "\n    ssd_path: " << (d / ("ssd-n" + std::to_string(i))).string() << "\n";
  m << "table:\n  name: ctr\n  seed: 7\n"
    << "  optimizer: {kind: adagrad, learning_rate: 0.1, initial_accumulator: 0.1}\n"
    << "  initializer: {kind: normal, stddev: 0.01}\n"
    << "model:\n  embedding_dim: " << dim << "\n  hidden: [32]\n  seed: 1\n"
    << "shards:\n  count: 3\n  dram_bytes: 1MiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 4GiB\n  flush_batch_rows: 1024\n";
  if (o.migration_rows_per_s != 0) m << "  migration_rows_per_s: " << o.migration_rows_per_s << "\n";
  m << "caches:\n  count: 3\n  sets: 256\n  staleness: 8\n"
    << "workers:\n  count: 3\n  batch_size: 256\n  epochs: 1000\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: " << std::max<uint64_t>(o.keys, 100000)
    << "\n    distinct_keys: " << o.keys << "\n    seed: 5\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 2\n  at_stop: false\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 30000\n"
    << "  join_timeout_seconds: 300\n"
    << "admin:\n  port: " << free_port() << "\n  token_file: " << (d / "bench.token").string()
    << "\n  create_if_missing: true\n";
  return file;
}

struct cli_result {
  int rc = -1;
  std::string out;
};

cli_result cli(const scale_nodes_bench_options& o, std::vector<std::string> args) {
  child_process p(o.self_binary, args);
  auto rc = p.wait_exit(600s);
  return {rc ? *rc : -1, p.output()};
}

uint64_t examples(const scale_nodes_bench_options& o, const std::string& manifest) {
  auto r = cli(o, {"status", "--manifest", manifest, "--json"});
  if (r.rc != 0) return 0;
  auto st = nlohmann::json::parse(r.out, nullptr, false);
  if (st.is_discarded() || st["state"] != "training") return 0;
  return st["training"].value("examples", uint64_t{0});
}

}  // namespace

void run_scale_nodes_bench(const scale_nodes_bench_options& o, bench_report& report) {
  if (o.nodes != 3)
    throw std::runtime_error("bench scale: --nodes " + std::to_string(o.nodes) +
                             ": only 3 is built (a 3 -> 5 scale onto n1 and n2)");
  const size_t record_bytes = row_layout{dim, optimizer_kind::adagrad, true}.record_bytes();
  // A migrate_in batch is one partition's rows; the transport alone at that size.
  const size_t batch_rows = std::max<uint64_t>(o.keys / partitions, 64);
  progress("the transport alone: frames of " + std::to_string(batch_rows) + " rows x " +
           std::to_string(record_bytes) + " bytes over loopback TCP");
  const double transport_rows =
      transport_frame_rows_per_s(o.self_binary, o.work_dir, record_bytes, batch_rows, 200);

  const auto manifest = write_manifest(o).string();
  progress("generating data and starting 3 nodes (" + manifest + ")");
  const fs::path d = o.work_dir / "nodes3";
  child_process cluster(o.self_binary, {"launch", manifest},
                        {}, child_output{d / "launch.out", d / "launch.err"});
  const auto deadline = clock_type::now() + 600s;
  while (examples(o, manifest) == 0) {
    if (!cluster.running() || clock_type::now() > deadline)
      throw std::runtime_error("bench scale --nodes 3: the cluster did not start training:\n" +
                               cluster.output() + cluster.err());
    std::this_thread::sleep_for(200ms);
  }
  // Warm up so that keys have rows (the scale has rows to move).
  progress("training; warming up for " + std::to_string(o.warmup.count()) + " s");
  std::this_thread::sleep_for(o.warmup);
  progress("measuring training before the scale");
  auto t0 = clock_type::now();
  uint64_t e0 = examples(o, manifest);
  std::this_thread::sleep_for(5s);
  uint64_t e1 = examples(o, manifest);
  const double before =
      static_cast<double>(e1 - e0) / std::chrono::duration<double>(clock_type::now() - t0).count();
  progress("scaling 3 -> 5 (shards 3 and 4 on n1 and n2)");
  t0 = clock_type::now();
  e0 = examples(o, manifest);
  auto scaled = cli(o, {"scale", "--manifest", manifest, "--shards", "5", "--placement", "n0",
                        "n1", "n2", "n1", "n2"});
  e1 = examples(o, manifest);
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (scaled.rc != 0)
    throw std::runtime_error("bench scale --nodes 3: the scale failed: " + scaled.out +
                             cluster.err());
  auto r = nlohmann::json::parse(scaled.out, nullptr, false);
  if (r.is_discarded()) throw std::runtime_error("bench scale --nodes 3: scale said " + scaled.out);
  const uint64_t moved = r.value("copied_rows", uint64_t{0}) + r.value("delta_rows", uint64_t{0});
  const double during = static_cast<double>(e1 - e0) / seconds;
  progress("stopping the cluster");
  cli(o, {"stop", "--manifest", manifest});
  if (!cluster.wait_exit(300s)) cluster.signal(SIGKILL);
  const std::string tag = o.migration_rows_per_s ? "_limited" : "";
  report.add({"scale_migrate_rows_per_s_nodes3" + tag, static_cast<double>(moved) / seconds,
              "rows/s", "transport_frames_rows", transport_rows});
  report.add({"train_during_scale_nodes3" + tag, during, "examples/s", "train_before_scale",
              before});
  report.add({"train_scale_moved_rows_nodes3" + tag, static_cast<double>(moved), "rows", "", 0});
  report.add({"train_scale_seconds_nodes3" + tag, seconds, "s", "", 0});
}

}  // namespace strata::bench
