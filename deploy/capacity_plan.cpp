#include "deploy/capacity_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace strata::deploy {
namespace {

error bad_option(const std::string& flag, double value, const std::string& what) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", value);
  return error(errc::invalid_argument, "strata plan: " + flag + " " + buf + ": " + what);
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The bench that measures each row (for the error when one is missing).
std::string bench_of(std::string_view name) {
  if (name.rfind("dram_", 0) == 0 || name.rfind("lmdb_", 0) == 0) return "strata bench tiers";
  if (name.rfind("transport_", 0) == 0) return "strata bench transport";
  return "strata bench e2e";
}

class plan_builder {
 public:
  plan_builder(const plan_options& o, const bench_figures& f) : o_(o), f_(f) {}

  // An option's value, named as given or as an assumed default.
  void option(const std::string& flag, double value, const std::string& unit) {
    const bool given = std::find(o_.given.begin(), o_.given.end(), flag) != o_.given.end();
    plan_.inputs.push_back({flag.substr(2), value, unit,
                            given ? "option " + flag : "assumption (default of " + flag + ")"});
  }
  void code(const std::string& name, double value, const std::string& unit,
            const std::string& source) {
    plan_.inputs.push_back({name, value, unit, "code: " + source});
  }
  // A measured row; a missing or unusable one is an error naming the file.
  expected<bench_figure> measured(const std::string& name, const std::string& unit,
                                  bool needs_baseline = false) {
    const bench_figure* row = f_.find(name, unit);
    if (!row) {
      return error(errc::not_found, f_.path + ": no row \"" + name + "\" with unit \"" + unit +
                                        "\" (measured by `" + bench_of(name) +
                                        " --json-out FILE`)");
    }
    if (!(row->value > 0) || !std::isfinite(row->value)) {
      return error(errc::invalid_argument, row->where + ": row \"" + name + "\": value " +
                                               number(row->value) + " must be positive");
    }
    if (needs_baseline && (!(row->baseline_value > 0) || !std::isfinite(row->baseline_value))) {
      return error(errc::invalid_argument, row->where + ": row \"" + name + "\": baseline_value " +
                                               number(row->baseline_value) +
                                               " must be positive");
    }
    std::string source = "measured: " + name + " (" + row->where + ")";
    if (needs_baseline)
      source += ", baseline " + row->baseline + " " + number(row->baseline_value) + " " + unit;
    plan_.inputs.push_back({name, row->value, unit, std::move(source)});
    return *row;
  }
  void result(const std::string& name, double value, const std::string& unit,
              const std::string& how) {
    plan_.results.push_back({name, value, unit, how});
  }
  capacity_plan& plan() { return plan_; }

 private:
  const plan_options& o_;
  const bench_figures& f_;
  capacity_plan plan_;
};

status check_options(const plan_options& o) {
  auto positive = [](double v) { return v > 0 && std::isfinite(v); };
  if (!positive(o.keys)) return bad_option("--keys", o.keys, "must be a positive number of keys");
  if (o.dim == 0 || o.dim > 65535)
    return bad_option("--dim", o.dim, "must be 1..65535 (a row's dim is 16 bits on disk)");
  if (!(o.hot_fraction >= 0 && o.hot_fraction <= 1))
    return bad_option("--hot-fraction", o.hot_fraction, "must be between 0 and 1");
  if (!(o.examples_per_s >= 0) || !std::isfinite(o.examples_per_s))
    return bad_option("--examples-per-s", o.examples_per_s,
                      "must be positive (or 0: one node's measured rate)");
  if (!(o.node_examples_per_s >= 0) || !std::isfinite(o.node_examples_per_s))
    return bad_option("--node-examples-per-s", o.node_examples_per_s,
                      "must be positive (or 0: the measured e2e_examples_per_s)");
  if (!positive(o.data_examples))
    return bad_option("--data-examples", o.data_examples, "must be positive");
  if (!positive(o.keys_per_example))
    return bad_option("--keys-per-example", o.keys_per_example, "must be positive");
  if (!positive(o.node_dram_gib))
    return bad_option("--node-dram-gib", o.node_dram_gib, "must be positive");
  if (!positive(o.node_ssd_tib))
    return bad_option("--node-ssd-tib", o.node_ssd_tib, "must be positive");
  if (!positive(o.nic_gbps)) return bad_option("--nic-gbps", o.nic_gbps, "must be positive");
  if (!(o.usable_fraction > 0 && o.usable_fraction <= 1))
    return bad_option("--usable-fraction", o.usable_fraction, "must be in (0, 1]");
  return {};
}

// The dram_lookup_dimD row nearest the plan's dim (ties: the larger D).
std::string nearest_lookup_row(const bench_figures& f, uint32_t dim) {
  const std::string prefix = "dram_lookup_dim";
  std::string best;
  long best_gap = -1;
  uint32_t best_dim = 0;
  for (const auto& r : f.rows) {
    if (r.unit != "rows/s" || r.name.rfind(prefix, 0) != 0) continue;
    const std::string digits = r.name.substr(prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto d = static_cast<uint32_t>(std::stoul(digits));
    const long gap = std::labs(static_cast<long>(d) - static_cast<long>(dim));
    if (best_gap < 0 || gap < best_gap || (gap == best_gap && d > best_dim)) {
      best = r.name;
      best_gap = gap;
      best_dim = d;
    }
  }
  return best.empty() ? prefix + "64" : best;  // the error then names the usual row
}

}  // namespace

const bench_figure* bench_figures::find(std::string_view name, std::string_view unit) const {
  for (auto it = rows.rbegin(); it != rows.rend(); ++it)
    if (it->name == name && it->unit == unit) return &*it;
  return nullptr;
}

expected<bench_figures> parse_bench_figures(std::string_view text, const std::string& path) {
  bench_figures out;
  out.path = path;
  size_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return error(errc::invalid_argument,
                   where + ": not a JSON object (a bench row is {\"name\",\"value\",\"unit\","
                           "\"baseline\",\"baseline_value\",\"ratio\"})");
    }
    auto str = [&](const char* key) -> const nlohmann::json* {
      auto it = j.find(key);
      return it != j.end() && it->is_string() ? &*it : nullptr;
    };
    auto num = [&](const char* key) -> const nlohmann::json* {
      auto it = j.find(key);
      return it != j.end() && it->is_number() ? &*it : nullptr;
    };
    if (!str("name")) return error(errc::invalid_argument, where + ": no string \"name\"");
    if (!str("unit")) return error(errc::invalid_argument, where + ": no string \"unit\"");
    if (!num("value")) return error(errc::invalid_argument, where + ": no number \"value\"");
    bench_figure f;
    f.name = str("name")->get<std::string>();
    f.unit = str("unit")->get<std::string>();
    f.value = num("value")->get<double>();
    if (str("baseline")) f.baseline = str("baseline")->get<std::string>();
    if (num("baseline_value")) f.baseline_value = num("baseline_value")->get<double>();
    f.where = where;
    out.rows.push_back(std::move(f));
  }
  return out;
}

expected<bench_figures> load_bench_figures(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return error(errc::not_found, path.string() + ": cannot read the figures file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error(errc::io_error, path.string() + ": read failed");
  return parse_bench_figures(text.str(), path.string());
}

expected<optimizer_kind> parse_optimizer_name(std::string_view name) {
  for (auto k : {optimizer_kind::sgd, optimizer_kind::adagrad, optimizer_kind::adam,
                 optimizer_kind::ftrl})
    if (to_string(k) == name) return k;
  return error(errc::invalid_argument, "strata plan: --optimizer " + std::string(name) +
                                           ": unknown (one of sgd, adagrad, adam, ftrl)");
}

double capacity_plan::result(std::string_view name) const {
  for (const auto& r : results)
    if (r.name == name) return r.value;
  STRATA_ASSERT(false, "capacity_plan::result: no such result");
}

expected<capacity_plan> make_capacity_plan(const plan_options& o, const bench_figures& f) {
  STRATA_TRY(check_options(o));
  plan_builder b(o, f);
  const row_layout layout{o.dim, o.optimizer, true};
  b.plan().layout = layout;

  // --- inputs ---------------------------------------------------------------
  b.plan().inputs.push_back({"keys", o.keys, "keys", "option --keys"});
  b.plan().inputs.push_back({"dim", static_cast<double>(o.dim), "floats", "option --dim"});
  b.plan().inputs.push_back({"optimizer_state_words", static_cast<double>(layout.state_words()),
                             "words", "code: row_layout::state_words (tiers/row.hpp), --optimizer " +
                                          std::string(to_string(o.optimizer))});
  b.code("raw_row_bytes", static_cast<double>(layout.raw_bytes()), "bytes",
         "row_layout::raw_bytes (weights + optimizer state)");
  b.code("encoded_row_bytes", static_cast<double>(layout.encoded_bytes()), "bytes",
         "row_layout::encoded_bytes (LMDB value: 32-byte header + payload)");
  b.option("--hot-fraction", o.hot_fraction, "fraction of keys");
  b.option("--keys-per-example", o.keys_per_example, "keys");
  b.option("--data-examples", o.data_examples, "examples");
  b.option("--node-dram-gib", o.node_dram_gib, "GiB");
  b.option("--node-ssd-tib", o.node_ssd_tib, "TiB");
  b.option("--nic-gbps", o.nic_gbps, "Gbit/s");
  b.option("--usable-fraction", o.usable_fraction, "fraction");

  auto dram_row = b.measured("dram_bytes_per_key", "bytes", true);
  if (!dram_row) return dram_row.err();
  auto lmdb_row = b.measured("lmdb_bytes_per_key", "bytes", true);
  if (!lmdb_row) return lmdb_row.err();
  auto lookup = b.measured(nearest_lookup_row(f, o.dim), "rows/s");
  if (!lookup) return lookup.err();
  auto push = b.measured("dram_push_adagrad_dim64", "rows/s");
  if (!push) return push.err();
  auto lmdb_read = b.measured("lmdb_read", "rows/s");
  if (!lmdb_read) return lmdb_read.err();
  auto lmdb_write = b.measured("lmdb_write", "rows/s");
  if (!lmdb_write) return lmdb_write.err();
  auto transport = b.measured("transport_frames_dim64_tcp", "GB/s");
  if (!transport) return transport.err();
  auto train = b.measured("e2e_examples_per_s", "examples/s");
  if (!train) return train.err();
  auto cache_hit = b.measured("e2e_cache_hit_rate", "fraction");
  if (!cache_hit) return cache_hit.err();
  if (cache_hit->value >= 1) {
    return error(errc::invalid_argument, cache_hit->where +
                                             ": row \"e2e_cache_hit_rate\": value " +
                                             number(cache_hit->value) + " must be below 1");
  }
  auto ssd_hit = b.measured("e2e_ssd_hit_rate", "fraction");
  if (!ssd_hit) return ssd_hit.err();
  if (ssd_hit->value > 1) {
    return error(errc::invalid_argument, ssd_hit->where + ": row \"e2e_ssd_hit_rate\": value " +
                                             number(ssd_hit->value) + " must be at most 1");
  }
  // One node's training rate: measured on this machine, or the user's
  // figure for a larger node (an extrapolation the output names).
  const double node_rate = o.node_examples_per_s > 0 ? o.node_examples_per_s : train->value;
  b.plan().inputs.push_back({"node_examples_per_s", node_rate, "examples/s",
                             o.node_examples_per_s > 0
                                 ? "option --node-examples-per-s"
                                 : "measured: e2e_examples_per_s (default of "
                                   "--node-examples-per-s)"});
  const double target = o.examples_per_s > 0 ? o.examples_per_s : node_rate;
  b.plan().inputs.push_back({"examples_per_s", target, "examples/s",
                             o.examples_per_s > 0 ? "option --examples-per-s"
                                                  : "assumption (default of --examples-per-s: "
                                                    "one node's rate)"});

  // --- per key --------------------------------------------------------------
  // DRAM: the measured per-key overhead (index, record meta, allocator) over
  // the raw row is per key, so it is added to this layout's raw bytes.
  const double dram_overhead = dram_row->value - dram_row->baseline_value;
  const double dram_bpk = static_cast<double>(layout.raw_bytes()) + dram_overhead;
  b.result("dram_bytes_per_key", dram_bpk, "bytes",
           "raw_row_bytes + measured overhead (dram_bytes_per_key - its baseline = " +
               number(dram_overhead) + " bytes/key)");
  // LMDB: the overhead is the B-tree's page fill, proportional to the value.
  const double lmdb_factor = lmdb_row->value / lmdb_row->baseline_value;
  const double lmdb_bpk = static_cast<double>(layout.encoded_bytes()) * lmdb_factor;
  b.result("lmdb_bytes_per_key", lmdb_bpk, "bytes",
           "encoded_row_bytes x measured lmdb_bytes_per_key / encoded_row_bytes (" +
               number(lmdb_factor) + ")");

  // --- traffic --------------------------------------------------------------
  const double lookups = target * o.keys_per_example;
  const double shard_pulls = lookups * (1 - cache_hit->value);
  const double shard_pushes = shard_pulls;  // one gradient back per row pulled
  const double ssd_reads = shard_pulls * ssd_hit->value;
  const double ssd_writes = ssd_reads;  // a row read from LMDB leaves DRAM dirty
  const double wire_bytes_per_row = 8.0 + 4.0 * o.dim;  // key + weights (or gradient)
  const double network_bytes = (shard_pulls + shard_pushes) * wire_bytes_per_row;
  b.result("shard_pulls_per_s", shard_pulls, "rows/s",
           "examples_per_s x keys_per_example x (1 - e2e_cache_hit_rate)");
  b.result("shard_pushes_per_s", shard_pushes, "rows/s",
           "assumption: one gradient row per row pulled");
  b.result("ssd_reads_per_s", ssd_reads, "rows/s", "shard_pulls_per_s x e2e_ssd_hit_rate");
  b.result("ssd_writes_per_s", ssd_writes, "rows/s",
           "assumption: every row read from LMDB is written back dirty");
  b.result("network_bytes_per_s", network_bytes, "B/s",
           "(pulls + pushes) x (8-byte key + 4 x dim), all remote (an upper bound)");

  // --- nodes per constraint -------------------------------------------------
  const double hot_keys = o.keys * o.hot_fraction;
  const double dram_bytes = hot_keys * dram_bpk;
  const double node_dram = o.node_dram_gib * 1073741824.0 * o.usable_fraction;
  const double ssd_bytes = o.keys * lmdb_bpk;
  const double node_ssd = o.node_ssd_tib * 1099511627776.0 * o.usable_fraction;
  const double node_net = std::min(o.nic_gbps / 8 * 1e9, transport->value * 1e9);
  const double dram_nodes = std::ceil(dram_bytes / node_dram);
  const double ssd_capacity_nodes = std::ceil(ssd_bytes / node_ssd);
  const double ssd_rate_nodes =
      std::ceil(ssd_reads / lmdb_read->value + ssd_writes / lmdb_write->value);
  const double shard_cpu_nodes =
      std::ceil(shard_pulls / lookup->value + shard_pushes / push->value);
  const double network_nodes = std::ceil(network_bytes / node_net);
  const double training_nodes = std::ceil(target / node_rate);
  const double shard_nodes = std::max({1.0, dram_nodes, ssd_capacity_nodes, ssd_rate_nodes,
                                       shard_cpu_nodes, network_nodes});
  const double nodes = std::max(shard_nodes, training_nodes);
  b.result("dram_bytes", dram_bytes, "bytes", "keys x hot_fraction x dram_bytes_per_key");
  b.result("ssd_bytes", ssd_bytes, "bytes", "keys x lmdb_bytes_per_key");
  b.result("nodes_dram", dram_nodes, "nodes",
           "dram_bytes / (node_dram_gib x usable_fraction), rounded up");
  b.result("nodes_ssd_capacity", ssd_capacity_nodes, "nodes",
           "ssd_bytes / (node_ssd_tib x usable_fraction), rounded up");
  b.result("nodes_ssd_rate", ssd_rate_nodes, "nodes",
           "ssd_reads_per_s / lmdb_read + ssd_writes_per_s / lmdb_write, rounded up");
  b.result("nodes_shard_cpu", shard_cpu_nodes, "nodes",
           "shard_pulls_per_s / " + lookup->name +
               " + shard_pushes_per_s / dram_push_adagrad_dim64, rounded up");
  b.result("nodes_network", network_nodes, "nodes",
           "network_bytes_per_s / min(nic_gbps, transport_frames_dim64_tcp), rounded up");
  b.result("nodes_training", training_nodes, "nodes",
           "examples_per_s / node_examples_per_s, rounded up");
  b.result("nodes_shards", shard_nodes, "nodes",
           "the largest of nodes_dram, nodes_ssd_capacity, nodes_ssd_rate, nodes_shard_cpu, "
           "nodes_network");
  b.result("nodes", nodes, "nodes",
           "max(nodes_shards, nodes_training): each node runs workers and shards");

  // --- per node and per epoch -----------------------------------------------
  b.result("dram_per_node", dram_bytes / shard_nodes, "bytes", "dram_bytes / nodes_shards");
  b.result("ssd_per_node", ssd_bytes / shard_nodes, "bytes", "ssd_bytes / nodes_shards");
  b.result("ssd_read_iops_per_node", ssd_reads / shard_nodes, "IOPS",
           "ssd_reads_per_s / nodes_shards (one 4 KiB page per row read, cold page cache)");
  b.result("ssd_write_rows_per_node", ssd_writes / shard_nodes, "rows/s",
           "ssd_writes_per_s / nodes_shards (LMDB batches them: 10k-row transactions)");
  b.result("network_per_node", network_bytes / shard_nodes, "B/s",
           "network_bytes_per_s / nodes_shards");
  b.result("epoch_seconds", o.data_examples / target, "s", "data_examples / examples_per_s");
  return std::move(b.plan());
}

std::string format_plan_text(const capacity_plan& plan) {
  std::string out;
  auto line = [&](const plan_item& i) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-26s %12s %-18s ", i.name.c_str(), number(i.value).c_str(),
                  i.unit.c_str());
    out += buf;
    out += i.source;
    out += '\n';
  };
  out += "inputs (name, value, unit, source)\n";
  for (const auto& i : plan.inputs) line(i);
  out += "results (name, value, unit, how)\n";
  for (const auto& r : plan.results) line(r);
  const double nodes = plan.result("nodes");
  const double epoch = plan.result("epoch_seconds");
  char summary[256];
  std::snprintf(summary, sizeof summary,
                "plan: %s nodes (%s for shards, %s for training); %.3g TB DRAM, %.3g TB SSD; "
                "%.3g h per epoch\n",
                number(nodes).c_str(), number(plan.result("nodes_shards")).c_str(),
                number(plan.result("nodes_training")).c_str(), plan.result("dram_bytes") / 1e12,
                plan.result("ssd_bytes") / 1e12, epoch / 3600);
  out += summary;
  return out;
}

std::string format_plan_json(const capacity_plan& plan) {
  auto items = [](const std::vector<plan_item>& v, const char* source_key) {
    auto a = nlohmann::json::array();
    for (const auto& i : v)
      a.push_back({{"name", i.name}, {"value", i.value}, {"unit", i.unit}, {source_key, i.source}});
    return a;
  };
  nlohmann::json j;
  j["inputs"] = items(plan.inputs, "source");
  j["results"] = items(plan.results, "how");
  j["nodes"] = plan.result("nodes");
  return j.dump();
}

}  // namespace strata::deploy
