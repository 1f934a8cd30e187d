#include <filesystem>
#include <iostream>
#include <system_error>
#include <unistd.h>

#include "bench/report.hpp"
#include "deploy/commands.hpp"

namespace strata::cli {

void add_bench_command(CLI::App& app, int& exit_code) {
  struct options {
    std::string suite;
    bool json = false;
    bool small = false;
    uint64_t keys = 1000000;
    std::string dir;
  };
  auto opts = std::make_shared<options>();
  auto* cmd = app.add_subcommand("bench", "benchmarks, side by side with their baselines");
  cmd->add_option("suite", opts->suite, "suite to run: tiers")->required()->check(
      CLI::IsMember({"tiers"}));
  cmd->add_flag("--json", opts->json, "one JSON object per result line");
  cmd->add_flag("--small", opts->small, "tiny sizes (a smoke run)");
  cmd->add_option("--keys", opts->keys, "LMDB keys (default 1000000; 10000000 for the full size)");
  cmd->add_option("--dir", opts->dir, "directory for benchmark files (default: a temp dir)");
  cmd->callback([opts, &exit_code] {
    bench::tiers_bench_options o;
    o.small = opts->small;
    o.lmdb_keys = opts->small ? 20000 : opts->keys;
    bool own_dir = opts->dir.empty();
    o.work_dir = own_dir ? std::filesystem::temp_directory_path() /
                               ("strata-bench-" + std::to_string(::getpid()))
                         : std::filesystem::path(opts->dir);
    std::filesystem::create_directories(o.work_dir);
    bench::bench_report report;
    report.set_streaming(&std::cout, opts->json);
    try {
      bench::run_dram_bench(o, report);
      bench::run_lmdb_bench(o, report);
    } catch (const std::exception& e) {
      std::cerr << "strata bench: " << e.what() << '\n';
      exit_code = 1;
    }
    if (own_dir) {
      std::error_code ec;
      std::filesystem::remove_all(o.work_dir, ec);
    }
  });
}

}  // namespace strata::cli
