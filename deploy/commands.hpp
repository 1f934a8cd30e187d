// Subcommands of the `strata` binary. Each registers itself on the CLI11
// app and runs when chosen; main.cpp only wires them together.
#pragma once

#include <CLI/CLI.hpp>

namespace strata::cli {

// `strata bench SUITE [--json] [--keys N] [--small] [--dir D]`
void add_bench_command(CLI::App& app, int& exit_code);

}  // namespace strata::cli
