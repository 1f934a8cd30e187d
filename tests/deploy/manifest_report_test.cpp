// What `strata validate` reports in one run (issue 22): the field errors and
// the rules between fields together, an unknown key with the key it most
// likely meant, and warnings for files launch needs that are not here and
// for a store whose rows the next launch removes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "deploy/manifest.hpp"
#include "deploy/manifest_warnings.hpp"
#include "tests/deploy/manifest_lines.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

using manifest_lines::error_of;

std::string text_with(std::vector<std::pair<size_t, std::string>> edits,
                      const std::string& more = "") {
  auto lines = manifest_lines::base_lines;
  for (const auto& [line, text] : edits) lines.at(line - 1) = text;
  return manifest_lines::text_of(lines) + more;
}

bool holds(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Before: the staleness rule was only reported once dram_bytes was fixed.
TEST(ManifestReport, FieldErrorsAndRuleErrorsComeInOneRun) {
  const std::string e = error_of(text_with({{5, "  dram_bytes: lots"}, {9, "  staleness: 3"}}));
  EXPECT_TRUE(holds(e, "m.yaml:5: shards.dram_bytes: expected a size like 64MiB, got \"lots\""))
      << e;
  EXPECT_TRUE(holds(e,
                    "m.yaml:9: caches.staleness: async mode needs staleness >= "
                    "workers.prefetch_depth + workers.max_in_flight (2 + 2 = 4), got 3"))
      << e;
  // Sorted by line: the field error first.
  EXPECT_LT(e.find("m.yaml:5:"), e.find("m.yaml:9:")) << e;
}

// A rule that would judge a field's default (its value did not parse) says
// nothing: only the field error is reported.
TEST(ManifestReport, ARuleAboutAFieldThatFailedIsLeftOut) {
  const std::string e =
      error_of(text_with({{12, "  prefetch_depth: deep"}, {9, "  staleness: 3"}}));
  EXPECT_TRUE(holds(e, "m.yaml:12: workers.prefetch_depth: expected a whole number")) << e;
  EXPECT_FALSE(holds(e, "caches.staleness")) << e;
  // The same for a rule at the failed field itself.
  const std::string budget = error_of(text_with({{5, "  dram_bytes: 1x"}}));
  EXPECT_EQ(budget, "m.yaml:5: shards.dram_bytes: expected a size like 64MiB, got \"1x\"");
}

// A node without a name: its placements are not called unknown.
TEST(ManifestReport, ANodeWithoutANameDoesNotMakeItsPlacementsUnknown) {
  const std::string e =
      error_of(text_with({{4, "  count: 1"}, {5, "  placement: [n0]"}},
                         "cluster_secret:\n  file: /tmp/s\nnodes:\n  - host: 127.0.0.1\n"));
  EXPECT_TRUE(holds(e, "nodes[0].name: required field missing")) << e;
  EXPECT_FALSE(holds(e, "unknown node")) << e;
}

TEST(ManifestReport, AnUnknownKeyNamesTheKeyItMostLikelyMeant) {
  const std::string e = error_of(text_with({{4, "  cout: 2"}}));
  EXPECT_TRUE(holds(e,
                    "m.yaml:4: shards.cout: unknown key, did you mean 'count'? (expected one "
                    "of: "))
      << e;
  EXPECT_TRUE(holds(e, ", count, ")) << e;  // the whole list stays
  EXPECT_TRUE(holds(error_of(text_with({}, "workrs:\n  count: 1\n")),
                    "m.yaml:16: workrs: unknown key, did you mean 'workers'?"));
  EXPECT_TRUE(holds(error_of(text_with({}, "serving:\n  http_prot: 1\n")),
                    "serving.http_prot: unknown key, did you mean 'http_port'?"));
  // Nothing close: the list alone.
  const std::string far = error_of(text_with({{4, "  colour: 2"}}));
  EXPECT_TRUE(holds(far, "shards.colour: unknown key (expected one of: ")) << far;
}

TEST(ManifestReport, MissingFilesLaunchNeedsAreWarnings) {
  strata::testing::temp_dir dir;
  const auto data = dir.path() / "d.tsv";
  const auto token = dir.path() / "admin.token";
  const auto secret = dir.path() / "cluster.secret";
  const std::string text = text_with({{15, "  path: " + data.string()}},
                                     "admin:\n  port: 7070\n  token_file: " + token.string() +
                                         "\ncluster_secret:\n  file: " + secret.string() + "\n");
  auto m = parse_manifest(text, "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  auto w = manifest_warnings(*m);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_TRUE(holds(w[0], "m.yaml: data.path: " + data.string() +
                              " does not exist on this machine (strata launch refuses"))
      << w[0];
  EXPECT_TRUE(holds(w[1], "m.yaml: admin.token_file: " + token.string() + " does not exist"))
      << w[1];
  EXPECT_TRUE(holds(w[2], "m.yaml: cluster_secret.file: " + secret.string() + " does not exist"))
      << w[2];
  // Present: no warnings.
  for (const auto& f : {data, token, secret}) std::ofstream(f) << "x\n";
  EXPECT_TRUE(manifest_warnings(*m).empty());
  // A directory as data: named.
  std::filesystem::remove(data);
  std::filesystem::create_directory(data);
  w = manifest_warnings(*m);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(holds(w[0], "data.path: " + data.string() + " is not a regular file")) << w[0];
  // Files launch creates are not warned about.
  auto created = parse_manifest(
      text_with({}, "admin:\n  port: 7070\n  token_file: " + (dir.path() / "no").string() +
                        "\n  create_if_missing: true\n"),
      "m.yaml");
  ASSERT_TRUE(created) << created.err().message();
  for (const auto& warning : manifest_warnings(*created))
    EXPECT_FALSE(holds(warning, "admin.token_file")) << warning;
}

// Before: nothing said that the next launch removes a store's rows.
TEST(ManifestReport, AStoreWithoutCheckpointsIsWarnedItsRowsGo) {
  const std::string store =
      text_with({{11, "  count: 0"}, {12, "  prefetch_depth: 1"}}, "gateway:\n  port: 7080\n");
  auto m = parse_manifest(store, "m.yaml");
  ASSERT_TRUE(m) << m.err().message();
  const std::string w = store_without_checkpoint_warning(*m);
  EXPECT_TRUE(holds(w,
                    "m.yaml: a store (workers.count 0) without a checkpoint section: every "
                    "strata launch starts fresh and removes the rows under /tmp/state"))
      << w;
  EXPECT_TRUE(holds(w, "add checkpoint: {dir: PATH}")) << w;
  auto kept = parse_manifest(store + "checkpoint:\n  dir: /tmp/ckpt\n", "m.yaml");
  ASSERT_TRUE(kept) << kept.err().message();
  EXPECT_EQ(store_without_checkpoint_warning(*kept), "");
  // A training cluster keeps its data, not its rows: no such warning.
  auto training = parse_manifest(text_with({}), "m.yaml");
  ASSERT_TRUE(training);
  EXPECT_EQ(store_without_checkpoint_warning(*training), "");
}

}  // namespace
}  // namespace strata::deploy
