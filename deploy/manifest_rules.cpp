// The rules between fields (docs/manifest.md, Rules between fields),
// checked once every field parsed (deploy/manifest_parse.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "deploy/manifest_parse.hpp"
#include "deploy/manifest_reader.hpp"
#include "tiers/dram_tier.hpp"

namespace strata::deploy::detail {
namespace {

// Slots the readers produce per example, by format (features.hpp).
constexpr uint32_t criteo_slots = 13 + 26;

// `inner` is `outer` or below it (lexically, after making both absolute).
bool within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  const auto a = std::filesystem::absolute(inner).lexically_normal();
  const auto b = std::filesystem::absolute(outer).lexically_normal();
  auto i = a.begin();
  for (auto j = b.begin(); j != b.end(); ++j, ++i) {
    if (j->empty()) continue;  // a trailing separator
    if (i == a.end() || *i != *j) return false;
  }
  return true;
}

// `inner` (within `outer`) is a shard's environment or below one.
bool shard_part(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  const auto rel = std::filesystem::absolute(inner).lexically_normal().lexically_relative(
      std::filesystem::absolute(outer).lexically_normal());
  return !rel.empty() && rel.begin()->string().rfind("shard-", 0) == 0;
}

// serving.lmdb_path is emptied at every serve: it must not be, hold or sit
// inside what training keeps (issue 16 item 5). Inside ssd_path is fine
// (the default, ssd_path/serving), but not inside a shard's environment.
void check_serving_path(const raw_manifest& r, diagnostics& diag) {
  if (!r.serving.present || r.serving.lmdb_path.empty()) return;
  const auto& p = r.serving.lmdb_path;
  const std::string refuse = p.string() + " would be emptied by strata serve but ";
  std::vector<std::pair<std::string, std::filesystem::path>> ssd{{"shards.ssd_path", r.ssd_path}};
  for (size_t i = 0; i < r.nodes.size(); ++i)
    if (!r.nodes[i].ssd_path.empty())
      ssd.push_back({"nodes[" + std::to_string(i) + "].ssd_path", r.nodes[i].ssd_path});
  for (const auto& [field, dir] : ssd) {
    if (dir.empty()) continue;
    if (within(dir, p))
      diag.fail_at("serving.lmdb_path", refuse + "holds " + field + " (" + dir.string() +
                                            "); use a directory of its own, e.g. " +
                                            (dir / "serving").string());
    else if (within(p, dir) && shard_part(p, dir))
      diag.fail_at("serving.lmdb_path", refuse + "is inside a shard environment of " + field +
                                            " (" + dir.string() + "); use e.g. " +
                                            (dir / "serving").string());
  }
  for (const auto& [field, ckpt] :
       {std::pair<std::string, std::filesystem::path>{"checkpoint.dir", r.checkpoint.directory},
        {"serving.checkpoint", r.serving.checkpoint}})
    if (!ckpt.empty() && (within(ckpt, p) || within(p, ckpt)))
      diag.fail_at("serving.lmdb_path", refuse + (within(ckpt, p) ? "holds " : "is inside ") +
                                            field + " (" + ckpt.string() +
                                            "); use a directory of its own, e.g. "
                                            "ssd_path/serving");
}

// `table` / `tables` and `model.slot_tables` (docs/manifest.md, "tables").
void check_tables(const raw_manifest& r, diagnostics& diag) {
  // The tables as listed; `table:` is a list of one.
  std::vector<raw_table> tables = r.tables;
  if (tables.empty()) {
    raw_table single;
    single.table = r.table;
    single.path = "table";
    single.mark = diag.mark_of("table");
    tables.push_back(single);
  }
  std::set<std::string> names;
  double shares = 0;
  for (const auto& t : tables) {
    const auto& init = t.table.initializer;
    if (init.kind == initializer_kind::uniform && !(init.uniform_low < init.uniform_high))
      diag.fail_at(t.path + ".initializer.high",
                   "must be greater than " + t.path + ".initializer.low");
    if (!t.table.name.empty() && !names.insert(t.table.name).second)
      diag.fail(t.mark, t.path + ".name",
                "duplicate table name \"" + t.table.name +
                    "\" (a table's name is its LMDB database and what requests name)");
    if (t.dram_share) {
      shares += *t.dram_share;
      if (shares > 1.0 + 1e-9) {
        std::ostringstream sum;
        sum << shares;
        diag.fail_at(t.path + ".dram_share",
                     "the tables' dram_share add up to more than 1 (" + sum.str() +
                         " with this table's)");
      }
    }
  }
  // The storage, the model, checkpoints and serving keep one table per
  // cluster today: a second table is refused, named, rather than ignored.
  if (tables.size() > 1)
    diag.fail(tables[1].mark, tables[1].path,
              "table \"" + tables[1].table.name + "\": this build stores, trains and serves one " +
                  "table per cluster (" + std::to_string(tables.size()) +
                  " listed): list one, which every slot's features share, kept apart by "
                  "slot as today (docs/manifest.md, \"tables\")");
  const uint32_t slots = r.model_slots ? *r.model_slots : reader_slots(r);
  std::set<uint32_t> mapped;
  for (const auto& st : r.slot_tables) {
    const std::string path = "model.slot_tables." + st.slot;
    if (!names.count(st.table)) {
      std::string listed;
      for (const auto& t : tables) listed += (listed.empty() ? "" : ", ") + t.table.name;
      diag.fail(st.mark, path,
                "unknown table \"" + st.table + "\" (the manifest's tables: " + listed + ")");
    }
    if (slots != 0 && st.index >= slots)
      diag.fail(st.mark, path,
                "slot " + st.slot + " is slot " + std::to_string(st.index) + ", but the model has " +
                    std::to_string(slots) + " slots (0.." + std::to_string(slots - 1) + ")");
    if (!mapped.insert(st.index).second)
      diag.fail(st.mark, path,
                "slot " + st.slot + " (slot " + std::to_string(st.index) + ") is mapped twice");
  }
}

}  // namespace

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
  check_serving_path(r, diag);
  std::set<std::string> node_names;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const auto& n = r.nodes[i];
    const std::string path = "nodes[" + std::to_string(i) + "]";
    if (!n.name.empty() && !node_names.insert(n.name).second)
      diag.fail(r.node_marks[i], path + ".name", "duplicate node name \"" + n.name + "\"");
    // A standby node joins a running cluster (docs/multi-node.md, "Nodes
    // that join later"): the cluster must start without it.
    if (n.standby && i == 0)
      diag.fail_at(path + ".standby",
                   "node \"" + n.name +
                       "\" is the first node, which runs the coordinator: it cannot be standby "
                       "(list a standby node after it)");
    if (n.standby && n.transport_port == 0)
      diag.fail(r.node_marks[i], path + ".transport_port",
                "standby node \"" + n.name +
                    "\" needs a fixed transport port (its peers accept it there, and it dials "
                    "them from it)");
    if (n.dram_bytes != 0 && n.dram_bytes < r.dram.capacity_bytes)
      diag.fail(r.node_marks[i], path + ".dram_bytes",
                "node budget " + format_size(n.dram_bytes) + " cannot hold one shard's " +
                    "shards.dram_bytes (" + format_size(r.dram.capacity_bytes) + ")");
  }
  // A node whose name did not parse (reported) would make every placement
  // on it look unknown.
  const bool all_named = std::all_of(r.nodes.begin(), r.nodes.end(),
                                     [](const node_settings& n) { return !n.name.empty(); });
  std::set<std::string> standby_names;
  for (const auto& n : r.nodes)
    if (n.standby) standby_names.insert(n.name);
  auto check_placement = [&](const std::vector<std::string>& names,
                             const std::vector<std::pair<std::string, YAML::Mark>>& marks,
                             const std::string& what, const std::string& section,
                             uint32_t count) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (all_named && !node_names.count(names[i]))
        diag.fail(marks[i].second, marks[i].first,
                  what + " " + std::to_string(i) + " placed on unknown node \"" + names[i] + "\"" +
                      (r.nodes.empty() ? " (the manifest has no nodes list)" : ""));
      else if (standby_names.count(names[i]))
        diag.fail(marks[i].second, marks[i].first,
                  what + " " + std::to_string(i) + " placed on standby node \"" + names[i] +
                      "\": a standby node hosts nothing at start (once it joined, strata scale "
                      "--placement can put shards on it)");
    }
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
  // Nodes admit only members that prove they hold the cluster secret
  // (docs/multi-node.md, "Membership"): a cluster of nodes needs one.
  if (!r.nodes.empty() && !r.has_cluster_secret)
    diag.fail_at("nodes",
                 "a cluster with a nodes list needs cluster_secret: {file: PATH, "
                 "create_if_missing: true} (the secret its nodes prove they share)");
  if (r.has_cluster_secret && r.cluster_secret_file.empty())
    diag.fail_at("cluster_secret.file", "must name the secret file");
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
  check_tables(r, diag);

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
    diag.fail_at("model.objective", "count needs " + r.table_path + ".optimizer.kind: sgd, " +
                                        "learning_rate: 1 and " + r.table_path +
                                        ".initializer.kind: zeros (every weight then counts its "
                                        "key's sightings)");
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

}  // namespace strata::deploy::detail
