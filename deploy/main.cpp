// `strata`: one binary, one subcommand per verb (docs/architecture.md,
// Deployment).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "common/io_env.hpp"
#include "deploy/commands.hpp"
#include "deploy/version.hpp"

int main(int argc, char** argv) {
  // Frames, pull replies and flush batches are buffers of a few MiB,
  // allocated and freed at a high rate. glibc's defaults return them to the
  // kernel (mmap per buffer, heap trimming), so every new one page-faults
  // its pages back in: measured as the largest cost of a transport frame
  // after the copy itself. Keep them in the heap (docs/transport.md).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // A node restarted on its fixed transport port must not wait a minute for
  // the previous run's connections to leave TIME_WAIT: UCX's TCP connection
  // manager reuses the address. Set before any thread starts (setenv is not
  // safe beside readers), and only if the user chose nothing.
  ::setenv("UCX_TCP_CM_REUSEADDR", "y", /*overwrite=*/0);
  // Fault injection (common/io_env.hpp): tests fail storage operations of a
  // real process; a malformed value stops here, before anything runs.
  if (auto s = strata::install_io_env_from_environment(); !s) {
    std::fprintf(stderr, "strata: %s\n", s.err().to_string().c_str());
    return 2;
  }
  CLI::App app{
      "strata: a hierarchical (HBM -> DRAM -> SSD) parameter server for sparse embeddings"};
  app.require_subcommand(1);
  int exit_code = 0;

  auto* version = app.add_subcommand("version", "print version, git revision and CUDA on/off");
  version->callback([] {
    std::printf("strata %s (git %s, CUDA %s)\n", STRATA_VERSION, STRATA_GIT_REVISION,
                STRATA_CUDA_ENABLED ? "on" : "off");
  });
  strata::cli::add_launch_command(app, exit_code);
  strata::cli::add_node_command(app, exit_code);
  strata::cli::add_validate_command(app, exit_code);
  strata::cli::add_datagen_command(app, exit_code);
  strata::cli::add_bench_command(app, exit_code);
  strata::cli::add_checkpoint_command(app, exit_code);
  strata::cli::add_serve_command(app, exit_code);
  strata::cli::add_key_commands(app, exit_code);
  strata::cli::add_admin_commands(app, exit_code);
  strata::cli::add_render_command(app, exit_code);
  strata::cli::add_plan_command(app, exit_code);

  // An allocation that fails on the command's own thread (a start the
  // memory check did not foresee) is a named error, not an abort.
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::bad_alloc&) {
    const auto chosen = app.get_subcommands();
    std::fflush(stdout);
    std::fprintf(stderr,
                 "strata %s: out of memory (an allocation failed while it ran; lower the "
                 "manifest's memory sizes: model.hidden, shards.dram_bytes, caches.sets)\n",
                 chosen.empty() ? "" : chosen.front()->get_name().c_str());
    return 1;
  }
  return exit_code;
}
