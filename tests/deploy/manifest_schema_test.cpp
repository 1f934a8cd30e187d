// The manifest validation table: malformed manifests, each with the exact
// error `strata validate` must give (file, line, field, what was expected),
// and the drift check: every shipped example and every malformed case the
// JSON Schema can express gets the same verdict from the validator and from
// deploy/manifest.schema.json (checked by tests/deploy/schema_check.py with
// python3-jsonschema; that half skips with the reason when it is missing).
// Rules between fields (duplicate node names, placement on an unknown node,
// a budget too small for one row, ...) are beyond JSON Schema: the schema
// accepts those files, the validator names the rule.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "deploy/manifest.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using strata::testing::temp_dir;

const char* const base =
    "name: t\n"                 // 1
    "mode: async\n"             // 2
    "nodes:\n"                  // 3
    "  - name: n0\n"            // 4
    "    host: 127.0.0.1\n"     // 5
    "    dram_bytes: 1GiB\n"    // 6
    "  - name: n1\n"            // 7
    "    host: 127.0.0.1\n"     // 8
    "    admin_port: 7071\n"    // 9
    "shards:\n"                 // 10
    "  count: 2\n"              // 11
    "  placement: [n0, n1]\n"   // 12
    "  dram_bytes: 64MiB\n"     // 13
    "  ssd_path: /tmp/state\n"  // 14
    "caches:\n"                 // 15
    "  count: 1\n"              // 16
    "workers:\n"                // 17
    "  count: 2\n"              // 18
    "data:\n"                   // 19
    "  path: /tmp/d.tsv\n"      // 20
    "metrics:\n"                // 21
    "  port: 9464\n"            // 22
    "admin:\n"                  // 23
    "  port: 7070\n"            // 24
    "  token: secret\n"          // 25
    "cluster_secret:\n"         // 26
    "  file: /tmp/c.secret\n";  // 27

// The base with line `line` (1-based) replaced by `text`.
std::string edit(size_t line, const std::string& text) {
  std::istringstream in(base);
  std::string out, l;
  for (size_t n = 1; std::getline(in, l); ++n) out += (n == line ? text : l) + "\n";
  return out;
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct bad_manifest {
  std::string name;
  std::string text;
  std::string error;     // the validator's exact message (one error)
  bool schema_can_tell;  // false: a rule between fields
};

std::vector<bad_manifest> table() {
  return {
      {"unknown_field", edit(16, "  cont: 1"),
       "m.yaml:16: caches.cont: unknown key, did you mean 'count'? (expected one of: backend, "
       "count, placement, sets, "
       "slabs_per_set, staleness)",
       true},
      {"wrong_type", edit(11, "  count: two"),
       "m.yaml:11: shards.count: expected a whole number, got \"two\"", true},
      {"port_out_of_range", edit(22, "  port: 70000"),
       "m.yaml:22: metrics.port: must be in [0, 65535], got 70000", true},
      {"admin_port_out_of_range", edit(24, "  port: 65536"),
       "m.yaml:24: admin.port: must be in [0, 65535], got 65536", true},
      {"node_port_out_of_range", edit(9, "    admin_port: 99999"),
       "m.yaml:9: nodes[1].admin_port: must be in [0, 65535], got 99999", true},
      {"bad_enum", edit(2, "mode: turbo"),
       "m.yaml:2: mode: expected one of async, pass, got \"turbo\"", true},
      {"bad_size", edit(13, "  dram_bytes: lots"),
       "m.yaml:13: shards.dram_bytes: expected a size like 64MiB, got \"lots\"", true},
      {"node_without_host", edit(8, "    hostname: 127.0.0.1"),
       "m.yaml:8: nodes[1].hostname: unknown key (expected one of: admin_port, devices, "
       "dram_bytes, host, metrics_port, name, ssd_path, standby, transport_port, updates_port)",
       true},
      {"bad_placement", edit(12, "  placement: packed"),
       "m.yaml:12: shards.placement: expected \"spread\" or a list of node names, got \"packed\"",
       true},
      {"zero_shards", edit(11, "  count: 0"),
       "m.yaml:11: shards.count: must be in [1, 4096], got 0", true},
      {"duplicate_node_name", edit(7, "  - name: n0"),
       "m.yaml:7: nodes[1].name: duplicate node name \"n0\"", false},
      {"shard_on_unknown_node", edit(12, "  placement: [n0, n9]"),
       "m.yaml:12: shards.placement[1]: shard 1 placed on unknown node \"n9\"", false},
      {"budget_below_one_row", edit(13, "  dram_bytes: 64B"),
       "m.yaml:13: shards.dram_bytes: too small to hold one row (524 bytes at row dim 9)", false},
      {"node_budget_too_small", edit(6, "    dram_bytes: 1MiB"),
       "m.yaml:4: nodes[0].dram_bytes: node budget 1 MiB cannot hold one shard's "
       "shards.dram_bytes (64 MiB)",
       false},
      {"admin_without_token", edit(25, "  bind_address: 127.0.0.1"),
       "m.yaml:24: admin.port: the admin API needs admin.token or admin.token_file", false},
      // Nodes admit only members proving the cluster secret (issue 16).
      {"nodes_without_cluster_secret",
       std::string(base).substr(0, std::string(base).find("cluster_secret:")),
       "m.yaml:3: nodes: a cluster with a nodes list needs cluster_secret: {file: PATH, "
       "create_if_missing: true} (the secret its nodes prove they share)",
       true},
      {"cluster_secret_without_file", edit(27, "  create_if_missing: true"),
       "m.yaml:26: cluster_secret.file: required field missing", true},
      // Standby nodes (issue 19): the cluster starts without them.
      {"coordinator_standby", edit(6, "    standby: true\n    transport_port: 7100"),
       "m.yaml:6: nodes[0].standby: node \"n0\" is the first node, which runs the coordinator: "
       "it cannot be standby (list a standby node after it)",
       false},
      {"shard_on_standby_node", edit(9, "    standby: true\n    transport_port: 7100"),
       "m.yaml:13: shards.placement[1]: shard 1 placed on standby node \"n1\": a standby node "
       "hosts nothing at start (once it joined, strata scale --placement can put shards on it)",
       false},
      {"standby_without_transport_port",
       replace_once(edit(9, "    standby: true"), "placement: [n0, n1]", "placement: [n0, n0]"),
       "m.yaml:7: nodes[1].transport_port: standby node \"n1\" needs a fixed transport port",
       false},
      // Several tables (issue 20): the base is 27 lines, so an appended
      // section starts at line 28.
      {"table_and_tables", std::string(base) + "table:\n  name: a\ntables:\n  - name: b\n",
       "m.yaml:30: tables: give table or tables, not both (table is a list of one)", true},
      {"tables_empty", std::string(base) + "tables: []\n",
       "m.yaml:28: tables: must list at least one table", true},
      {"table_without_name", std::string(base) + "tables:\n  - dim: 9\n",
       "m.yaml:29: tables[0].name: required field missing", true},
      {"table_dim_too_small", std::string(base) + "tables:\n  - name: users\n    dim: 1\n",
       "m.yaml:30: tables[0].dim: must be in [2, 4096], got 1", true},
      {"table_dram_share_zero",
       std::string(base) + "tables:\n  - name: users\n    dram_share: 0\n",
       "m.yaml:30: tables[0].dram_share: must be in (0, 1], got 0", true},
      {"duplicate_table_name",
       std::string(base) + "tables:\n  - name: users\n  - name: users\n",
       "m.yaml:30: tables[1].name: duplicate table name \"users\" (a table's name is its LMDB "
       "database and what requests name)",
       false},
      {"second_table_refused", std::string(base) + "tables:\n  - name: users\n  - name: items\n",
       "m.yaml:30: tables[1]: table \"items\": this build stores, trains and serves one table per "
       "cluster (2 listed)",
       false},
      {"slot_table_unknown_table",
       std::string(base) + "tables:\n  - name: users\nmodel:\n  slot_tables:\n    C1: items\n",
       "m.yaml:32: model.slot_tables.C1: unknown table \"items\" (the manifest's tables: users)",
       false},
      {"slot_table_unknown_slot", std::string(base) + "model:\n  slot_tables:\n    Q1: default\n",
       "m.yaml:30: model.slot_tables.Q1: unknown slot 'Q1' (slots: I1..I13 integer and C1..C26 "
       "categorical columns of criteo_tsv data, or a slot number for a categorical slot)",
       true},
      {"slot_table_beyond_the_model",
       std::string(base) + "model:\n  slot_tables:\n    \"39\": default\n",
       "m.yaml:30: model.slot_tables.39: slot 39 is slot 39, but the model has 39 slots (0..38)",
       false},
      {"slot_mapped_twice",
       std::string(base) + "model:\n  slot_tables:\n    C1: default\n    \"13\": default\n",
       "m.yaml:31: model.slot_tables.13: slot 13 (slot 13) is mapped twice", false},
  };
}

TEST(ManifestTable, EveryMalformedManifestGetsItsExactError) {
  auto ok = parse_manifest(base, "m.yaml");
  ASSERT_TRUE(ok) << ok.err().message();
  EXPECT_EQ(ok->nodes.size(), 2u);
  EXPECT_EQ(ok->placement, (std::vector<std::string>{"n0", "n1"}));
  for (const auto& bad : table()) {
    auto m = parse_manifest(bad.text, "m.yaml");
    ASSERT_FALSE(m) << bad.name << " parsed";
    EXPECT_NE(m.err().message().find(bad.error), std::string::npos)
        << bad.name << ": expected\n  " << bad.error << "\nin\n  " << m.err().message();
  }
}

// A standby node (issue 19): parsed, and left out when shards, cache tiers
// and workers are dealt over the nodes at start.
const std::string standby_text = replace_once(
    edit(9, "    admin_port: 7071\n  - name: n2\n    host: 127.0.0.1\n    transport_port: 7100\n"
            "    standby: true"),
    "placement: [n0, n1]", "placement: spread");

TEST(ManifestTable, StandbyNodeIsParsedAndHostsNothingAtStart) {
  auto m = parse_manifest(standby_text, "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  ASSERT_EQ(m->nodes.size(), 3u);
  EXPECT_FALSE(m->nodes[0].standby);
  EXPECT_FALSE(m->nodes[1].standby);
  EXPECT_TRUE(m->nodes[2].standby);
  EXPECT_EQ(m->shard_nodes, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(m->cache_nodes, (std::vector<std::string>{"n0"}));
  EXPECT_EQ(m->worker_nodes, (std::vector<std::string>{"n0", "n1"}));
}

// `tables:` with one entry (issue 20): each field overrides the cluster-wide
// default it names, and the one table is the cluster's.
TEST(ManifestTable, ATablesListOfOneOverridesTheDefaults) {
  const std::string text = std::string(base) +
                           "tables:\n"
                           "  - name: users\n"
                           "    dim: 17\n"
                           "    seed: 5\n"
                           "    optimizer: {kind: adam, learning_rate: 0.002}\n"
                           "    admission_threshold: 3\n"
                           "    ttl_ticks: 1000\n"
                           "    dram_share: 0.5\n"
                           "model:\n"
                           "  embedding_dim: 8\n"
                           "  slot_tables: {C1: users, I2: users}\n";
  auto m = parse_manifest(text, "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  const auto& c = m->cluster;
  EXPECT_EQ(c.table.name, "users");
  EXPECT_EQ(c.model.embedding_dim, 16u);  // the table's dim wins over model.embedding_dim
  EXPECT_EQ(c.table.layout.dim, 17u);
  EXPECT_EQ(c.table.optimizer.kind, optimizer_kind::adam);
  EXPECT_FLOAT_EQ(c.table.optimizer.learning_rate, 0.002f);
  EXPECT_EQ(c.table.initializer.seed, 5u);
  ASSERT_EQ(c.shards.size(), 2u);
  for (const auto& shard : c.shards) {
    EXPECT_EQ(shard.table.name, "users");
    EXPECT_EQ(shard.lmdb.table, "users");
    EXPECT_EQ(shard.chain.admission_threshold, 3u);
    EXPECT_EQ(shard.dram.ttl_ticks, 1000u);
    EXPECT_EQ(shard.dram.capacity_bytes, size_t{32} << 20);  // half of shards.dram_bytes
  }
  // The same cluster from the single-table form, the overrides written as
  // the cluster-wide fields.
  const std::string single = replace_once(std::string(base), "  dram_bytes: 64MiB\n",
                                          "  dram_bytes: 32MiB\n  admission_threshold: 3\n"
                                          "  ttl_ticks: 1000\n") +
                             "table:\n"
                             "  name: users\n"
                             "  seed: 5\n"
                             "  optimizer: {kind: adam, learning_rate: 0.002}\n"
                             "model:\n"
                             "  embedding_dim: 16\n";
  auto s = parse_manifest(single, "s.yaml");
  ASSERT_TRUE(s) << s.err().message();
  EXPECT_EQ(s->cluster.model.embedding_dim, c.model.embedding_dim);
  EXPECT_EQ(s->cluster.table.layout.dim, c.table.layout.dim);
  EXPECT_EQ(s->cluster.shards[0].dram.capacity_bytes, c.shards[0].dram.capacity_bytes);
  EXPECT_EQ(s->cluster.shards[0].chain.admission_threshold,
            c.shards[0].chain.admission_threshold);
  EXPECT_EQ(s->cluster.shards[0].dram.ttl_ticks, c.shards[0].dram.ttl_ticks);
}

// Runs the schema checker over files; file -> "valid" / "invalid: ...".
// Only the checker's own "module missing" exit (77) leaves `skip_reason`
// set; any other failure (a broken schema, a crash) is reported in `error`.
struct schema_run {
  std::map<std::string, std::string> verdicts;
  std::string skip_reason;
  std::string error;
};

schema_run schema_verdicts(const std::vector<std::string>& files) {
  std::string cmd =
      "/usr/bin/python3 " STRATA_SOURCE_DIR "/tests/deploy/schema_check.py " STRATA_SOURCE_DIR
      "/deploy/manifest.schema.json";
  for (const auto& f : files) cmd += " '" + f + "'";
  cmd += " 2>&1";
  schema_run run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    run.error = "cannot start " + cmd;
    return run;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int status = ::pclose(pipe);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 77) {
    run.skip_reason =
        "schema checker modules missing (python3-jsonschema, python3-yaml: make deps): " + out;
    return run;
  }
  if (rc != 0) {
    run.error = "schema checker failed (exit " + std::to_string(rc) + "): " + out;
    return run;
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(": ");
    if (colon != std::string::npos) run.verdicts[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return run;
}

TEST(ManifestSchema, ValidatorAndSchemaGiveTheSameVerdicts) {
  temp_dir dir;
  std::vector<std::string> files;
  std::map<std::string, bool> validator_valid;
  std::map<std::string, bool> compared;
  for (const char* example : {"local", "cluster3", "large"}) {
    const std::string f = std::string(STRATA_SOURCE_DIR) + "/deploy/examples/" + example + ".yaml";
    files.push_back(f);
    auto m = load_manifest(f);
    EXPECT_TRUE(m) << f << ": " << (m ? "" : m.err().message());
    validator_valid[f] = static_cast<bool>(m);
    compared[f] = true;
  }
  const std::string base_file = (dir.path() / "base.yaml").string();
  std::ofstream(base_file) << base;
  files.push_back(base_file);
  validator_valid[base_file] = static_cast<bool>(parse_manifest(base, "base.yaml"));
  compared[base_file] = true;
  // The serving and update sections (strata serve; the training node's
  // publisher) are in the schema too.
  const std::string serving_text = std::string(base) +
                                   "serving:\n  http_port: 8080\n  cache_backend: cpu\n"
                                   "  replicas: [\"127.0.0.1:9000\"]\n  subscribe: 127.0.0.1:9001\n"
                                   "  async_insert_hit_rate: 0.8\n  max_http_body_bytes: 1MiB\n"
                                   "updates:\n  port: 0\n  interval_ms: 100\n  max_rows: 64\n";
  const std::string serving_file = (dir.path() / "serving.yaml").string();
  std::ofstream(serving_file) << serving_text;
  files.push_back(serving_file);
  validator_valid[serving_file] = static_cast<bool>(parse_manifest(serving_text, "serving.yaml"));
  EXPECT_TRUE(validator_valid[serving_file]);
  compared[serving_file] = true;
  const std::string standby_file = (dir.path() / "standby.yaml").string();
  std::ofstream(standby_file) << standby_text;
  files.push_back(standby_file);
  validator_valid[standby_file] = static_cast<bool>(parse_manifest(standby_text, "standby.yaml"));
  EXPECT_TRUE(validator_valid[standby_file]);
  compared[standby_file] = true;
  for (const auto& bad : table()) {
    const std::string f = (dir.path() / (bad.name + ".yaml")).string();
    std::ofstream(f) << bad.text;
    files.push_back(f);
    validator_valid[f] = static_cast<bool>(parse_manifest(bad.text, f));
    compared[f] = bad.schema_can_tell;
  }
  auto run = schema_verdicts(files);
  if (!run.skip_reason.empty()) GTEST_SKIP() << run.skip_reason;
  ASSERT_TRUE(run.error.empty()) << run.error;
  auto& verdicts = run.verdicts;
  for (const auto& f : files) {
    ASSERT_TRUE(verdicts.count(f)) << "no schema verdict for " << f;
    const bool schema_valid = verdicts[f] == "valid";
    if (compared[f])
      EXPECT_EQ(schema_valid, validator_valid[f])
          << f << ": validator says " << (validator_valid[f] ? "valid" : "invalid")
          << ", schema says " << verdicts[f];
    else
      // A rule between fields: the schema alone accepts the file.
      EXPECT_TRUE(schema_valid) << f << ": " << verdicts[f];
  }
}

}  // namespace
}  // namespace strata::deploy
