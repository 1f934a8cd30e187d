// `strata validate MANIFEST`: parse and check a manifest without starting
// anything (docs/manifest.md).
#include <iostream>
#include <memory>
#include <string>

#include "deploy/commands.hpp"
#include "deploy/host_memory.hpp"
#include "deploy/manifest.hpp"
#include "deploy/manifest_warnings.hpp"

namespace strata::cli {

void add_validate_command(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("validate", "check a manifest; errors name file, line, field");
  cmd->add_option("manifest", *path, "the manifest (YAML)")->required();
  cmd->callback([path, &exit_code] {
    auto m = deploy::load_manifest(*path);
    if (!m) {
      std::cerr << m.err().message() << '\n';
      exit_code = 1;
      return;
    }
    // The manifest may be meant for a larger host: a warning, not an error.
    if (auto memory = deploy::check_host_memory(*m, ""); !memory)
      std::cerr << "warning: " << memory.err().message() << '\n';
    // Files launch needs, and a store that loses its rows: this may not be
    // the host that runs the manifest, so warnings.
    for (const auto& warning : deploy::manifest_warnings(*m))
      std::cerr << "warning: " << warning << '\n';
    std::cout << "ok\n";
  });
}

}  // namespace strata::cli
