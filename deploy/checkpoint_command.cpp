// `strata checkpoint verify DIR [--manifest M]` and `strata checkpoint
// create --admin HOST:PORT` (admin_command.cpp).
#include <cstdio>
#include <string>

#include "actors/checkpoint.hpp"
#include "deploy/commands.hpp"
#include "deploy/manifest.hpp"

namespace strata::cli {

void add_checkpoint_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("checkpoint", "checkpoints");
  cmd->require_subcommand(1);
  add_checkpoint_create_command(*cmd, exit_code);
  auto dir = std::make_shared<std::string>();
  auto manifest_path = std::make_shared<std::string>();
  auto* verify = cmd->add_subcommand(
      "verify",
      "check a checkpoint: every file against its list (size, CRC32C), its metadata, every row "
      "of every shard copy (checksum, count) and, with --manifest, the table layout");
  verify->add_option("dir", *dir, "checkpoint directory")->required();
  verify->add_option("--manifest", *manifest_path,
                     "also check that the checkpoint fits this manifest's table layout");
  verify->callback([dir, manifest_path, &exit_code] {
    auto fail = [&exit_code](const error& e) {
      std::fprintf(stderr, "strata checkpoint verify: %s\n", e.to_string().c_str());
      exit_code = 1;
    };
    std::optional<deploy::manifest> m;
    if (!manifest_path->empty()) {
      auto loaded = deploy::load_manifest(*manifest_path);
      if (!loaded) return fail(loaded.err());
      m = std::move(*loaded);
    }
    auto report = actors::verify_checkpoint(*dir, m ? &m->cluster.table : nullptr,
                                            m ? m->cluster.partitions : 0);
    if (!report) return fail(report.err());
    std::printf(
        "ok: %llu files, %llu bytes; epoch %llu, incarnation %u, %zu shards, %llu rows, %zu "
        "workers\n",
        static_cast<unsigned long long>(report->files),
        static_cast<unsigned long long>(report->bytes),
        static_cast<unsigned long long>(report->meta.epoch),
        static_cast<unsigned>(report->meta.incarnation), report->meta.shard_rows.size(),
        static_cast<unsigned long long>(report->rows), report->meta.positions.size());
  });
}

}  // namespace strata::cli
