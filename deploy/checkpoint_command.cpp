#include <cstdio>
#include <string>

#include "common/file_manifest.hpp"
#include "deploy/commands.hpp"

namespace strata::cli {

void add_checkpoint_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("checkpoint", "checkpoints");
  cmd->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto* verify = cmd->add_subcommand("verify", "check every file of a checkpoint against its list");
  verify->add_option("dir", *dir, "checkpoint directory")->required();
  verify->callback([dir, &exit_code] {
    auto entries = verify_file_manifest(*dir);
    if (!entries) {
      std::fprintf(stderr, "strata checkpoint verify: %s\n", entries.err().to_string().c_str());
      exit_code = 1;
      return;
    }
    uint64_t bytes = 0;
    for (const auto& e : *entries) bytes += e.bytes;
    std::printf("ok: %zu files, %llu bytes\n", entries->size(),
                static_cast<unsigned long long>(bytes));
  });
}

}  // namespace strata::cli
