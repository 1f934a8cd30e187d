#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "bench/checkpoint_bench.hpp"
#include "bench/e2e_bench.hpp"
#include "bench/report.hpp"
#include "bench/scale_bench.hpp"
#include "bench/scale_nodes_bench.hpp"
#include "bench/serve_bench.hpp"
#include "bench/transport_bench.hpp"
#include "deploy/commands.hpp"
#include "deploy/manifest.hpp"
#if STRATA_WITH_GPU_BENCH
#include "gpu/gpu_bench.hpp"  // built only with CUDA (gpu/CMakeLists.txt)
#endif

namespace strata::cli {

void add_bench_command(CLI::App& app, int& exit_code) {
  struct options {
    std::string suite;
    bool json = false;
    std::string json_out;
    bool small = false;
    uint64_t keys = 1000000;
    std::string dir;
    std::string manifest = "deploy/examples/local.yaml";
    uint64_t rows = 200000;
    uint64_t checkpoint_rows = 10000000;
    std::string torch_script = STRATA_SOURCE_DIR "/bench/torch_baseline.py";
    uint32_t nodes = 1;                  // scale: node processes (1: in one process)
    uint64_t migration_rows_per_s = 0;   // scale --nodes 3: the copy rate limit
    uint32_t warmup_seconds = 5;         // scale --nodes 3: training before the measured part
    std::string transport_peer;  // internal: this process is the transport bench's peer
  };
  auto opts = std::make_shared<options>();
  auto* cmd = app.add_subcommand("bench", "benchmarks, side by side with their baselines");
  cmd->add_option("suite", opts->suite,
                  "suite to run: tiers, e2e, gpu, checkpoint, transport, serve, scale")
      ->required()
      ->check(CLI::IsMember({"tiers", "e2e", "gpu", "checkpoint", "transport", "serve", "scale"}));
  cmd->add_flag("--json", opts->json, "one JSON object per result line");
  cmd->add_option("--json-out", opts->json_out,
                  "also write the results as JSON lines to this file (for bench/plot.sh)");
  cmd->add_flag("--small", opts->small, "tiny sizes (a smoke run)");
  cmd->add_option("--keys", opts->keys,
                  "tiers: LMDB keys (default 1000000; 10000000 for the full size); "
                  "e2e: distinct keys of the generated data (default 200000); "
                  "serve: rows served (default 200000)");
  cmd->add_option("--rows", opts->rows,
                  "e2e: training rows (default 200000; 50000 held out); checkpoint: rows in the "
                  "checkpointed LMDB environment (default 10000000); scale: rows moved (default "
                  "10000000)");
  cmd->add_option("--nodes", opts->nodes,
                  "scale: 1 (default: in one process) or 3 (strata node processes over UCX "
                  "loopback; --rows is then the generated data's distinct keys, default 200000)");
  cmd->add_option("--migration-rows-per-s", opts->migration_rows_per_s,
                  "scale --nodes 3: the cluster's shards.migration_rows_per_s (default 0: "
                  "unlimited)");
  cmd->add_option("--warmup-seconds", opts->warmup_seconds,
                  "scale --nodes 3: seconds of training before the measured part (default 5); "
                  "longer stores more keys, so the scale moves more rows")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--manifest", opts->manifest,
                  "e2e: one configuration's model, tiers and workers (default: the bench's "
                  "fixed demo and wide configurations); checkpoint: the cluster (default "
                  "deploy/examples/local.yaml)");
  cmd->add_option("--torch-script", opts->torch_script, "e2e: the PyTorch baseline script");
  cmd->add_option("--transport-peer", opts->transport_peer,
                  "transport: internal, run as the benchmark's peer process (shm or tcp)")
      ->group("");
  cmd->add_option("--dir", opts->dir, "directory for benchmark files (default: a temp dir)");
  cmd->callback([opts, cmd, &exit_code] {
    if (opts->suite == "transport" && !opts->transport_peer.empty()) {
      exit_code = bench::run_transport_bench_peer(opts->transport_peer, opts->dir);
      return;
    }
    const bool own_dir = opts->dir.empty();
    const std::filesystem::path work_dir = own_dir
                                               ? std::filesystem::temp_directory_path() /
                                                     ("strata-bench-" + std::to_string(::getpid()))
                                               : std::filesystem::path(opts->dir);
    std::filesystem::create_directories(work_dir);
    bench::bench_report report;
    report.set_streaming(&std::cout, opts->json);
    try {
      if (opts->suite == "tiers") {
        bench::tiers_bench_options o;
        o.small = opts->small;
        o.lmdb_keys = opts->small ? 20000 : opts->keys;
        o.work_dir = work_dir;
        bench::run_dram_bench(o, report);
        bench::run_lmdb_bench(o, report);
      } else if (opts->suite == "checkpoint") {
        auto m = deploy::load_manifest(opts->manifest);
        if (!m) throw std::runtime_error(m.err().to_string());
        bench::checkpoint_bench_options o;
        o.base = m->cluster;
        o.rows = cmd->count("--rows") ? opts->rows : (opts->small ? 20000 : 10000000);
        o.train_rows = opts->small ? 20000 : 200000;
        o.distinct_keys = opts->small ? 20000 : 200000;
        o.work_dir = work_dir;
        bench::run_checkpoint_bench(o, report);
      } else if (opts->suite == "transport") {
        bench::transport_bench_options o;
        o.small = opts->small;
        o.self_binary = std::filesystem::read_symlink("/proc/self/exe").string();
        o.work_dir = work_dir;
        bench::run_transport_bench(o, report);
      } else if (opts->suite == "serve") {
        bench::serve_bench_options o;
        o.small = opts->small;
        if (cmd->count("--keys")) o.keys = opts->keys;
        o.work_dir = work_dir;
        bench::run_serve_bench(o, report);
      } else if (opts->suite == "scale" && opts->nodes != 1) {
        bench::scale_nodes_bench_options o;
        o.nodes = opts->nodes;
        o.keys = cmd->count("--rows") ? opts->rows : (opts->small ? 20000 : 200000);
        o.migration_rows_per_s = opts->migration_rows_per_s;
        o.warmup = std::chrono::seconds(opts->warmup_seconds);
        o.self_binary = std::filesystem::read_symlink("/proc/self/exe").string();
        o.work_dir = work_dir;
        bench::run_scale_nodes_bench(o, report);
      } else if (opts->suite == "scale") {
        bench::scale_bench_options o;
        o.rows = cmd->count("--rows") ? opts->rows : (opts->small ? 20000 : 10'000'000);
        o.work_dir = work_dir;
        bench::run_scale_bench(o, report);
      } else if (opts->suite == "gpu") {
#if STRATA_WITH_GPU_BENCH
        bench::gpu_bench_options o;
        o.small = opts->small;
        bench::run_gpu_bench(o, report, std::cerr);
#else
        std::cerr << "strata bench gpu: skipped: built without CUDA (nvcc not found)\n";
#endif
      } else {
        bench::e2e_bench_options o;
        if (cmd->count("--manifest")) {  // one configuration, the manifest's
          auto m = deploy::load_manifest(opts->manifest);
          if (!m) throw std::runtime_error(m.err().to_string());
          o.configs.push_back({"", "", m->cluster});
        } else {  // the two fixed ones, in each mode (bench/e2e_bench.hpp)
          for (const char* config : {"demo", "wide"})
            for (const char* mode : {"async", "pass"}) {
              auto m = deploy::parse_manifest(bench::e2e_manifest(config, mode),
                                              std::string("bench e2e ") + config + " " + mode);
              if (!m) throw std::runtime_error(m.err().to_string());
              o.configs.push_back({config == std::string("wide") ? "wide" : "",
                                   mode == std::string("pass") ? "_pass" : "", m->cluster});
            }
        }
        o.train_rows = opts->small ? 20000 : opts->rows;
        o.heldout_rows = o.train_rows / 4;
        o.distinct_keys = cmd->count("--keys") ? opts->keys : (opts->small ? 20000 : 200000);
        o.torch_script = opts->torch_script;
        o.work_dir = work_dir;
        bench::run_e2e_bench(o, report);
      }
    } catch (const std::exception& e) {
      std::cerr << "strata bench: " << e.what() << '\n';
      exit_code = 1;
    }
    if (!opts->json_out.empty()) {
      std::ofstream out(opts->json_out, std::ios::app);
      report.print_json(out);
      if (!out) {
        std::cerr << "strata bench: cannot write " << opts->json_out << '\n';
        exit_code = 1;
      }
    }
    if (own_dir) {
      std::error_code ec;
      std::filesystem::remove_all(work_dir, ec);
    }
  });
}

}  // namespace strata::cli
