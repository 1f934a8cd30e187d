// `strata plan`'s arithmetic: how many nodes a model of a given size needs,
// from the per-node figures `strata bench` measured (docs/capacity.md).
//
// Inputs are the options (keys, dim, optimizer, traffic, node hardware) and
// the rows of a bench jsonl file ({"name","value","unit","baseline",
// "baseline_value","ratio"}, bench/report.hpp). Row sizes come from the
// code's own layout (tiers/row.hpp, row_layout), never from a table here.
// Every input the plan used is listed with its value, unit and source (an
// option, an assumed default, the code, or a jsonl row as file:line), so a
// reader can re-check each figure. Pure functions, no I/O except
// load_bench_figures.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "tiers/row.hpp"

namespace strata::deploy {

// One row of a bench jsonl file, and where it was read.
struct bench_figure {
  std::string name;
  double value = 0;
  std::string unit;
  std::string baseline;
  double baseline_value = 0;
  std::string where;  // "FILE:LINE"
};

struct bench_figures {
  std::string path;
  std::vector<bench_figure> rows;
  // The last row with this name and unit (a later run appended to the same
  // file wins), or nullptr.
  const bench_figure* find(std::string_view name, std::string_view unit) const;
};

// Parses jsonl text; `path` names it in errors ("PATH:LINE: ..."). Blank
// lines are skipped; a line that is not a JSON object with a string "name"
// and "unit" and a number "value" is an error.
expected<bench_figures> parse_bench_figures(std::string_view text, const std::string& path);
expected<bench_figures> load_bench_figures(const std::filesystem::path& path);

// "sgd", "adagrad", "adam", "ftrl" (the manifest's names).
expected<optimizer_kind> parse_optimizer_name(std::string_view name);

struct plan_options {
  double keys = 0;                 // --keys: every key of the model (all on SSD)
  uint32_t dim = 0;                // --dim
  optimizer_kind optimizer = optimizer_kind::adagrad;
  double hot_fraction = 0.1;       // --hot-fraction: the keys the DRAM tier holds
  double examples_per_s = 0;       // --examples-per-s: target; 0 = one node's rate
  double node_examples_per_s = 0;  // --node-examples-per-s: one node's rate; 0 = measured
  double data_examples = 1e9;      // --data-examples: examples in one epoch
  double keys_per_example = 39;    // --keys-per-example (Criteo layout: 13 + 26 slots)
  double node_dram_gib = 512;      // --node-dram-gib
  double node_ssd_tib = 7.68;      // --node-ssd-tib
  double nic_gbps = 100;           // --nic-gbps (Gbit/s)
  double usable_fraction = 0.8;    // --usable-fraction of a node's DRAM and SSD
  // Where each option's value came from: the options the user gave
  // (by flag name, e.g. "--hot-fraction"); the others are assumed defaults.
  std::vector<std::string> given;
};

// A named figure the plan used or computed.
struct plan_item {
  std::string name;
  double value = 0;
  std::string unit;
  std::string source;  // inputs: where from; results: how computed
};

struct capacity_plan {
  row_layout layout;
  std::vector<plan_item> inputs;
  std::vector<plan_item> results;
  // The result named `name` (STRATA_ASSERT if absent: a bug in a caller).
  double result(std::string_view name) const;
};

// Errors: invalid_argument naming the option and its value, or not_found /
// invalid_argument naming the figures file, the row and the bench that
// measures it.
expected<capacity_plan> make_capacity_plan(const plan_options& options,
                                           const bench_figures& figures);

std::string format_plan_text(const capacity_plan& plan);
std::string format_plan_json(const capacity_plan& plan);  // one JSON object

}  // namespace strata::deploy
