// The manifest parser: the shipped example parses into the cluster it
// describes; every kind of error names the file, the line and the field;
// sizes parse; the data split feeds every worker a disjoint window.
#include "deploy/manifest.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/deploy/manifest_lines.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using manifest_lines::base_lines;
using manifest_lines::error_of;
using manifest_lines::text_of;

std::string with_line(size_t line, const std::string& replacement) {
  auto lines = base_lines;
  lines.at(line - 1) = replacement;
  return text_of(lines);
}

std::string appended(const std::string& more) { return text_of(base_lines) + more; }

#define EXPECT_ERROR(text, fragment)                     \
  do {                                                   \
    const std::string message = error_of(text);          \
    EXPECT_NE(message.find(fragment), std::string::npos) \
        << "expected \"" << (fragment) << "\" in:\n"     \
        << message;                                      \
  } while (0)

TEST(Manifest, BaseParses) {
  auto m = parse_manifest(text_of(base_lines), "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  EXPECT_EQ(m->cluster.name, "t");
  EXPECT_EQ(m->cluster.shards.size(), 2u);
  EXPECT_EQ(m->cluster.shards[1].lmdb.directory, std::filesystem::path("/tmp/state/shard-1"));
  EXPECT_EQ(m->cluster.shards[0].dram.capacity_bytes, size_t{64} << 20);
  EXPECT_EQ(m->cluster.workers[1].data.shard_index, 1u);
  EXPECT_EQ(m->cluster.workers[1].data.shard_count, 2u);
  EXPECT_EQ(m->cluster.table.layout.dim, m->cluster.model.row_dim());
  EXPECT_EQ(m->cluster.model.slots, 39u);  // criteo_tsv
  EXPECT_FALSE(m->generate);
  EXPECT_FALSE(m->split_resolved);
}

TEST(Manifest, ExampleParsesIntoTheDemoCluster) {
  const std::string file = std::string(STRATA_EXAMPLES_DIR) + "/local.yaml";
  auto m = load_manifest(file);
  ASSERT_TRUE(m) << m.err().message();
  const auto& c = m->cluster;
  EXPECT_EQ(c.shards.size(), 2u);
  EXPECT_EQ(c.caches.size(), 2u);
  EXPECT_EQ(c.workers.size(), 2u);
  EXPECT_EQ(c.table.layout.dim, c.model.row_dim());
  EXPECT_EQ(c.shards[0].table.layout, c.table.layout);
  EXPECT_EQ(c.caches[1].table.layout, c.table.layout);
  EXPECT_EQ(c.shards[0].lmdb.table, c.table.name);
  EXPECT_EQ(c.shards[0].lmdb.partitions, c.partitions);
  EXPECT_NE(c.shards[0].lmdb.directory, c.shards[1].lmdb.directory);
  ASSERT_TRUE(m->generate);
  EXPECT_EQ(m->generate->output, m->data.path);
  EXPECT_GE(m->generate->rows, 300000u);
  // Small tiers, so rows overflow cache -> DRAM -> LMDB in the demo.
  EXPECT_LT(c.caches[0].geometry.capacity_rows(), m->generate->distinct_keys);
  EXPECT_LT(c.shards[0].dram.capacity_bytes, size_t{16} << 20);
  if (c.mode == actors::training_mode::async) {
    EXPECT_GE(c.caches[0].staleness, c.workers[0].prefetch_depth + c.workers[0].max_in_flight);
  }
}

TEST(Manifest, SizesParse) {
  EXPECT_EQ(*parse_size("64MiB"), uint64_t{64} << 20);
  EXPECT_EQ(*parse_size("1GiB"), uint64_t{1} << 30);
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("2 TiB"), uint64_t{2} << 40);
  EXPECT_EQ(*parse_size("512KiB"), uint64_t{512} << 10);
  EXPECT_EQ(*parse_size("100B"), 100u);
  EXPECT_EQ(*parse_size("1MB"), 1000000u);
  EXPECT_EQ(*parse_size("3GB"), 3000000000u);
  EXPECT_EQ(*parse_size("1_000_000"), 1000000u);
  for (const char* bad : {"lots", "", "MiB", "-1", "1.5GiB", "64 ", "64mib", "64 MiB ", "0x10",
                          "99999999999999999999", "20000000TiB"})
    EXPECT_FALSE(parse_size(bad)) << bad;
  EXPECT_EQ(format_size(uint64_t{64} << 20), "64 MiB");
  EXPECT_EQ(format_size(1000), "1000 B");
}

TEST(Manifest, BadYamlSyntaxNamesFileAndLine) {
  EXPECT_ERROR(with_line(8, "  count: [1, 2"), "m.yaml:");
  EXPECT_ERROR(with_line(8, "  count: [1, 2"), "YAML syntax");
  EXPECT_ERROR("a: b\n c: d\n", "m.yaml:2: YAML syntax");
}

TEST(Manifest, UnknownKeysAreErrors) {
  EXPECT_ERROR(with_line(4, "  cout: 2"), "m.yaml:4: shards.cout: unknown key");
  EXPECT_ERROR(appended("workrs:\n  count: 1\n"), "m.yaml:16: workrs: unknown key");
  EXPECT_ERROR(appended("  generate:\n    rows: 10\n    colour: red\n"),
               "m.yaml:18: data.generate.colour: unknown key");
}

// Issue 19: shards.migration_rows_per_s reaches every shard's config
// (unset: 0, unlimited); a value that is not a whole number is named.
TEST(Manifest, MigrationRateLimitReachesEveryShard) {
  auto unset = parse_manifest(text_of(base_lines), "m.yaml");
  ASSERT_TRUE(unset) << unset.err().message();
  EXPECT_EQ(unset->cluster.shards[0].migration_rows_per_s, 0u);
  auto m = parse_manifest(with_line(6, "  ssd_path: /tmp/state\n  migration_rows_per_s: 50000"),
                          "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  for (const auto& s : m->cluster.shards) EXPECT_EQ(s.migration_rows_per_s, 50000u);
  EXPECT_ERROR(with_line(6, "  ssd_path: /tmp/state\n  migration_rows_per_s: fast"),
               "m.yaml:7: shards.migration_rows_per_s: expected a whole number, got \"fast\"");
}

// shards.max_queued_flush_batches (the write-behind's bound) reaches every
// shard's config (unset: 4); 0 is named (the bound would hold every request).
TEST(Manifest, WriteBehindBoundReachesEveryShard) {
  auto unset = parse_manifest(text_of(base_lines), "m.yaml");
  ASSERT_TRUE(unset) << unset.err().message();
  EXPECT_EQ(unset->cluster.shards[0].max_queued_flush_batches, 4u);
  auto m = parse_manifest(with_line(6, "  ssd_path: /tmp/state\n  max_queued_flush_batches: 2"),
                          "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  for (const auto& s : m->cluster.shards) EXPECT_EQ(s.max_queued_flush_batches, 2u);
  EXPECT_ERROR(with_line(6, "  ssd_path: /tmp/state\n  max_queued_flush_batches: 0"),
               "m.yaml:7: shards.max_queued_flush_batches: must be in [1,");
}

TEST(Manifest, WrongTypesAreErrors) {
  EXPECT_ERROR(with_line(11, "  count: two"),
               "m.yaml:11: workers.count: expected a whole number, got \"two\"");
  EXPECT_ERROR(with_line(11, "  count: {a: 1}"), "m.yaml:11: workers.count: expected a value");
  EXPECT_ERROR(appended("dense: 7\n"), "m.yaml:16: dense: expected a mapping of fields, got \"7\"");
  EXPECT_ERROR(appended("model:\n  hidden: 64\n"), "m.yaml:17: model.hidden: expected a list");
  EXPECT_ERROR(appended("model:\n  hidden: [64, x]\n"), "m.yaml:17: model.hidden[1]");
  EXPECT_ERROR(appended("dense:\n  learning_rate: fast\n"),
               "m.yaml:17: dense.learning_rate: expected a number");
  EXPECT_ERROR(appended("  max_bad_lines: -1\n"), "m.yaml:16: data.max_bad_lines");
}

TEST(Manifest, BadSizesAreErrors) {
  EXPECT_EQ(error_of(with_line(5, "  dram_bytes: lots")),
            "m.yaml:5: shards.dram_bytes: expected a size like 64MiB, got \"lots\"");
}

TEST(Manifest, BadEnumsAreErrors) {
  EXPECT_ERROR(with_line(2, "mode: asnyc"),
               "m.yaml:2: mode: expected one of async, pass, got \"asnyc\"");
  EXPECT_ERROR(appended("table:\n  optimizer:\n    kind: adamw\n"),
               "m.yaml:18: table.optimizer.kind: expected one of sgd, adagrad, adam, ftrl");
  EXPECT_ERROR(appended("  format: parquet\n"), "m.yaml:16: data.format");
}

TEST(Manifest, OutOfRangeValuesAreErrors) {
  EXPECT_ERROR(with_line(4, "  count: 0"), "m.yaml:4: shards.count: must be in [1,");
  EXPECT_ERROR(appended("model:\n  embedding_dim: 5000\n"), "m.yaml:17: model.embedding_dim");
  EXPECT_ERROR(appended("  heldout_fraction: 1.5\n"), "m.yaml:16: data.heldout_fraction");
  EXPECT_ERROR(appended("table:\n  optimizer:\n    learning_rate: 0\n"),
               "m.yaml:18: table.optimizer.learning_rate: must be in (0,");
}

TEST(Manifest, CrossFieldRulesNameTheField) {
  // docs/architecture.md, Semantics: Async mode: staleness >= prefetch
  // depth + max in-flight.
  EXPECT_ERROR(with_line(9, "  staleness: 3"),
               "m.yaml:9: caches.staleness: async mode needs staleness >= "
               "workers.prefetch_depth + workers.max_in_flight (2 + 2 = 4), got 3");
  // Not written: the error points at the section that would hold it.
  {
    auto lines = base_lines;
    lines[8] = "  sets: 64";            // staleness left at its default, 8
    lines[11] = "  prefetch_depth: 7";  // 7 + 2 > 8
    EXPECT_ERROR(text_of(lines), "m.yaml:7: caches.staleness: async mode needs");
  }
  // Pass mode has no staleness rule.
  {
    auto lines = base_lines;
    lines[1] = "mode: pass";
    lines[8] = "  staleness: 0";
    auto m = parse_manifest(text_of(lines), "m.yaml");
    EXPECT_TRUE(m) << m.err().message();
  }
  EXPECT_ERROR(appended("table:\n  dim: 12\n"),
               "m.yaml:17: table.dim: must be model.embedding_dim + 1 = 9");
  EXPECT_ERROR(appended("partitions: 1\n"), "m.yaml:16: partitions: must be >= shards.count");
  EXPECT_ERROR(with_line(5, "  dram_bytes: 64"), "m.yaml:5: shards.dram_bytes: too small");
  EXPECT_ERROR(appended("  format: libffm\n"), "model.slots: format libffm needs model.slots");
  EXPECT_ERROR(appended("  format: csv\n"), "data.csv: format csv needs");
  EXPECT_ERROR(appended("  train_examples: 100\n  heldout_fraction: 0.2\n"),
               "m.yaml:16: data.train_examples: give either");
  EXPECT_ERROR(
      appended("  format: csv\n  csv:\n    categorical: [C1]\n  generate:\n    rows: 10\n"),
      "m.yaml:19: data.generate: datagen writes criteo_tsv");
}

TEST(Manifest, MissingRequiredFieldsAreErrors) {
  EXPECT_ERROR(with_line(15, "  max_bad_lines: 3"), "m.yaml:14: data.path: required field missing");
  {
    auto lines = base_lines;
    lines.resize(13);  // no data section
    EXPECT_ERROR(text_of(lines), "m.yaml:1: data: required field missing");
  }
  EXPECT_ERROR(with_line(6, "  eviction: lfu"),
               "m.yaml:3: shards.ssd_path: required field missing");
  EXPECT_ERROR("", "m.yaml:1: the manifest is empty");
}

TEST(Manifest, DuplicateKeysAreErrors) {
  EXPECT_ERROR(appended("  path: /tmp/other.tsv\n"), "m.yaml:16: data.path: duplicate key");
}

TEST(Manifest, EveryErrorIsReportedInLineOrder) {
  auto lines = base_lines;
  lines[10] = "  count: many";        // line 11
  lines[1] = "mode: sideways";        // line 2
  lines[4] = "  dram_bytes: 1 pint";  // line 5
  const std::string message = error_of(text_of(lines));
  const auto mode = message.find("m.yaml:2: mode");
  const auto dram = message.find("m.yaml:5: shards.dram_bytes");
  const auto count = message.find("m.yaml:11: workers.count");
  ASSERT_NE(mode, std::string::npos) << message;
  ASSERT_NE(dram, std::string::npos) << message;
  ASSERT_NE(count, std::string::npos) << message;
  EXPECT_LT(mode, dram);
  EXPECT_LT(dram, count);
}

TEST(Manifest, FractionSplitGivesEveryWorkerADisjointWindow) {
  auto lines = base_lines;
  lines[10] = "  count: 3";
  auto m = parse_manifest(text_of(lines), "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  ASSERT_TRUE(apply_data_split(*m, 100));  // 90 train, 10 held out
  const auto& c = m->cluster;
  uint64_t train = 0;
  for (uint32_t w = 0; w < 3; ++w) {
    EXPECT_EQ(c.workers[w].data.shard_index, w);
    EXPECT_EQ(c.workers[w].data.shard_count, 3u);
    EXPECT_EQ(c.workers[w].data.path, m->data.path);
    train += c.workers[w].data.limit;
  }
  EXPECT_EQ(train, 90u);
  EXPECT_EQ(c.heldout.path, m->data.path);
  EXPECT_EQ(c.heldout.shard_count, 1u);
  EXPECT_EQ(c.heldout.skip, 90u);
  EXPECT_TRUE(m->split_resolved);
  // Lines w, w+3, ... below 10: 4, 3, 3.
  ASSERT_TRUE(apply_data_split(*m, 11));  // 10 train (floor of 1.1 held out)
  EXPECT_EQ(c.workers[0].data.limit, 4u);
  EXPECT_EQ(c.workers[1].data.limit, 3u);
  EXPECT_EQ(c.workers[2].data.limit, 3u);
  // A window smaller than the worker count would leave a worker unlimited.
  EXPECT_FALSE(apply_data_split(*m, 2));
}

TEST(Manifest, ExplicitSplitIsResolvedAtParseTime) {
  auto m = parse_manifest(appended("  train_examples: 1000\n  heldout_examples: 50\n"), "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  EXPECT_TRUE(m->split_resolved);
  EXPECT_EQ(m->cluster.workers[0].data.limit + m->cluster.workers[1].data.limit, 1000u);
  EXPECT_EQ(m->cluster.heldout.skip, 1000u);
  EXPECT_EQ(m->cluster.heldout.limit, 50u);
  EXPECT_EQ(m->cluster.heldout_examples, 50u);
}

TEST(Manifest, NoHeldoutWindowWithAZeroFraction) {
  auto m = parse_manifest(appended("  heldout_fraction: 0\n"), "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  ASSERT_TRUE(apply_data_split(*m, 10));
  EXPECT_TRUE(m->cluster.heldout.path.empty());
  EXPECT_EQ(m->cluster.workers[0].data.limit + m->cluster.workers[1].data.limit, 10u);
}

TEST(Manifest, ResolveCountsTheDataFileLessTheCsvHeader) {
  testing::temp_dir dir;
  const auto data = dir.path() / "d.csv";
  {
    std::ofstream out(data);
    out << "label,C1\n";
    for (int i = 0; i < 20; ++i) out << (i % 2) << ",x" << i << "\n";
  }
  auto lines = base_lines;
  lines[14] = "  path: " + data.string();
  auto m = parse_manifest(text_of(lines) +
                              "  format: csv\n  csv:\n    label: label\n    categorical: [C1]\n"
                              "  heldout_fraction: 0.25\n",
                          "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  EXPECT_EQ(m->cluster.model.slots, 1u);
  ASSERT_TRUE(resolve_data_split(*m));
  EXPECT_EQ(m->cluster.heldout.skip, 15u);  // 20 examples, 5 held out
  EXPECT_EQ(m->cluster.workers[0].data.limit, 8u);
  EXPECT_EQ(m->cluster.workers[1].data.limit, 7u);
}

TEST(Manifest, MissingFileIsNamed) {
  auto m = load_manifest("/nonexistent/strata.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().message().find("/nonexistent/strata.yaml"), std::string::npos);
}

}  // namespace
}  // namespace strata::deploy

namespace strata::deploy {
namespace {

TEST(Manifest, MetricsSectionParsesWithDefaults) {
  auto off = parse_manifest(text_of(base_lines), "m.yaml");
  ASSERT_TRUE(off) << off.err().message();
  EXPECT_EQ(off->metrics.port, 0);  // metrics off unless asked for
  auto on = parse_manifest(appended("metrics:\n  port: 9555\n  linger_seconds: 3\n"), "m.yaml");
  ASSERT_TRUE(on) << on.err().message();
  EXPECT_EQ(on->metrics.port, 9555);
  EXPECT_EQ(on->metrics.node, "t");  // the cluster's name by default
}

TEST(Manifest, MetricsErrorsNameTheField) {
  EXPECT_ERROR(appended("metrics:\n  port: 70000\n"), "m.yaml:17: metrics.port");
  EXPECT_ERROR(appended("metrics:\n  prot: 9555\n"), "m.yaml:17: metrics.prot");
}

TEST(Manifest, CheckpointSectionParsesWithDefaults) {
  auto off = parse_manifest(text_of(base_lines), "m.yaml");
  ASSERT_TRUE(off) << off.err().message();
  EXPECT_FALSE(off->cluster.checkpoint.enabled());
  EXPECT_EQ(off->on_failure, failure_policy::stop);
  auto on = parse_manifest(appended("checkpoint:\n  dir: /tmp/ck\n  interval_batches: 500\n"
                                    "  keep: 5\n  on_failure: restart\n"),
                           "m.yaml");
  ASSERT_TRUE(on) << on.err().message();
  const auto& c = on->cluster.checkpoint;
  EXPECT_EQ(c.directory, "/tmp/ck");
  EXPECT_EQ(c.interval_batches, 500u);
  EXPECT_EQ(c.interval_seconds, 0u);
  EXPECT_EQ(c.keep, 5u);
  EXPECT_TRUE(c.at_stop);
  EXPECT_EQ(on->on_failure, failure_policy::restart);
  EXPECT_EQ(on->max_restarts, 3u);
}

TEST(Manifest, CheckpointErrorsNameTheField) {
  EXPECT_ERROR(appended("checkpoint:\n  interval_batches: 10\n"),
               "m.yaml:16: checkpoint.dir: required");
  EXPECT_ERROR(appended("checkpoint:\n  dir: c\n  keep: 0\n"), "m.yaml:18: checkpoint.keep");
  EXPECT_ERROR(appended("checkpoint:\n  dir: c\n  on_failure: retry\n"),
               "m.yaml:18: checkpoint.on_failure: expected one of");
  EXPECT_ERROR(appended("checkpoint:\n  dir: c\n  intervall: 3\n"),
               "m.yaml:18: checkpoint.intervall: unknown key");
  EXPECT_ERROR(appended("model:\n  objective: count\n"), "model.objective: count needs");
}

TEST(Manifest, ServingAndUpdatesSectionsParseWithDefaults) {
  auto off = parse_manifest(text_of(base_lines), "m.yaml");
  ASSERT_TRUE(off) << off.err().message();
  EXPECT_FALSE(off->serving.present);
  EXPECT_FALSE(off->updates.present);
  auto on = parse_manifest(
      appended("serving:\n  checkpoint: /tmp/ck\n  http_port: 8080\n  warmup_keys: 10\n"
               "  replicas: [a:7100, 10.0.0.6:7101]\n  subscribe: train:7200\n"
               "updates:\n  port: 7200\n  interval_ms: 50\n"),
      "m.yaml");
  ASSERT_TRUE(on) << on.err().message();
  const auto& s = on->serving;
  EXPECT_TRUE(s.present);
  EXPECT_EQ(s.checkpoint, "/tmp/ck");
  EXPECT_EQ(s.lmdb_path, on->ssd_path / "serving");
  EXPECT_EQ(s.cache_backend, "cpu");
  EXPECT_EQ(s.bind_address, "127.0.0.1");
  EXPECT_EQ(s.binary_port, 0u);
  EXPECT_EQ(s.http_port, 8080u);
  EXPECT_EQ(s.warmup_keys, 10u);
  EXPECT_EQ(s.lmdb_read_handles, 16u);
  EXPECT_DOUBLE_EQ(s.async_insert_hit_rate, 0.9);
  ASSERT_EQ(s.replicas.size(), 2u);
  EXPECT_EQ(s.replicas[1].host, "10.0.0.6");
  EXPECT_EQ(s.replicas[1].port, 7101u);
  ASSERT_EQ(s.subscribe.size(), 1u);
  EXPECT_EQ(s.subscribe[0].host, "train");
  EXPECT_TRUE(on->updates.present);
  EXPECT_EQ(on->updates.port, 7200u);
  EXPECT_EQ(on->updates.interval_ms, 50u);
  EXPECT_EQ(on->updates.max_rows, 4096u);
}

TEST(Manifest, ServingSubscribesToEveryTrainingNodesPublisher) {
  auto m = parse_manifest(appended("serving:\n  subscribe: [n0:7200, 10.0.0.2:7201]\n"), "m.yaml");
  ASSERT_TRUE(m.has_value()) << m.err().to_string();
  ASSERT_EQ(m->serving.subscribe.size(), 2u);
  EXPECT_EQ(m->serving.subscribe[0].host, "n0");
  EXPECT_EQ(m->serving.subscribe[1].port, 7201u);
  EXPECT_ERROR(appended("serving:\n  subscribe: [n0:7200, nowhere]\n"),
               "serving.subscribe[1]: expected host:port");
}

TEST(Manifest, ServingErrorsNameTheField) {
  EXPECT_ERROR(appended("serving:\n  async_insert_hit_rate: 1.5\n"),
               "m.yaml:17: serving.async_insert_hit_rate: must be in");
  EXPECT_ERROR(appended("serving:\n  lmdb_read_handles: 0\n"),
               "m.yaml:17: serving.lmdb_read_handles: must be in");
  EXPECT_ERROR(appended("serving:\n  lmdb_read_handles: 101\n"),
               "m.yaml:17: serving.lmdb_read_handles: must be in");
  EXPECT_ERROR(appended("serving:\n  replicas: [nowhere]\n"),
               "serving.replicas[0]: expected host:port");
  EXPECT_ERROR(appended("serving:\n  subscribe: host:99999\n"),
               "serving.subscribe: expected host:port");
  EXPECT_ERROR(appended("serving:\n  cache_backend: tpu\n"),
               "m.yaml:17: serving.cache_backend: expected one of");
  EXPECT_ERROR(appended("serving:\n  http_prot: 1\n"), "m.yaml:17: serving.http_prot: unknown key");
  EXPECT_ERROR(appended("updates:\n  interval_ms: 0\n"), "m.yaml:17: updates.interval_ms");
}

// Issue 16 item 5: strata serve empties serving.lmdb_path, so it may not be,
// hold or sit in what training keeps (shards.ssd_path is /tmp/state).
TEST(Manifest, ServingLmdbPathStaysOutOfTheShardsAndCheckpoints) {
  EXPECT_ERROR(appended("serving:\n  lmdb_path: /tmp/state\n"),
               "m.yaml:17: serving.lmdb_path: /tmp/state would be emptied by strata serve but "
               "holds shards.ssd_path (/tmp/state)");
  EXPECT_ERROR(appended("serving:\n  lmdb_path: /tmp\n"),
               "m.yaml:17: serving.lmdb_path: /tmp would be emptied by strata serve but holds "
               "shards.ssd_path");
  EXPECT_ERROR(appended("serving:\n  lmdb_path: /tmp/state/shard-0/x\n"),
               "serving.lmdb_path: /tmp/state/shard-0/x would be emptied by strata serve but is "
               "inside a shard environment of shards.ssd_path");
  EXPECT_ERROR(appended("checkpoint:\n  dir: /ck\nserving:\n  lmdb_path: /ck/\n"),
               "m.yaml:19: serving.lmdb_path: /ck/ would be emptied by strata serve but holds "
               "checkpoint.dir (/ck)");
  EXPECT_ERROR(appended("checkpoint:\n  dir: /ck\nserving:\n  lmdb_path: /ck/serving\n"),
               "but is inside checkpoint.dir (/ck)");
  EXPECT_ERROR(appended("serving:\n  checkpoint: /c/ckpt-1\n  lmdb_path: /c\n"),
               "but holds serving.checkpoint (/c/ckpt-1)");
  // Beside the shards is fine: the default is ssd_path/serving.
  for (const char* ok : {"/tmp/state/serving", "/tmp/state/serving-copy", "/srv/serving"}) {
    auto m = parse_manifest(appended(std::string("serving:\n  lmdb_path: ") + ok + "\n"), "m.yaml");
    EXPECT_TRUE(m) << ok << ": " << m.err().message();
  }
}

}  // namespace
}  // namespace strata::deploy
