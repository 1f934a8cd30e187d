// Subcommands of the `strata` binary. Each registers itself on the CLI11
// app and runs when chosen, setting `exit_code` (0: success); main.cpp only
// wires them together.
#pragma once

#include <CLI/CLI.hpp>

namespace strata::cli {

// `strata bench SUITE [--json] [--keys N] [--small] [--dir D]`
void add_bench_command(CLI::App& app, int& exit_code);

// `strata validate MANIFEST`: prints "ok", or every error (file:line: field:
// what) on stderr and exits 1.
void add_validate_command(CLI::App& app, int& exit_code);

// `strata datagen --out PATH [--rows N] [--keys K] [--seed S] [--zipf Z]`:
// synthetic Criteo-layout data with a planted model (model/datagen.hpp).
void add_datagen_command(CLI::App& app, int& exit_code);

// `strata launch MANIFEST [--resume[=DIR]]`: runs each node of the
// manifest as a supervised child process (`strata node`) and applies the
// crash policy (checkpoint.on_failure); SIGINT/SIGTERM stop the nodes
// gracefully (each takes a final checkpoint).
void add_launch_command(CLI::App& app, int& exit_code);

// `strata node --manifest M --node NAME [--resume DIR]`: validates,
// generates the data if asked and absent, restores a checkpoint if asked,
// trains the node's cluster in this process with a progress line on
// stderr, and prints the report on stdout.
void add_node_command(CLI::App& app, int& exit_code);

// `strata checkpoint verify DIR [--manifest M]`: checks a checkpoint's file
// list (sizes, CRC32C), metadata, every row of every shard copy and, with a
// manifest, the table layout; names the file and the problem.
void add_checkpoint_command(CLI::App& app, int& exit_code);
// `strata status|scale|stop --admin HOST:PORT [--token-file F]`: the admin
// API's verbs (deploy/admin_server.hpp).
void add_admin_commands(CLI::App& app, int& exit_code);
// `strata render k8s MANIFEST`: Kubernetes objects (deploy/render_k8s.hpp).
void add_render_command(CLI::App& app, int& exit_code);
// `strata checkpoint create --admin HOST:PORT [--token-file F]`.
void add_checkpoint_create_command(CLI::App& checkpoint, int& exit_code);

// `strata serve MANIFEST [--port-file F]`: loads the manifest's checkpoint
// into the serving tiers and answers lookups (binary protocol and HTTP)
// until SIGINT/SIGTERM (docs/serving.md).
void add_serve_command(CLI::App& app, int& exit_code);

// `strata key --slot S --value V`, `strata keys --table T [--limit N]
// (--checkpoint DIR | --server HOST:PORT)`, `strata tables --server
// HOST:PORT`: keys users can look up (deploy/key_command.cpp).
void add_key_commands(CLI::App& app, int& exit_code);

// `strata plan --keys K --dim D --optimizer O [...]`: nodes per tier, SSD,
// IOPS, network and time per epoch from the bench figures
// (deploy/capacity_plan.hpp, docs/capacity.md).
void add_plan_command(CLI::App& app, int& exit_code);

}  // namespace strata::cli
