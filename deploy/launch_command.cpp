// `strata launch MANIFEST [--resume[=DIR]]`: a supervisor
// (deploy/supervisor.hpp) that runs each node as its own child process of
// this binary (`strata node`, deploy/launch_node.cpp) and applies the
// manifest's crash policy.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "actors/checkpoint.hpp"
#include "deploy/cache_backend_choice.hpp"
#include "deploy/commands.hpp"
#include "deploy/launch_data.hpp"
#include "deploy/manifest.hpp"
#include "deploy/manifest_warnings.hpp"
#include "deploy/preflight.hpp"
#include "deploy/supervisor.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;
using detail::generate_data;
using detail::resume_candidates;

// The supervisor side of `strata launch`.
int launch(const std::string& path, bool resume, const std::string& resume_dir) {
  auto loaded = deploy::load_manifest(path);
  if (!loaded) {
    std::cerr << "strata launch: " << loaded.err().message() << '\n';
    return 1;
  }
  const deploy::manifest& m = *loaded;
  // A cache backend this machine cannot run, then every file the manifest
  // needs: both refused before any node starts.
  {
    deploy::manifest probe = m;
    if (status backend = apply_cache_backend(probe); !backend) {
      std::cerr << "strata launch: " << backend.err().message() << '\n';
      return 1;
    }
  }
  if (auto files = deploy::check_manifest_files(m, std::cout); !files) {
    std::cerr << "strata launch: " << files.err().message() << '\n';
    return 1;
  }
  // Every node starts on this host: a port in use fails the launch before
  // any starts, named by its field (and no resume is suggested).
  for (size_t i = 0; i < std::max<size_t>(m.nodes.size(), 1); ++i) {
    const std::string node = m.nodes.size() > 1 ? m.nodes[i].name : "";
    if (auto ports = deploy::check_ports_free(m, node); !ports) {
      std::cerr << "strata launch: " << ports.err().message() << '\n';
      return 1;
    }
  }
  if (auto wipe = deploy::store_without_checkpoint_warning(m); !wipe.empty())
    std::cout << "strata launch: warning: " << wipe << '\n';
  std::cout.flush();
  const fs::path root = m.cluster.checkpoint.directory;
  std::vector<std::string> first;
  if (resume) {
    const fs::path dir = resume_dir.empty() ? root : fs::path(resume_dir);
    if (dir.empty()) {
      std::cerr << "strata launch: " << path
                << ": --resume without a directory needs checkpoint.dir in the manifest\n";
      return 1;
    }
    auto found = resume_candidates(dir);
    if (!found) {
      std::cerr << "strata launch: " << found.err().message() << '\n';
      return 1;
    }
    first = {"--resume", dir.string()};
  }
  deploy::supervisor_config sc;
  sc.restart = m.on_failure == deploy::failure_policy::restart;
  sc.max_restarts = m.max_restarts;
  sc.manifest = path;
  sc.resume_for_restart = [root] {
    // Always a checkpoint copy, never the live LMDB files the dead node
    // left: the latest complete one (the node falls back to the one
    // before if it is damaged).
    deploy::supervisor_config::resume_plan plan;
    auto latest = actors::latest_checkpoint(root);
    if (!latest) return plan;
    plan.args = {"--resume", root.string()};
    plan.description = "from checkpoint " + latest->string();
    return plan;
  };
  sc.resume_hint = [&m, path] { return detail::resume_hint(m, path); };
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::cerr << "strata launch: cannot find this binary (/proc/self/exe): " << ec.message()
              << '\n';
    return 1;
  }
  std::vector<deploy::child_node> nodes;
  if (m.nodes.size() > 1) {
    // Every node reads the data: generate it once, before any starts.
    std::error_code exists_ec;
    if (m.generate && !fs::exists(m.data.path, exists_ec)) {
      auto generated = generate_data(m);
      if (!generated) {
        std::cerr << "strata launch: " << generated.err().message() << '\n';
        return 1;
      }
    }
    std::string names, standby;
    for (const auto& n : m.nodes) {
      // A standby node joins later, started by hand on its host.
      if (n.standby) {
        standby += (standby.empty() ? "" : ", ") + n.name;
        continue;
      }
      nodes.push_back({n.name, {self.string(), "node", "--manifest", path, "--node", n.name}});
      names += (names.empty() ? "" : ", ") + n.name;
    }
    std::printf("launch: starting %zu nodes (%s), one process each; node %s coordinates\n",
                nodes.size(), names.c_str(), m.nodes.front().name.c_str());
    if (!standby.empty())
      std::printf("launch: standby nodes %s are not started (each joins when started: strata node "
                  "--manifest %s --node NAME)\n",
                  standby.c_str(), path.c_str());
  } else {
    nodes.push_back(
        {m.metrics.node, {self.string(), "node", "--manifest", path, "--node", m.metrics.node}});
  }
  std::fflush(stdout);
  return deploy::supervise(sc, nodes, first);
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto resume = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "launch",
      "run every node of a manifest as a supervised child process (strata node) under the "
      "manifest's crash policy; --resume restores the latest complete checkpoint");
  cmd->add_option("manifest", *path, "the manifest (YAML), e.g. deploy/examples/local.yaml")
      ->required();
  auto* resume_opt =
      cmd->add_option("--resume", *resume,
                      "resume from a checkpoint: DIR (a checkpoint, or a directory of them: its "
                      "latest complete one); no value: the manifest's checkpoint.dir")
          ->expected(0, 1);
  cmd->callback([path, resume, resume_opt, &exit_code] {
    exit_code = launch(*path, resume_opt->count() > 0, *resume);
  });
}

}  // namespace strata::cli
