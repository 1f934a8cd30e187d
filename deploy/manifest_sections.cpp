// The per-section readers of the manifest (deploy/manifest_parse.hpp).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deploy/manifest_parse.hpp"
#include "deploy/manifest_reader.hpp"
#include "model/features.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::deploy::detail {
namespace {

// The widest row a table may have (weights per key); the tiers and the
// cache kernels are sized for it.
constexpr uint32_t max_row_dim = 4096;
// datagen spreads distinct_keys over 26 categorical slots.
constexpr uint64_t datagen_slots = 26;

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

// `placement`: "spread" or one node name per actor, into names/marks.
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

// A whole number that may be absent: nullopt when it is; a bad value is
// reported (the parse then fails) and comes back as `min`.
template <class T>
std::optional<T> optional_uint(section& s, std::string_view key, uint64_t min = 0,
                               uint64_t max = std::numeric_limits<T>::max()) {
  if (!s.has(key)) return std::nullopt;
  T value = static_cast<T>(min);
  s.unsigned_int(key, value, min, max);
  return value;
}

// What `table` and every `tables` entry hold alike: seed, optimizer, initializer.
void read_table_settings(section& s, table_config& t) {
  s.unsigned_int("seed", t.initializer.seed);
  read_optimizer(s.child("optimizer"), t.optimizer);
  read_initializer(s.child("initializer"), t.initializer);
}

// `model.slot_tables`: slot name -> table name.
void read_slot_tables(section& s, raw_manifest& r) {
  auto found = s.raw("slot_tables");
  if (!found) return;
  const auto& [node, mark] = *found;
  const std::string path = s.path_of("slot_tables");
  if (!node.IsMap()) {
    s.diag().fail(mark, path,
                  "expected a mapping of slot names to table names, got " + describe(node));
    return;
  }
  for (const auto& entry : node) {
    const std::string slot = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const std::string item_path = path + "." + slot;
    auto index = model::slot_index(slot);
    if (!index) {
      s.diag().fail(entry.first.Mark(), item_path, index.err().message());
      continue;
    }
    if (!entry.second.IsScalar() || entry.second.Scalar().empty()) {
      s.diag().fail(entry.first.Mark(), item_path,
                    "expected a table name, got " + describe(entry.second));
      continue;
    }
    r.slot_tables.push_back({slot, *index, entry.second.Scalar(), entry.first.Mark()});
  }
}

}  // namespace

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
  read_table_settings(s, r.table);
  s.finish();
}

void read_tables(section& top, raw_manifest& r) {
  const bool listed = top.sections("tables", [&r](section t, size_t i, const YAML::Mark& mark) {
    raw_table entry;
    entry.path = "tables[" + std::to_string(i) + "]";
    entry.mark = mark;
    t.require("name");
    t.text("name", entry.table.name);
    entry.dim = optional_uint<uint32_t>(t, "dim", 2, max_row_dim);
    read_table_settings(t, entry.table);
    entry.admission_threshold = optional_uint<uint32_t>(t, "admission_threshold");
    entry.ttl_ticks = optional_uint<uint32_t>(t, "ttl_ticks");
    if (t.has("dram_share")) {
      double share = 0;
      t.real("dram_share", share, 0, 1, true);
      if (share > 0) entry.dram_share = share;
    }
    t.finish();
    r.tables.push_back(std::move(entry));
  });
  if (listed && r.tables.empty()) top.diag().fail_at("tables", "must list at least one table");
  if (listed && top.has("table"))
    top.diag().fail_at("tables", "give table or tables, not both (table is a list of one)");
}

void apply_tables(raw_manifest& r) {
  if (r.tables.empty()) return;
  const raw_table& first = r.tables.front();
  r.table = first.table;
  r.table_path = first.path;
  if (first.dim) r.model.embedding_dim = *first.dim - 1;
  if (first.admission_threshold) r.chain.admission_threshold = *first.admission_threshold;
  if (first.ttl_ticks) r.dram.ttl_ticks = *first.ttl_ticks;
  if (first.dram_share)
    r.dram.capacity_bytes = static_cast<size_t>(double(r.dram.capacity_bytes) * *first.dram_share);
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
  read_slot_tables(s, r);
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
  s.unsigned_int("max_queued_flush_batches", r.max_queued_flush_batches, 1, 1024);
  s.unsigned_int("migration_rows_per_s", r.migration_rows_per_s);
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
  s.unsigned_int("lmdb_read_handles", v.lmdb_read_handles, 1, max_lmdb_read_handles);
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
  s.unsigned_int("max_retained_rows", r.updates.max_retained_rows, 0, uint64_t{1} << 32);
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
    n.boolean("standby", node.standby);
    n.finish();
    r.nodes.push_back(node);
    r.node_marks.push_back(mark);
  });
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

void read_cluster_secret(section s, raw_manifest& r) {
  r.has_cluster_secret = true;
  s.require("file");
  s.text("file", r.cluster_secret_file);
  s.boolean("create_if_missing", r.cluster_secret_create);
  s.finish();
}

void read_metrics(section s, raw_manifest& r) {
  s.unsigned_int("port", r.metrics.port);
  s.text("bind_address", r.metrics.bind_address);
  s.text("node", r.metrics.node);
  s.unsigned_int("linger_seconds", r.metrics.linger_seconds, 0, 24 * 3600);
  s.finish();
}

}  // namespace strata::deploy::detail
