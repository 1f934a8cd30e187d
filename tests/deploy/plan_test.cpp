// `strata plan`'s arithmetic (deploy/capacity_plan.hpp): a small figures
// file with hand-checkable numbers, the committed docs/benchmarks.jsonl,
// each bad input's named error, and the row sizes against the row codec.
#include "deploy/capacity_plan.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using strata::testing::temp_dir;

// Round numbers: DRAM overhead 40 bytes/key over raw, LMDB 1.5x the encoded
// row, shard rates 2e6 lookups (dim 16) and 5e5 pushes, LMDB 1e5 reads and
// 5e4 writes, 1 GB/s transport, 1000 examples/s per node, cache hit rate
// 0.9, half of the shard lookups served by LMDB.
constexpr const char* small_figures =
    R"({"name":"dram_bytes_per_key","value":100,"unit":"bytes","baseline":"raw_row_bytes","baseline_value":60,"ratio":1.6667}
{"name":"lmdb_bytes_per_key","value":300,"unit":"bytes","baseline":"encoded_row_bytes","baseline_value":200,"ratio":1.5}
{"name":"dram_lookup_dim16","value":2e6,"unit":"rows/s","baseline":"raw_gather","baseline_value":4e6,"ratio":0.5}
{"name":"dram_lookup_dim64","value":1e6,"unit":"rows/s","baseline":"raw_gather","baseline_value":4e6,"ratio":0.25}
{"name":"dram_push_adagrad_dim64","value":5e5,"unit":"rows/s","baseline":"raw_gather","baseline_value":1e6,"ratio":0.5}
{"name":"lmdb_read","value":1e5,"unit":"rows/s","baseline":"raw_lmdb","baseline_value":1e5,"ratio":1}

{"name":"lmdb_write","value":5e4,"unit":"rows/s","baseline":"raw_lmdb","baseline_value":5e4,"ratio":1}
{"name":"transport_frames_dim64_tcp","value":1,"unit":"GB/s","baseline":"ucx_perftest","baseline_value":2,"ratio":0.5}
{"name":"e2e_examples_per_s","value":1000,"unit":"examples/s","baseline":"pytorch_cpu","baseline_value":1000,"ratio":1}
{"name":"e2e_cache_hit_rate","value":0.9,"unit":"fraction","baseline":"strata_all_dram","baseline_value":0.9,"ratio":1}
{"name":"e2e_ssd_hit_rate","value":0.5,"unit":"fraction","baseline":"strata_all_dram","baseline_value":0,"ratio":0}
)";

bench_figures small() {
  auto f = parse_bench_figures(small_figures, "small.jsonl");
  EXPECT_TRUE(f) << f.err().to_string();
  return *f;
}

// 1e9 keys, dim 8, SGD: raw row 32 bytes, encoded 64.
plan_options small_options() {
  plan_options o;
  o.keys = 1e9;
  o.dim = 8;
  o.optimizer = optimizer_kind::sgd;
  o.hot_fraction = 0.5;
  o.examples_per_s = 10000;
  o.keys_per_example = 10;
  o.data_examples = 1e6;
  o.node_dram_gib = 1;
  o.node_ssd_tib = 0.01;
  o.nic_gbps = 0.008;  // 1e6 B/s, below the measured 1 GB/s
  o.usable_fraction = 1;
  return o;
}

const plan_item& input(const capacity_plan& p, const std::string& name) {
  for (const auto& i : p.inputs)
    if (i.name == name) return i;
  ADD_FAILURE() << "no input " << name;
  static plan_item none;
  return none;
}

TEST(plan, arithmetic_on_a_small_figures_file) {
  auto p = make_capacity_plan(small_options(), small());
  ASSERT_TRUE(p) << p.err().to_string();
  // Per key: DRAM 32 + 40 = 72 bytes, LMDB 64 x 1.5 = 96 bytes.
  EXPECT_DOUBLE_EQ(p->result("dram_bytes_per_key"), 72);
  EXPECT_DOUBLE_EQ(p->result("lmdb_bytes_per_key"), 96);
  // DRAM: 5e8 hot keys x 72 = 3.6e10 bytes over 1 GiB nodes: 33.5 -> 34.
  EXPECT_DOUBLE_EQ(p->result("dram_bytes"), 3.6e10);
  EXPECT_EQ(p->result("nodes_dram"), 34);
  // SSD: 1e9 x 96 = 9.6e10 bytes over 0.01 TiB (1.0995e10) nodes: 8.7 -> 9.
  EXPECT_DOUBLE_EQ(p->result("ssd_bytes"), 9.6e10);
  EXPECT_EQ(p->result("nodes_ssd_capacity"), 9);
  // Traffic: 1e4 ex/s x 10 keys x (1 - 0.9) = 1e4 pulls/s, as many pushes;
  // half of the pulls read LMDB: 5e3/1e5 + 5e3/5e4 = 0.15 -> 1 node.
  EXPECT_DOUBLE_EQ(p->result("shard_pulls_per_s"), 1e4);
  EXPECT_DOUBLE_EQ(p->result("ssd_reads_per_s"), 5e3);
  EXPECT_EQ(p->result("nodes_ssd_rate"), 1);
  // dim 8 uses the nearest lookup row (dim 16): 1e4/2e6 + 1e4/5e5 -> 1.
  EXPECT_EQ(input(*p, "dram_lookup_dim16").value, 2e6);
  EXPECT_EQ(p->result("nodes_shard_cpu"), 1);
  // Network: 2e4 rows/s x (8 + 32) bytes = 8e5 B/s over a 1e6 B/s NIC: 1.
  EXPECT_DOUBLE_EQ(p->result("network_bytes_per_s"), 8e5);
  EXPECT_EQ(p->result("nodes_network"), 1);
  // Training: 1e4 / 1000 per node = 10; the shards need 34.
  EXPECT_EQ(p->result("nodes_training"), 10);
  EXPECT_EQ(p->result("nodes_shards"), 34);
  EXPECT_EQ(p->result("nodes"), 34);
  EXPECT_DOUBLE_EQ(p->result("epoch_seconds"), 100);
  EXPECT_DOUBLE_EQ(p->result("ssd_per_node"), 9.6e10 / 34);

  // Every input is named with its source: option, assumption, code or row.
  EXPECT_EQ(input(*p, "hot-fraction").source, "assumption (default of --hot-fraction)");
  EXPECT_EQ(input(*p, "keys").source, "option --keys");
  EXPECT_EQ(input(*p, "encoded_row_bytes").source.rfind("code: row_layout::encoded_bytes", 0), 0u);
  EXPECT_NE(input(*p, "lmdb_read").source.find("measured: lmdb_read (small.jsonl:6)"),
            std::string::npos);
  // The blank line 7 is skipped but counted.
  EXPECT_NE(input(*p, "lmdb_write").source.find("small.jsonl:8"), std::string::npos);
}

TEST(plan, options_given_are_named_as_options) {
  auto o = small_options();
  o.given = {"--hot-fraction"};
  auto p = make_capacity_plan(o, small());
  ASSERT_TRUE(p);
  EXPECT_EQ(input(*p, "hot-fraction").source, "option --hot-fraction");
}

TEST(plan, the_network_and_the_ssd_rate_can_bind) {
  auto o = small_options();
  o.nic_gbps = 0.001;  // 1.25e5 B/s: 8e5 / 1.25e5 = 6.4 -> 7
  o.keys = 1e3;        // nothing to store
  o.examples_per_s = 2e5;  // 2e5 pulls/s: 1e5 LMDB reads/s = 1 + 2 node-seconds -> 3
  auto p = make_capacity_plan(o, small());
  ASSERT_TRUE(p);
  EXPECT_DOUBLE_EQ(p->result("network_bytes_per_s"), 1.6e7);
  EXPECT_EQ(p->result("nodes_network"), 128);  // 1.6e7 / 1.25e5
  EXPECT_EQ(p->result("nodes_ssd_rate"), 3);
  EXPECT_EQ(p->result("nodes_training"), 200);
  EXPECT_EQ(p->result("nodes_shards"), 128);
  EXPECT_EQ(p->result("nodes"), 200);
}

TEST(plan, a_node_rate_given_replaces_the_measured_one) {
  auto o = small_options();
  o.node_examples_per_s = 4000;  // 1e4 / 4000 = 2.5 -> 3
  auto p = make_capacity_plan(o, small());
  ASSERT_TRUE(p);
  EXPECT_EQ(p->result("nodes_training"), 3);
  EXPECT_EQ(input(*p, "node_examples_per_s").source, "option --node-examples-per-s");
  o.examples_per_s = 0;  // the target defaults to one node's rate
  p = make_capacity_plan(o, small());
  ASSERT_TRUE(p);
  EXPECT_EQ(input(*p, "examples_per_s").value, 4000);
  EXPECT_EQ(p->result("nodes_training"), 1);
}

TEST(plan, the_later_of_two_rows_wins) {
  // `strata bench --json-out` appends: the last run's row is the one used.
  std::string text = small_figures;
  text += R"({"name":"e2e_examples_per_s","value":2000,"unit":"examples/s"})";
  auto f = parse_bench_figures(text, "appended.jsonl");
  ASSERT_TRUE(f);
  auto p = make_capacity_plan(small_options(), *f);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->result("nodes_training"), 5);
}

TEST(plan, the_committed_figures_make_a_plan) {
  auto f = load_bench_figures(STRATA_SOURCE_DIR "/docs/benchmarks.jsonl");
  ASSERT_TRUE(f) << f.err().to_string();
  plan_options o;
  o.keys = 1e11;
  o.dim = 64;
  o.optimizer = optimizer_kind::adagrad;
  auto p = make_capacity_plan(o, *f);
  ASSERT_TRUE(p) << p.err().to_string();
  EXPECT_GE(p->result("nodes"), 1);
  // 1e11 keys of at least the raw 512 bytes on SSD.
  EXPECT_GT(p->result("ssd_bytes"), 5.12e13);
  const auto text = format_plan_text(*p);
  EXPECT_NE(text.find("plan: "), std::string::npos);
  EXPECT_NE(format_plan_json(*p).find("\"nodes\":"), std::string::npos);
}

// The plan's row sizes are the codec's: a value of encoded_row_bytes decodes,
// one byte less is refused; state words per optimizer as docs/row-format.md.
TEST(plan, row_bytes_are_the_codecs) {
  struct expect_state {
    optimizer_kind kind;
    uint32_t words_at_dim_10;
  };
  for (auto [kind, words] : std::vector<expect_state>{{optimizer_kind::sgd, 0},
                                                      {optimizer_kind::adagrad, 10},
                                                      {optimizer_kind::adam, 21},
                                                      {optimizer_kind::ftrl, 20}}) {
    EXPECT_EQ((row_layout{10, kind, true}.state_words()), words) << to_string(kind);
    for (uint32_t dim : {1u, 8u, 10u, 64u, 128u}) {
      auto o = small_options();
      o.dim = dim;
      o.optimizer = kind;
      auto p = make_capacity_plan(o, small());
      ASSERT_TRUE(p);
      const row_layout layout{dim, kind, true};
      const auto encoded = static_cast<size_t>(input(*p, "encoded_row_bytes").value);
      const auto raw = static_cast<size_t>(input(*p, "raw_row_bytes").value);
      EXPECT_EQ(raw, size_t{4} * (dim + layout.state_words()));
      std::vector<std::byte> record(layout.record_bytes()), value(encoded + 64), back(
                                                                   layout.record_bytes());
      meta_of(record.data()).version = 7;
      encode_row(layout, 42, record.data(), value.data());
      auto ok = decode_row(layout, 42, {value.data(), encoded}, back.data(), "plan_test");
      EXPECT_TRUE(ok) << to_string(kind) << " dim " << dim << ": " << ok.err().to_string();
      auto short_value = decode_row(layout, 42, {value.data(), encoded - 1}, back.data(), "plan_test");
      EXPECT_FALSE(short_value) << to_string(kind) << " dim " << dim;
      // DRAM bytes per key: raw row + the measured 40 bytes of overhead.
      EXPECT_DOUBLE_EQ(p->result("dram_bytes_per_key"), static_cast<double>(raw) + 40);
    }
  }
}

std::string error_of(const plan_options& o, const bench_figures& f) {
  auto p = make_capacity_plan(o, f);
  return p ? std::string("(no error)") : p.err().message();
}

TEST(plan, bad_options_are_named) {
  auto o = small_options();
  o.keys = -5;
  EXPECT_EQ(error_of(o, small()), "strata plan: --keys -5: must be a positive number of keys");
  o = small_options();
  o.hot_fraction = 1.5;
  EXPECT_EQ(error_of(o, small()), "strata plan: --hot-fraction 1.5: must be between 0 and 1");
  o = small_options();
  o.dim = 0;
  EXPECT_NE(error_of(o, small()).find("--dim 0: must be 1..65535"), std::string::npos);
  o = small_options();
  o.usable_fraction = 0;
  EXPECT_NE(error_of(o, small()).find("--usable-fraction 0"), std::string::npos);
  o = small_options();
  o.examples_per_s = -1;
  EXPECT_NE(error_of(o, small()).find("--examples-per-s -1"), std::string::npos);
  auto kind = parse_optimizer_name("adamw");
  ASSERT_FALSE(kind);
  EXPECT_EQ(kind.err().message(),
            "strata plan: --optimizer adamw: unknown (one of sgd, adagrad, adam, ftrl)");
  EXPECT_EQ(*parse_optimizer_name("ftrl"), optimizer_kind::ftrl);
}

TEST(plan, a_missing_row_names_the_file_and_its_bench) {
  std::string text = small_figures;
  const std::string row = text.substr(text.find("{\"name\":\"lmdb_bytes_per_key\""));
  text.erase(text.find("{\"name\":\"lmdb_bytes_per_key\""), row.find('\n') + 1);
  auto f = parse_bench_figures(text, "old.jsonl");
  ASSERT_TRUE(f);
  EXPECT_EQ(error_of(small_options(), *f),
            "old.jsonl: no row \"lmdb_bytes_per_key\" with unit \"bytes\" (measured by `strata "
            "bench tiers --json-out FILE`)");
}

TEST(plan, unusable_rows_are_named_with_file_and_line) {
  std::string text = small_figures;
  const auto at = text.find("\"value\":1000,");
  text.replace(at, 13, "\"value\":0,");
  auto f = parse_bench_figures(text, "zero.jsonl");
  ASSERT_TRUE(f);
  EXPECT_EQ(error_of(small_options(), *f),
            "zero.jsonl:10: row \"e2e_examples_per_s\": value 0 must be positive");
}

TEST(plan, malformed_lines_are_named_with_file_and_line) {
  auto bad = [](const std::string& second_line) {
    auto f = parse_bench_figures(
        std::string(R"({"name":"lmdb_read","value":1,"unit":"rows/s"})") + "\n" + second_line,
        "f.jsonl");
    return f ? std::string("(no error)") : f.err().message();
  };
  EXPECT_EQ(bad("{\"name\": \"x\", \"value\": "), bad("[1,2]"));
  EXPECT_EQ(bad("not json").rfind("f.jsonl:2: not a JSON object", 0), 0u);
  EXPECT_EQ(bad(R"({"value":1,"unit":"s"})"), "f.jsonl:2: no string \"name\"");
  EXPECT_EQ(bad(R"({"name":"x","unit":"s","value":"fast"})"), "f.jsonl:2: no number \"value\"");
  EXPECT_EQ(bad(R"({"name":"x","value":1})"), "f.jsonl:2: no string \"unit\"");
}

TEST(plan, a_missing_figures_file_is_named) {
  temp_dir dir;
  auto f = load_bench_figures(dir.path() / "none.jsonl");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.err().message(), (dir.path() / "none.jsonl").string() +
                                   ": cannot read the figures file");
}

}  // namespace
}  // namespace strata::deploy
