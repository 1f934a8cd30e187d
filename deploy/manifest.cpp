#include "deploy/manifest.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "tiers/dram_tier.hpp"

namespace strata::deploy {
namespace {

// The widest row a table may have (weights per key); the tiers and the
// cache kernels are sized for it.
constexpr uint32_t max_row_dim = 4096;
// Slots the readers produce per example, by format (features.hpp).
constexpr uint32_t criteo_slots = 13 + 26;
// datagen spreads distinct_keys over 26 categorical slots.
constexpr uint64_t datagen_slots = 26;

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

// What a node holds, for "expected X, got Y" messages.
std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return in_quotes(node.Scalar());
}

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

// Collects every error of one file; remembers where each field was written
// so cross-field rules can point at it.
class diagnostics {
 public:
  explicit diagnostics(std::string file) : file_(std::move(file)) {}

  void fail(const YAML::Mark& mark, const std::string& path, const std::string& what) {
    std::string line = file_;
    line += ":" + std::to_string(mark.is_null() ? 1 : mark.line + 1) + ": ";
    if (!path.empty()) line += path + ": ";
    line += what;
    errors_.emplace_back(mark.is_null() ? 0 : mark.line, std::move(line));
  }
  // Fails at the field `path` if it was written, else at its closest
  // written parent section.
  void fail_at(const std::string& path, const std::string& what) {
    fail(mark_of(path), path, what);
  }

  void remember(const std::string& path, const YAML::Mark& mark) { marks_.emplace(path, mark); }
  bool written(const std::string& path) const { return marks_.count(path) != 0; }
  YAML::Mark mark_of(std::string path) const {
    for (;;) {
      if (auto it = marks_.find(path); it != marks_.end()) return it->second;
      const auto dot = path.rfind('.');
      if (dot == std::string::npos) return marks_.count("") ? marks_.at("") : YAML::Mark();
      path.resize(dot);
    }
  }
  bool ok() const { return errors_.empty(); }
  error to_error() const {
    auto sorted = errors_;  // by line, then in the order found
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string message;
    for (const auto& [line, text] : sorted) {
      if (!message.empty()) message += '\n';
      message += text;
    }
    return error(errc::invalid_argument, message);
  }

 private:
  std::string file_;
  std::vector<std::pair<int, std::string>> errors_;  // (0-based line, message)
  std::map<std::string, YAML::Mark> marks_;
};

std::optional<uint64_t> parse_uint(std::string_view text) {
  std::string digits;
  for (char c : text)
    if (c != '_') digits += c;  // YAML-style digit groups: 400_000
  if (digits.empty() || text.front() == '_' || text.back() == '_') return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_real(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value))
    return std::nullopt;
  return value;
}

template <class E>
using choices = std::vector<std::pair<std::string_view, E>>;

template <class E>
std::string list_choices(const choices<E>& options) {
  std::string out;
  for (const auto& [name, value] : options) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

// One YAML mapping of the manifest. Fields are read by name; whatever key
// was never asked for is reported by finish() as unknown.
class section {
 public:
  section(diagnostics& diag, YAML::Node node, std::string path, YAML::Mark mark)
      : diag_(diag), path_(std::move(path)), mark_(mark) {
    if (!node.IsDefined() || node.IsNull()) return;
    if (!node.IsMap()) {
      diag_.fail(node.Mark(), path_, "expected a mapping of fields, got " + describe(node));
      return;
    }
    node_ = node;
    is_map_ = true;
    std::set<std::string> seen;
    for (const auto& entry : node_) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        diag_.fail(key.Mark(), path_, "keys must be plain names, got " + describe(key));
        continue;
      }
      if (!seen.insert(key.Scalar()).second)
        diag_.fail(key.Mark(), join_path(path_, key.Scalar()), "duplicate key");
    }
  }

  diagnostics& diag() { return diag_; }
  std::string path_of(std::string_view key) const { return join_path(path_, key); }

  // The value of `key` and the mark of the key, or nullopt if absent.
  std::optional<std::pair<YAML::Node, YAML::Mark>> find(std::string_view key) {
    known_.emplace(key);
    if (!is_map_) return std::nullopt;
    for (const auto& entry : node_) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) {
        diag_.remember(path_of(key), entry.first.Mark());
        return std::make_pair(entry.second, entry.first.Mark());
      }
    }
    return std::nullopt;
  }
  bool has(std::string_view key) {
    known_.emplace(key);
    return find(key).has_value();
  }
  void require(std::string_view key) {
    if (!has(key)) diag_.fail(mark_, path_of(key), "required field missing");
  }

  section child(std::string_view key) {
    auto found = find(key);
    if (!found) return section(diag_, YAML::Node(), path_of(key), mark_);
    return section(diag_, found->first, path_of(key), found->second);
  }

  // Each reader leaves `out` alone when the key is absent or the value is
  // bad (and reports the latter).
  template <class T>
  void unsigned_int(std::string_view key, T& out, uint64_t min = 0,
                    uint64_t max = std::numeric_limits<T>::max()) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      const auto value = parse_uint(text);
      if (!value) {
        diag_.fail(mark, path, "expected a whole number, got " + in_quotes(text));
      } else if (*value < min || *value > max) {
        diag_.fail(
            mark, path,
            "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + text);
      } else {
        out = static_cast<T>(*value);
      }
    });
  }

  // A real number in [min, max] (or (min, max] when min_exclusive).
  template <class T>
  void real(std::string_view key, T& out, double min, double max, bool min_exclusive = false,
            bool max_exclusive = false) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      const auto value = parse_real(text);
      if (!value) {
        diag_.fail(mark, path, "expected a number, got " + in_quotes(text));
        return;
      }
      const bool low = min_exclusive ? *value <= min : *value < min;
      const bool high = max_exclusive ? *value >= max : *value > max;
      if (low || high) {
        std::ostringstream range;
        range << (min_exclusive ? "(" : "[") << min << ", " << max << (max_exclusive ? ")" : "]");
        diag_.fail(mark, path, "must be in " + range.str() + ", got " + text);
        return;
      }
      out = static_cast<T>(*value);
    });
  }

  void size(std::string_view key, size_t& out) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      auto value = parse_size(text);
      if (!value)
        diag_.fail(mark, path, "expected a size like 64MiB, got " + in_quotes(text));
      else
        out = static_cast<size_t>(*value);
    });
  }

  void boolean(std::string_view key, bool& out) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      if (text == "true")
        out = true;
      else if (text == "false")
        out = false;
      else
        diag_.fail(mark, path, "expected true or false, got " + in_quotes(text));
    });
  }

  void text(std::string_view key, std::string& out) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      if (text.empty())
        diag_.fail(mark, path, "must not be empty");
      else
        out = text;
    });
  }

  void path_value(std::string_view key, std::filesystem::path& out) {
    std::string s;
    text(key, s);
    if (!s.empty()) out = s;
  }

  template <class E>
  void choice(std::string_view key, E& out, const choices<E>& options) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      for (const auto& [name, value] : options)
        if (name == text) {
          out = value;
          return;
        }
      diag_.fail(mark, path,
                 "expected one of " + list_choices(options) + ", got " + in_quotes(text));
    });
  }

  // A list of scalars, each parsed by `item(text, mark, path) -> bool`.
  template <class F>
  bool list(std::string_view key, F&& item) {
    auto found = find(key);
    if (!found) return false;
    const auto& [node, mark] = *found;
    const std::string path = path_of(key);
    if (!node.IsSequence()) {
      diag_.fail(mark, path, "expected a list like [a, b], got " + describe(node));
      return false;
    }
    bool all_ok = true;
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      if (!node[i].IsScalar()) {
        diag_.fail(node[i].Mark(), item_path, "expected a value, got " + describe(node[i]));
        all_ok = false;
        continue;
      }
      all_ok = item(node[i].Scalar(), node[i].Mark(), item_path) && all_ok;
    }
    return all_ok;
  }

  // A list of mappings: `item(section, index)` for each (a section of its
  // own, so unknown keys are named with their index).
  template <class F>
  bool sections(std::string_view key, F&& item) {
    auto found = find(key);
    if (!found) return false;
    const auto& [node, mark] = *found;
    const std::string path = path_of(key);
    if (!node.IsSequence()) {
      diag_.fail(mark, path, "expected a list of mappings, got " + describe(node));
      return false;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      item(section(diag_, node[i], item_path, node[i].Mark()), i, node[i].Mark());
    }
    return true;
  }
  // The raw node of `key` (marked as known), for values of several shapes.
  std::optional<std::pair<YAML::Node, YAML::Mark>> raw(std::string_view key) { return find(key); }

  // Reports every key that no reader asked for.
  void finish() {
    if (!is_map_) return;
    for (const auto& entry : node_) {
      if (!entry.first.IsScalar() || known_.count(entry.first.Scalar())) continue;
      std::string expected;
      for (const auto& k : known_) expected += (expected.empty() ? "" : ", ") + k;
      diag_.fail(entry.first.Mark(), path_of(entry.first.Scalar()),
                 "unknown key (expected one of: " + expected + ")");
    }
  }

 private:
  template <class F>
  void scalar(std::string_view key, F&& parse) {
    auto found = find(key);
    if (!found) return;
    const auto& [node, mark] = *found;
    const std::string path = path_of(key);
    if (!node.IsScalar()) {
      diag_.fail(mark, path, "expected a value, got " + describe(node));
      return;
    }
    parse(node.Scalar(), mark, path);
  }

  diagnostics& diag_;
  YAML::Node node_;
  bool is_map_ = false;
  std::string path_;
  YAML::Mark mark_;
  std::set<std::string, std::less<>> known_;
};

// --- sections ---------------------------------------------------------------

std::optional<host_port> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  const auto port = parse_uint(std::string_view(text).substr(colon + 1));
  if (!port || *port == 0 || *port > 65535) return std::nullopt;
  return host_port{text.substr(0, colon), static_cast<uint16_t>(*port)};
}

void read_optimizer(section s, optimizer_config& o) {
  s.choice<optimizer_kind>("kind", o.kind,
                           {{"sgd", optimizer_kind::sgd},
                            {"adagrad", optimizer_kind::adagrad},
                            {"adam", optimizer_kind::adam},
                            {"ftrl", optimizer_kind::ftrl}});
  s.real("learning_rate", o.learning_rate, 0, 1e6, true);
  s.real("l2", o.l2, 0, 1e6);
  s.real("initial_accumulator", o.initial_accumulator, 0, 1e6);
  s.real("epsilon", o.epsilon, 0, 1, true);
  s.real("beta1", o.beta1, 0, 1, false, true);
  s.real("beta2", o.beta2, 0, 1, false, true);
  s.real("ftrl_alpha", o.ftrl_alpha, 0, 1e6, true);
  s.real("ftrl_beta", o.ftrl_beta, 0, 1e6);
  s.real("ftrl_l1", o.ftrl_l1, 0, 1e6);
  s.real("ftrl_l2", o.ftrl_l2, 0, 1e6);
  s.finish();
}

void read_initializer(section s, initializer_config& i) {
  s.choice<initializer_kind>("kind", i.kind,
                             {{"zeros", initializer_kind::zeros},
                              {"uniform", initializer_kind::uniform},
                              {"normal", initializer_kind::normal}});
  s.real("low", i.uniform_low, -1e6, 1e6);
  s.real("high", i.uniform_high, -1e6, 1e6);
  s.real("stddev", i.normal_stddev, 0, 1e6);
  s.finish();
}

// What the parse reads before building the cluster.
struct raw_manifest {
  std::string name = "local";
  actors::training_mode mode = actors::training_mode::async;
  uint32_t partitions = 4096;
  uint64_t pass_batches = 64;
  uint32_t threads = 0;

  table_config table;
  std::optional<uint32_t> table_dim;
  model::model_config model;
  std::optional<uint32_t> model_slots;

  uint32_t shard_count = 1;
  dram_tier_config dram;
  tier_chain_config chain;
  std::filesystem::path ssd_path;
  size_t map_bytes = size_t{1} << 40;
  bool lmdb_sync = false;
  size_t flush_batch_rows = 4096;
  uint32_t max_flushes_in_flight = 4;

  uint32_t cache_count = 1;
  cache_backend_choice cache_backend = cache_backend_choice::cpu;
  cache_geometry geometry;
  uint32_t staleness = 8;

  uint32_t worker_count = 1;
  actors::worker_config worker;

  model::reader_config data;
  bool has_csv = false;
  data_split split;
  std::optional<model::datagen_config> generate;

  actors::dense_config dense;
  metrics_settings metrics;
  std::vector<node_settings> nodes;
  std::vector<YAML::Mark> node_marks;
  std::vector<std::string> placement;  // one node name per shard; empty: spread
  std::vector<std::pair<std::string, YAML::Mark>> placement_marks;
  std::vector<std::string> cache_placement, worker_placement;
  std::vector<std::pair<std::string, YAML::Mark>> cache_placement_marks, worker_placement_marks;
  transport_settings transport;
  gateway_settings gateway;
  admin_settings admin;
  std::string admin_token_file;
  actors::checkpoint_settings checkpoint;
  serving_settings serving;
  updates_settings updates;
  failure_policy on_failure = failure_policy::stop;
  uint32_t max_restarts = 3;
  actors::gradient_kind objective = actors::gradient_kind::ctr;
};

void read_top(section& root, raw_manifest& r) {
  root.text("name", r.name);
  root.choice<actors::training_mode>(
      "mode", r.mode,
      {{"async", actors::training_mode::async}, {"pass", actors::training_mode::pass}});
  root.unsigned_int("partitions", r.partitions, 1, 1u << 24);
  root.unsigned_int("pass_batches", r.pass_batches, 1);
  root.unsigned_int("threads", r.threads, 0, 1024);
}

void read_table(section s, raw_manifest& r) {
  s.text("name", r.table.name);
  uint32_t dim = 0;
  if (s.has("dim")) {
    s.unsigned_int("dim", dim, 1, max_row_dim);
    if (dim != 0) r.table_dim = dim;
  }
  s.unsigned_int("seed", r.table.initializer.seed);
  read_optimizer(s.child("optimizer"), r.table.optimizer);
  read_initializer(s.child("initializer"), r.table.initializer);
  s.finish();
}

void read_model(section s, raw_manifest& r) {
  s.unsigned_int("embedding_dim", r.model.embedding_dim, 1, max_row_dim - 1);
  std::vector<uint32_t> hidden;
  if (s.list("hidden", [&](const std::string& text, const YAML::Mark& mark,
                           const std::string& path) {
        auto v = parse_uint(text);
        if (!v || *v == 0 || *v > 65536) {
          s.diag().fail(mark, path, "expected a layer width in [1, 65536], got " + in_quotes(text));
          return false;
        }
        hidden.push_back(static_cast<uint32_t>(*v));
        return true;
      })) {
    r.model.hidden = hidden;
  }
  uint32_t slots = 0;
  if (s.has("slots")) {
    s.unsigned_int("slots", slots, 1, 1u << 16);
    if (slots != 0) r.model_slots = slots;
  }
  s.unsigned_int("seed", r.model.seed);
  s.choice<actors::gradient_kind>(
      "objective", r.objective,
      {{"ctr", actors::gradient_kind::ctr}, {"count", actors::gradient_kind::count}});
  s.finish();
}

void read_checkpoint(section s, raw_manifest& r) {
  s.path_value("dir", r.checkpoint.directory);
  s.unsigned_int("interval_batches", r.checkpoint.interval_batches);
  s.unsigned_int("interval_seconds", r.checkpoint.interval_seconds, 0, 7 * 24 * 3600);
  s.unsigned_int("keep", r.checkpoint.keep, 1, 1000);
  s.boolean("at_stop", r.checkpoint.at_stop);
  s.unsigned_int("round_batches", r.checkpoint.round_batches);
  s.choice<failure_policy>("on_failure", r.on_failure,
                           {{"stop", failure_policy::stop}, {"restart", failure_policy::restart}});
  s.unsigned_int("max_restarts", r.max_restarts, 0, 1000);
  s.finish();
}

// `placement`: "spread" or one node name per actor, into names/marks.
void read_placement(section& s, std::vector<std::string>& names,
                    std::vector<std::pair<std::string, YAML::Mark>>& marks);

void read_shards(section s, raw_manifest& r) {
  s.unsigned_int("count", r.shard_count, 1, 4096);
  s.size("dram_bytes", r.dram.capacity_bytes);
  s.choice<eviction_policy>("eviction", r.dram.policy,
                            {{"lru", eviction_policy::lru}, {"lfu", eviction_policy::lfu}});
  s.unsigned_int("ttl_ticks", r.dram.ttl_ticks);
  s.unsigned_int("admission_threshold", r.chain.admission_threshold);
  s.require("ssd_path");
  s.path_value("ssd_path", r.ssd_path);
  s.size("map_bytes", r.map_bytes);
  s.boolean("sync", r.lmdb_sync);
  s.unsigned_int("flush_batch_rows", r.flush_batch_rows, 1, 1u << 24);
  s.unsigned_int("max_flushes_in_flight", r.max_flushes_in_flight, 1, 1024);
  read_placement(s, r.placement, r.placement_marks);
  s.finish();
}

void read_caches(section s, raw_manifest& r) {
  s.unsigned_int("count", r.cache_count, 1, 1024);
  read_placement(s, r.cache_placement, r.cache_placement_marks);
  s.choice<cache_backend_choice>(
      "backend", r.cache_backend,
      {{"cpu", cache_backend_choice::cpu}, {"gpu", cache_backend_choice::gpu}});
  s.unsigned_int("sets", r.geometry.sets, 1, 1u << 26);
  s.unsigned_int("slabs_per_set", r.geometry.slabs_per_set, 1, 64);
  s.unsigned_int("staleness", r.staleness);
  s.finish();
}

void read_workers(section s, raw_manifest& r) {
  s.unsigned_int("count", r.worker_count, 0, 4096);
  read_placement(s, r.worker_placement, r.worker_placement_marks);
  s.unsigned_int("batch_size", r.worker.batch_size, 1, 1u << 20);
  s.unsigned_int("prefetch_depth", r.worker.prefetch_depth, 0, 1024);
  s.unsigned_int("max_in_flight", r.worker.max_in_flight, 1, 1024);
  s.unsigned_int("pull_dense_every", r.worker.pull_dense_every, 1);
  s.unsigned_int("max_batches", r.worker.max_batches);
  s.unsigned_int("epochs", r.worker.epochs, 1, 1000);
  s.finish();
}

void read_csv(section s, model::csv_columns& c) {
  diagnostics& diag = s.diag();
  s.text("label", c.label);
  auto names = [&](std::vector<std::string>& out) {
    return [&out, &diag](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      if (text.empty()) {
        diag.fail(mark, path, "column names must not be empty");
        return false;
      }
      out.push_back(text);
      return true;
    };
  };
  s.list("integer", names(c.integer));
  s.list("categorical", names(c.categorical));
  s.finish();
}

void read_generate(section s, model::datagen_config& g) {
  s.unsigned_int("rows", g.rows, 1);
  s.unsigned_int("distinct_keys", g.distinct_keys, datagen_slots);
  s.unsigned_int("seed", g.seed);
  s.real("zipf", g.zipf, 0, 10, true);
  s.real("weight_stddev", g.weight_stddev, 0, 100);
  s.real("bias", g.bias, -100, 100);
  s.finish();
}

void read_data(section s, raw_manifest& r) {
  s.choice<model::data_format>("format", r.data.format,
                               {{"criteo_tsv", model::data_format::criteo_tsv},
                                {"csv", model::data_format::csv},
                                {"libffm", model::data_format::libffm}});
  s.require("path");
  s.path_value("path", r.data.path);
  if (s.has("csv")) {
    r.has_csv = true;
    read_csv(s.child("csv"), r.data.columns);
  }
  s.unsigned_int("max_bad_lines", r.data.max_bad_lines);
  s.real("heldout_fraction", r.split.heldout_fraction, 0, 1, false, true);
  s.unsigned_int("train_examples", r.split.train_examples);
  s.unsigned_int("heldout_examples", r.split.heldout_examples);
  if (s.has("generate")) {
    r.generate.emplace();
    read_generate(s.child("generate"), *r.generate);
  }
  s.finish();
}

void read_dense(section s, raw_manifest& r) {
  s.real("learning_rate", r.dense.learning_rate, 0, 1e6, true);
  s.real("beta1", r.dense.beta1, 0, 1, false, true);
  s.real("beta2", r.dense.beta2, 0, 1, false, true);
  s.real("epsilon", r.dense.epsilon, 0, 1, true);
  s.finish();
}

void read_serving(section s, raw_manifest& r) {
  serving_settings& v = r.serving;
  v.present = true;
  s.path_value("checkpoint", v.checkpoint);
  s.path_value("lmdb_path", v.lmdb_path);
  s.choice<std::string>("cache_backend", v.cache_backend, {{"cpu", "cpu"}, {"gpu", "gpu"}});
  s.unsigned_int("cache_sets", v.cache_sets, 1, 1u << 26);
  s.unsigned_int("cache_slabs_per_set", v.cache_slabs_per_set, 1, 64);
  s.size("dram_bytes", v.dram_bytes);
  s.text("bind_address", v.bind_address);
  s.unsigned_int("binary_port", v.binary_port);
  s.unsigned_int("http_port", v.http_port);
  s.unsigned_int("transport_port", v.transport_port);
  s.real("default_value", v.default_value, -1e30, 1e30);
  s.real("async_insert_hit_rate", v.async_insert_hit_rate, 0.0, 1.0);
  s.unsigned_int("hit_rate_window", v.hit_rate_window, 1, 1u << 30);
  s.unsigned_int("warmup_keys", v.warmup_keys, 0, 1u << 30);
  s.unsigned_int("max_request_keys", v.max_request_keys, 1, 1u << 26);
  s.size("max_http_body_bytes", v.max_http_body_bytes);
  s.list("replicas", [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
    auto hp = parse_host_port(text);
    if (!hp) {
      s.diag().fail(mark, path, "expected host:port, got " + in_quotes(text));
      return false;
    }
    v.replicas.push_back(*hp);
    return true;
  });
  // One publisher (host:port), or a list: a training cluster of several
  // nodes publishes each node's shards' updates on that node.
  auto add_publisher = [&](const std::string& text, const YAML::Mark& mark,
                           const std::string& path) {
    auto hp = parse_host_port(text);
    if (!hp) {
      s.diag().fail(mark, path, "expected host:port, got " + in_quotes(text));
      return false;
    }
    v.subscribe.push_back(*hp);
    return true;
  };
  if (auto found = s.raw("subscribe"); found && found->first.IsScalar())
    add_publisher(found->first.Scalar(), found->second, s.path_of("subscribe"));
  else
    s.list("subscribe", add_publisher);
  s.finish();
}

void read_updates(section s, raw_manifest& r) {
  r.updates.present = true;
  s.text("bind_address", r.updates.bind_address);
  s.unsigned_int("port", r.updates.port);
  s.unsigned_int("interval_ms", r.updates.interval_ms, 1, 3600 * 1000);
  s.unsigned_int("max_rows", r.updates.max_rows, 1, 1u << 24);
  s.finish();
}

void read_nodes(section& top, raw_manifest& r) {
  top.sections("nodes", [&r](section n, size_t, const YAML::Mark& mark) {
    node_settings node;
    n.require("name");
    n.text("name", node.name);
    n.require("host");
    n.text("host", node.host);
    n.unsigned_int("transport_port", node.transport_port);
    n.unsigned_int("devices", node.devices, 0, 64);
    n.size("dram_bytes", node.dram_bytes);
    n.path_value("ssd_path", node.ssd_path);
    n.unsigned_int("metrics_port", node.metrics_port);
    n.unsigned_int("admin_port", node.admin_port);
    n.unsigned_int("updates_port", node.updates_port);
    n.finish();
    r.nodes.push_back(node);
    r.node_marks.push_back(mark);
  });
}

void read_placement(section& s, std::vector<std::string>& names,
                    std::vector<std::pair<std::string, YAML::Mark>>& marks) {
  auto found = s.raw("placement");
  if (!found) return;
  const auto& [node, mark] = *found;
  const std::string path = s.path_of("placement");
  if (node.IsScalar()) {
    if (node.Scalar() != "spread")
      s.diag().fail(mark, path,
                    "expected \"spread\" or a list of node names, got \"" + node.Scalar() + "\"");
    return;
  }
  if (!node.IsSequence()) {
    s.diag().fail(mark, path, "expected \"spread\" or a list of node names");
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (!node[i].IsScalar() || node[i].Scalar().empty()) {
      s.diag().fail(node[i].Mark(), path + "[" + std::to_string(i) + "]", "expected a node name");
      continue;
    }
    names.push_back(node[i].Scalar());
    marks.emplace_back(path + "[" + std::to_string(i) + "]", node[i].Mark());
  }
}

void read_gateway(section s, raw_manifest& r) {
  s.unsigned_int("port", r.gateway.port);
  s.unsigned_int("transport_port", r.gateway.transport_port);
  s.text("bind_address", r.gateway.bind_address);
  s.unsigned_int("max_request_keys", r.gateway.max_request_keys, 1, 1u << 26);
  s.finish();
}

void read_transport(section s, raw_manifest& r) {
  s.unsigned_int("heartbeat_interval_ms", r.transport.heartbeat_interval_ms, 10, 600000);
  s.unsigned_int("heartbeat_timeout_ms", r.transport.heartbeat_timeout_ms, 100, 3600000);
  s.unsigned_int("join_timeout_seconds", r.transport.join_timeout_seconds, 1, 3600);
  s.size("max_outstanding_bytes", r.transport.max_outstanding_bytes);
  s.finish();
}

void read_admin(section s, raw_manifest& r) {
  s.unsigned_int("port", r.admin.port);
  s.text("bind_address", r.admin.bind_address);
  s.text("token", r.admin.token);
  s.text("token_file", r.admin_token_file);
  s.boolean("create_if_missing", r.admin.create_if_missing);
  s.finish();
}

void read_metrics(section s, raw_manifest& r) {
  s.unsigned_int("port", r.metrics.port);
  s.text("bind_address", r.metrics.bind_address);
  s.text("node", r.metrics.node);
  s.unsigned_int("linger_seconds", r.metrics.linger_seconds, 0, 24 * 3600);
  s.finish();
}

// --- cross-field rules --------------------------------------------------------

uint32_t reader_slots(const raw_manifest& r) {
  switch (r.data.format) {
    case model::data_format::criteo_tsv:
      return criteo_slots;
    case model::data_format::csv:
      return static_cast<uint32_t>(r.data.columns.integer.size() +
                                   r.data.columns.categorical.size());
    case model::data_format::libffm:
      return 0;  // fields are whatever the file holds
  }
  return 0;
}

void check_rules(const raw_manifest& r, diagnostics& diag) {
  std::set<std::string> node_names;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const auto& n = r.nodes[i];
    const std::string path = "nodes[" + std::to_string(i) + "]";
    if (!n.name.empty() && !node_names.insert(n.name).second)
      diag.fail(r.node_marks[i], path + ".name", "duplicate node name \"" + n.name + "\"");
    if (n.dram_bytes != 0 && n.dram_bytes < r.dram.capacity_bytes)
      diag.fail(r.node_marks[i], path + ".dram_bytes",
                "node budget " + format_size(n.dram_bytes) + " cannot hold one shard's " +
                    "shards.dram_bytes (" + format_size(r.dram.capacity_bytes) + ")");
  }
  auto check_placement = [&](const std::vector<std::string>& names,
                             const std::vector<std::pair<std::string, YAML::Mark>>& marks,
                             const std::string& what, const std::string& section,
                             uint32_t count) {
    for (size_t i = 0; i < names.size(); ++i)
      if (!node_names.count(names[i]))
        diag.fail(marks[i].second, marks[i].first,
                  what + " " + std::to_string(i) + " placed on unknown node \"" + names[i] + "\"" +
                      (r.nodes.empty() ? " (the manifest has no nodes list)" : ""));
    if (!names.empty() && names.size() != count)
      diag.fail_at(section + ".placement", "names " + std::to_string(names.size()) +
                                               " nodes for " + section + ".count " +
                                               std::to_string(count) + " " + section);
  };
  check_placement(r.placement, r.placement_marks, "shard", "shards", r.shard_count);
  check_placement(r.cache_placement, r.cache_placement_marks, "cache tier", "caches",
                  r.cache_count);
  check_placement(r.worker_placement, r.worker_placement_marks, "worker", "workers",
                  r.worker_count);
  if (r.worker_count == 0 && r.gateway.port == 0)
    diag.fail_at("workers.count",
                 "0 workers (a store that clients train through) needs gateway.port, where "
                 "their lookups and pushes arrive");
  if (r.worker_count == 0 && r.mode != actors::training_mode::async)
    diag.fail_at("workers.count", "0 workers needs mode: async (clients push to the shards)");
  if (r.transport.heartbeat_timeout_ms <= r.transport.heartbeat_interval_ms)
    diag.fail_at("transport.heartbeat_timeout_ms",
                 "must be longer than transport.heartbeat_interval_ms (" +
                     std::to_string(r.transport.heartbeat_interval_ms) + " ms), got " +
                     std::to_string(r.transport.heartbeat_timeout_ms) + " ms");
  if (r.nodes.size() > 1) {
    std::set<std::pair<std::string, uint16_t>> listeners;
    for (size_t i = 0; i < r.nodes.size(); ++i) {
      const auto& n = r.nodes[i];
      if (n.transport_port != 0 && !listeners.insert({n.host, n.transport_port}).second)
        diag.fail(r.node_marks[i], "nodes[" + std::to_string(i) + "].transport_port",
                  "node \"" + n.name + "\" listens on " + n.host + ":" +
                      std::to_string(n.transport_port) + ", as another node does");
    }
  }
  if (r.admin.port != 0 && r.admin.token.empty() && r.admin_token_file.empty())
    diag.fail_at(
        "admin.port",
        "the admin API needs admin.token or admin.token_file (requests without it get 401)");
  if (!r.admin.token.empty() && !r.admin_token_file.empty())
    diag.fail_at("admin.token", "give admin.token or admin.token_file, not both");
  if (r.admin.create_if_missing && r.admin_token_file.empty())
    diag.fail_at("admin.create_if_missing", "needs admin.token_file (the file to create)");
  const uint32_t row_dim = r.model.row_dim();
  if (r.table_dim && *r.table_dim != row_dim)
    diag.fail_at("table.dim", "must be model.embedding_dim + 1 = " + std::to_string(row_dim) +
                                  " (element 0 is the linear weight), got " +
                                  std::to_string(*r.table_dim));
  if (r.mode == actors::training_mode::async &&
      r.staleness < r.worker.prefetch_depth + r.worker.max_in_flight)
    diag.fail_at("caches.staleness",
                 "async mode needs staleness >= workers.prefetch_depth + workers.max_in_flight (" +
                     std::to_string(r.worker.prefetch_depth) + " + " +
                     std::to_string(r.worker.max_in_flight) + " = " +
                     std::to_string(r.worker.prefetch_depth + r.worker.max_in_flight) + "), got " +
                     std::to_string(r.staleness));
  if (r.partitions < r.shard_count)
    diag.fail_at("partitions", "must be >= shards.count (" + std::to_string(r.shard_count) +
                                   "): every shard owns at least one partition");
  const row_layout layout{row_dim, r.table.optimizer.kind, true};
  const size_t one_row = dram_tier::budget_for_rows(layout, r.dram.policy, 1);
  if (r.dram.capacity_bytes < one_row)
    diag.fail_at("shards.dram_bytes", "too small to hold one row (" + std::to_string(one_row) +
                                          " bytes at row dim " + std::to_string(row_dim) + ")");
  if (r.table.initializer.kind == initializer_kind::uniform &&
      !(r.table.initializer.uniform_low < r.table.initializer.uniform_high))
    diag.fail_at("table.initializer.high", "must be greater than table.initializer.low");

  const bool is_csv = r.data.format == model::data_format::csv;
  if (is_csv && (!r.has_csv || reader_slots(r) == 0))
    diag.fail_at("data.csv", "format csv needs csv.integer and/or csv.categorical column names");
  if (!is_csv && r.has_csv) diag.fail_at("data.csv", "only used with format: csv");
  if (r.data.format == model::data_format::libffm && !r.model_slots)
    diag.fail_at("model.slots", "format libffm needs model.slots (fields per example)");
  if (r.model_slots && reader_slots(r) != 0 && *r.model_slots < reader_slots(r))
    diag.fail_at("model.slots", "the data has " + std::to_string(reader_slots(r)) +
                                    " slots; model.slots must be at least that");
  if (diag.written("checkpoint") && r.checkpoint.directory.empty())
    diag.fail_at("checkpoint.dir", "required when a checkpoint section is given");
  if (r.on_failure == failure_policy::restart && r.checkpoint.directory.empty())
    diag.fail_at("checkpoint.on_failure",
                 "restart needs checkpoint.dir (a restart resumes from the latest checkpoint)");
  if (r.objective == actors::gradient_kind::count &&
      (r.table.optimizer.kind != optimizer_kind::sgd || r.table.optimizer.learning_rate != 1.0f ||
       r.table.initializer.kind != initializer_kind::zeros))
    diag.fail_at("model.objective",
                 "count needs table.optimizer.kind: sgd, learning_rate: 1 and "
                 "table.initializer.kind: zeros (every weight then counts its key's sightings)");
  if (r.generate && r.data.format != model::data_format::criteo_tsv)
    diag.fail_at("data.generate", "datagen writes criteo_tsv; set data.format: criteo_tsv");
  if (diag.written("data.train_examples") && diag.written("data.heldout_fraction"))
    diag.fail_at("data.train_examples", "give either data.train_examples or data.heldout_fraction");
  if (diag.written("data.train_examples") && r.split.train_examples < r.worker_count)
    diag.fail_at("data.train_examples",
                 "must be >= workers.count (" + std::to_string(r.worker_count) + ")");
  if (r.generate && !diag.written("data.train_examples")) {
    // The generated file's split is known now: check it feeds every worker.
    const uint64_t heldout = static_cast<uint64_t>(
        std::floor(static_cast<double>(r.generate->rows) * r.split.heldout_fraction));
    if (r.generate->rows - heldout < r.worker_count)
      diag.fail_at("data.generate.rows", "leaves fewer training examples than workers.count");
  }
}

// Fills the windows; `examples` is the file's example count when known.
expected<void> apply_split(manifest& m, std::optional<uint64_t> examples) {
  auto& c = m.cluster;
  const uint32_t workers = static_cast<uint32_t>(c.workers.size());
  uint64_t train = m.split.train_examples;
  if (train == 0) {
    if (!examples) return error(errc::invalid_argument, "data split needs the example count");
    const auto heldout = static_cast<uint64_t>(
        std::floor(static_cast<double>(*examples) * m.split.heldout_fraction));
    train = *examples - heldout;
  }
  if (examples && train > *examples)
    return error(errc::invalid_argument, m.file.string() +
                                             ": data.train_examples: " + std::to_string(train) +
                                             " exceeds the " + std::to_string(*examples) +
                                             " examples in " + m.data.path.string());
  if (train < workers)
    return error(errc::invalid_argument,
                 m.file.string() + ": data: the training window (" + std::to_string(train) +
                     " examples of " + m.data.path.string() + ") is smaller than workers.count (" +
                     std::to_string(workers) + ")");
  for (uint32_t w = 0; w < workers; ++w) {
    auto& reader = c.workers[w].data;
    reader = m.data;
    reader.shard_index = w;
    reader.shard_count = workers;
    reader.skip = 0;
    reader.limit = (train - w + workers - 1) / workers;  // lines w, w + W, ... below `train`
  }
  const bool has_heldout = !examples || train < *examples;
  const bool wants_heldout = m.split.train_examples != 0 || m.split.heldout_fraction > 0;
  c.heldout = model::reader_config{};
  if (has_heldout && wants_heldout) {
    c.heldout = m.data;
    c.heldout.shard_index = 0;
    c.heldout.shard_count = 1;
    c.heldout.skip = train;
    c.heldout.limit = m.split.heldout_examples;
  }
  c.heldout_examples = m.split.heldout_examples;
  m.split_resolved = true;
  return {};
}

manifest build(const raw_manifest& r, const std::string& file) {
  manifest m;
  m.file = file;
  m.data = r.data;
  m.split = r.split;
  m.ssd_path = r.ssd_path;
  m.cache_backend = r.cache_backend;
  m.metrics = r.metrics;
  m.serving = r.serving;
  m.updates = r.updates;
  if (m.serving.present && m.serving.lmdb_path.empty())
    m.serving.lmdb_path = r.ssd_path / "serving";
  m.admin = r.admin;
  m.nodes = r.nodes;
  m.placement = r.placement;
  m.transport = r.transport;
  m.gateway = r.gateway;
  // Who hosts what: listed names, else dealt round-robin over the nodes.
  if (!r.nodes.empty()) {
    auto resolve = [&r](const std::vector<std::string>& listed, uint32_t count) {
      if (!listed.empty()) return listed;
      std::vector<std::string> out;
      for (uint32_t i = 0; i < count; ++i) out.push_back(r.nodes[i % r.nodes.size()].name);
      return out;
    };
    m.shard_nodes = resolve(r.placement, r.shard_count);
    m.cache_nodes = resolve(r.cache_placement, r.cache_count);
    m.worker_nodes = resolve(r.worker_placement, r.worker_count);
  }
  m.admin.token_file = r.admin_token_file;
  if (m.metrics.node.empty()) m.metrics.node = r.name;
  m.on_failure = r.on_failure;
  m.max_restarts = r.max_restarts;
  if (r.generate) {
    m.generate = *r.generate;
    m.generate->output = r.data.path;
  }
  auto& c = m.cluster;
  c.name = r.name;
  c.mode = r.mode;
  c.partitions = r.partitions;
  c.pass_batches = r.pass_batches;
  c.threads = r.threads;
  c.dense = r.dense;
  c.model = r.model;
  c.checkpoint = r.checkpoint;
  c.gradients = r.objective;
  if (r.model_slots)
    c.model.slots = *r.model_slots;
  else if (reader_slots(r) != 0)
    c.model.slots = reader_slots(r);
  c.table = r.table;
  c.table.layout = row_layout{c.model.row_dim(), r.table.optimizer.kind, true};

  for (uint32_t i = 0; i < r.shard_count; ++i) {
    actors::shard_config s;
    s.index = i;
    s.table = c.table;
    s.dram = r.dram;
    s.chain = r.chain;
    s.lmdb.directory = shard_directory(r.ssd_path, i);
    // On a node with its own ssd_path, the shard's environment lives there.
    if (!m.shard_nodes.empty()) {
      for (const auto& n : r.nodes)
        if (n.name == m.shard_nodes[i] && !n.ssd_path.empty())
          s.lmdb.directory = shard_directory(n.ssd_path, i);
    }
    s.lmdb.table = c.table.name;
    s.lmdb.partitions = r.partitions;
    s.lmdb.map_bytes = r.map_bytes;
    s.lmdb.sync = r.lmdb_sync;
    s.flush_batch_rows = r.flush_batch_rows;
    s.max_flushes_in_flight = r.max_flushes_in_flight;
    c.shards.push_back(std::move(s));
  }
  for (uint32_t i = 0; i < r.cache_count; ++i) {
    actors::cache_config cc;
    cc.index = i;
    cc.table = c.table;
    cc.geometry = r.geometry;
    cc.staleness = r.staleness;
    c.caches.push_back(std::move(cc));
  }
  for (uint32_t w = 0; w < r.worker_count; ++w) {
    actors::worker_config wc = r.worker;
    wc.index = w;
    wc.data = r.data;
    wc.data.shard_index = w;
    wc.data.shard_count = r.worker_count;
    c.workers.push_back(std::move(wc));
  }
  return m;
}

}  // namespace

expected<std::string> admin_token(const manifest& m) {
  if (m.admin.token_file.empty()) return m.admin.token;
  std::ifstream in(m.admin.token_file);
  if (!in)
    return error(errc::io_error,
                 m.file.string() + ": admin.token_file: cannot read " +
                     m.admin.token_file.string() +
                     " (create it with the admin token, e.g. `openssl rand -hex 16 > " +
                     m.admin.token_file.string() + "`)");
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front())))
    token.erase(token.begin());
  if (token.empty())
    return error(errc::invalid_argument, m.file.string() + ": admin.token_file: " +
                                             m.admin.token_file.string() + " is empty");
  return token;
}

std::filesystem::path shard_directory(const std::filesystem::path& ssd_path, uint32_t index) {
  return ssd_path / ("shard-" + std::to_string(index));
}

expected<uint64_t> parse_size(std::string_view text) {
  const auto bad = [&] {
    return error(errc::invalid_argument, "expected a size like 64MiB, got " + in_quotes(text));
  };
  size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '_'))
    ++digits;
  const auto number = parse_uint(text.substr(0, digits));
  if (!number) return bad();
  std::string_view unit = text.substr(digits);
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static const std::pair<std::string_view, uint64_t> units[] = {
      {"", 1},
      {"B", 1},
      {"KiB", uint64_t{1} << 10},
      {"MiB", uint64_t{1} << 20},
      {"GiB", uint64_t{1} << 30},
      {"TiB", uint64_t{1} << 40},
      {"kB", 1000},
      {"KB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000},
      {"TB", uint64_t{1000} * 1000 * 1000 * 1000},
  };
  for (const auto& [name, factor] : units) {
    if (unit != name) continue;
    if (name.empty() && digits != text.size()) return bad();  // "64 " with no unit
    if (*number > std::numeric_limits<uint64_t>::max() / factor)
      return error(errc::invalid_argument, "size " + in_quotes(text) + " overflows 64 bits");
    return *number * factor;
  }
  return bad();
}

std::string format_size(uint64_t bytes) {
  static const std::pair<const char*, uint64_t> units[] = {{"TiB", uint64_t{1} << 40},
                                                           {"GiB", uint64_t{1} << 30},
                                                           {"MiB", uint64_t{1} << 20},
                                                           {"KiB", uint64_t{1} << 10}};
  for (const auto& [name, factor] : units)
    if (bytes != 0 && bytes % factor == 0) return std::to_string(bytes / factor) + " " + name;
  return std::to_string(bytes) + " B";
}

expected<manifest> parse_manifest(std::string_view text, const std::string& file_label) {
  diagnostics diag(file_label);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    diag.fail(e.mark, "", "YAML syntax: " + e.msg);
    return diag.to_error();
  }
  if (!root.IsDefined() || root.IsNull()) {
    diag.fail(YAML::Mark(), "", "the manifest is empty");
    return diag.to_error();
  }
  diag.remember("", root.Mark());
  raw_manifest r;
  try {
    section top(diag, root, "", root.Mark());
    read_top(top, r);
    read_nodes(top, r);
    read_table(top.child("table"), r);
    read_model(top.child("model"), r);
    top.require("shards");
    read_shards(top.child("shards"), r);
    read_caches(top.child("caches"), r);
    read_workers(top.child("workers"), r);
    // A cluster without workers (a store for clients' pushes) reads no data.
    if (r.worker_count > 0) top.require("data");
    if (top.has("data")) read_data(top.child("data"), r);
    read_dense(top.child("dense"), r);
    read_metrics(top.child("metrics"), r);
    read_admin(top.child("admin"), r);
    read_checkpoint(top.child("checkpoint"), r);
    read_transport(top.child("transport"), r);
    read_gateway(top.child("gateway"), r);
    if (top.has("serving")) read_serving(top.child("serving"), r);
    if (top.has("updates")) read_updates(top.child("updates"), r);
    top.finish();
  } catch (const YAML::Exception& e) {
    diag.fail(e.mark, "", e.msg);
  }
  if (!diag.ok()) return diag.to_error();
  check_rules(r, diag);
  if (!diag.ok()) return diag.to_error();

  manifest m = build(r, file_label);
  if (m.split.train_examples != 0) {
    auto split = apply_split(m, std::nullopt);
    if (!split) return split.err();
  }
  return m;
}

expected<manifest> load_manifest(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return error(errc::not_found, file.string() + ": cannot open the manifest");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error(errc::io_error, file.string() + ": cannot read the manifest");
  return parse_manifest(text.str(), file.string());
}

expected<void> apply_data_split(manifest& m, uint64_t data_examples) {
  return apply_split(m, data_examples);
}

expected<void> resolve_data_split(manifest& m) {
  if (m.split_resolved) return {};
  std::ifstream in(m.data.path, std::ios::binary);
  if (!in) return error(errc::not_found, m.data.path.string() + ": cannot open the data file");
  uint64_t lines = 0;
  bool pending = false;  // a last line without a newline
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    lines += static_cast<uint64_t>(std::count(buffer.data(), buffer.data() + got, '\n'));
    pending = buffer[got - 1] != '\n';
  }
  if (in.bad()) return error(errc::io_error, m.data.path.string() + ": read failed");
  if (pending) ++lines;
  if (m.data.format == model::data_format::csv && lines > 0) --lines;  // the header
  return apply_split(m, lines);
}

}  // namespace strata::deploy
