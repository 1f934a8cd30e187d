// `strata plan`: nodes, SSD and network a model needs (deploy/capacity_plan.hpp).
#include <cstdio>
#include <iostream>
#include <memory>

#include "deploy/capacity_plan.hpp"
#include "deploy/commands.hpp"

namespace strata::cli {

void add_plan_command(CLI::App& app, int& exit_code) {
  struct options {
    deploy::plan_options plan;
    std::string optimizer;
    double dim = 0;  // a double, so that a negative or fractional dim is named, not parsed away
    std::string figures = STRATA_SOURCE_DIR "/docs/benchmarks.jsonl";
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = app.add_subcommand(
      "plan", "nodes, DRAM, SSD, IOPS and network a model needs, from this hardware's bench figures");
  cmd->add_option("--keys", o->plan.keys, "keys of the model (e.g. 1e11)")->required();
  cmd->add_option("--dim", o->dim, "embedding dim")->required();
  cmd->add_option("--optimizer", o->optimizer, "sgd, adagrad, adam or ftrl")->required();
  cmd->add_option("--hot-fraction", o->plan.hot_fraction,
                  "share of the keys the DRAM tier holds (default 0.1)");
  cmd->add_option("--examples-per-s", o->plan.examples_per_s,
                  "target training examples/s of the cluster (default: one node's measured rate)");
  cmd->add_option("--node-examples-per-s", o->plan.node_examples_per_s,
                  "training examples/s one node sustains (default: the measured "
                  "e2e_examples_per_s of this machine)");
  cmd->add_option("--data-examples", o->plan.data_examples,
                  "examples in one epoch of data (default 1e9)");
  cmd->add_option("--keys-per-example", o->plan.keys_per_example,
                  "keys each example looks up (default 39, the Criteo layout)");
  cmd->add_option("--node-dram-gib", o->plan.node_dram_gib, "DRAM per node, GiB (default 512)");
  cmd->add_option("--node-ssd-tib", o->plan.node_ssd_tib, "SSD per node, TiB (default 7.68)");
  cmd->add_option("--nic-gbps", o->plan.nic_gbps, "network per node, Gbit/s (default 100)");
  cmd->add_option("--usable-fraction", o->plan.usable_fraction,
                  "share of a node's DRAM and SSD the tiers may fill (default 0.8)");
  cmd->add_option("--figures", o->figures,
                  "bench rows as JSON lines (`make bench` output; default: the committed "
                  "docs/benchmarks.jsonl)");
  cmd->add_flag("--json", o->json, "one JSON object: inputs, results, nodes");
  cmd->callback([o, cmd, &exit_code] {
    for (const char* flag : {"--hot-fraction", "--examples-per-s", "--data-examples",
                             "--node-examples-per-s",
                             "--keys-per-example", "--node-dram-gib", "--node-ssd-tib",
                             "--nic-gbps", "--usable-fraction"})
      if (cmd->count(flag)) o->plan.given.emplace_back(flag);
    auto fail = [&](const error& e) {
      // Option errors name the command already; file errors start with the path.
      const bool named = e.message().rfind("strata plan:", 0) == 0;
      std::fprintf(stderr, "%s%s\n", named ? "" : "strata plan: ", e.message().c_str());
      exit_code = 1;
    };
    if (!(o->dim >= 1 && o->dim <= 65535) || o->dim != static_cast<uint32_t>(o->dim)) {
      std::fprintf(stderr, "strata plan: --dim %g: must be a whole number 1..65535\n", o->dim);
      exit_code = 1;
      return;
    }
    o->plan.dim = static_cast<uint32_t>(o->dim);
    auto kind = deploy::parse_optimizer_name(o->optimizer);
    if (!kind) return fail(kind.err());
    o->plan.optimizer = *kind;
    auto figures = deploy::load_bench_figures(o->figures);
    if (!figures) return fail(figures.err());
    auto plan = deploy::make_capacity_plan(o->plan, *figures);
    if (!plan) return fail(plan.err());
    std::cout << (o->json ? deploy::format_plan_json(*plan) + "\n"
                          : deploy::format_plan_text(*plan));
  });
}

}  // namespace strata::cli
