#include "model/datagen.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "model/reader.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::model {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

datagen_config small_config(const std::filesystem::path& output) {
  datagen_config c;
  c.output = output;
  c.rows = 20000;
  c.distinct_keys = 5000;
  c.seed = 7;
  return c;
}

TEST(Datagen, DeterministicInSeed) {
  strata::testing::temp_dir dir;
  auto a = small_config(dir.path() / "a.tsv");
  auto b = small_config(dir.path() / "b.tsv");
  auto c = small_config(dir.path() / "c.tsv");
  c.seed = 8;
  auto qa = generate(a), qb = generate(b), qc = generate(c);
  ASSERT_TRUE(qa) << qa.err().to_string();
  ASSERT_TRUE(qb && qc);
  EXPECT_EQ(slurp(a.output), slurp(b.output));
  EXPECT_NE(slurp(a.output), slurp(c.output));
  EXPECT_EQ(qa->auc, qb->auc);
  EXPECT_EQ(qa->logloss, qb->logloss);
}

TEST(Datagen, ReadableWithSensibleLabelsAndKeys) {
  strata::testing::temp_dir dir;
  auto config = small_config(dir.path() / "data.tsv");
  uint64_t last_progress = 0;
  auto quality = generate(config, [&](uint64_t rows) { last_progress = rows; });
  ASSERT_TRUE(quality) << quality.err().to_string();
  EXPECT_EQ(last_progress, config.rows);

  reader_config rc;
  rc.format = data_format::criteo_tsv;
  rc.path = config.output;
  rc.max_bad_lines = 0;
  auto r = reader::open(rc);
  ASSERT_TRUE(r);
  uint64_t rows = 0, positives = 0, integer_features = 0;
  std::set<uint64_t> categorical;
  for (;;) {
    auto b = (*r)->next_batch(1000);
    ASSERT_TRUE(b) << b.err().to_string();
    if (b->examples.empty()) break;
    for (const auto& e : b->examples) {
      ++rows;
      positives += e.label == 1;
      for (const auto& f : e.features) {
        if (f.slot < 13)
          ++integer_features;
        else
          categorical.insert(f.key);
      }
    }
  }
  EXPECT_EQ(rows, config.rows);
  EXPECT_TRUE((*r)->bad_lines().empty());
  const double rate = static_cast<double>(positives) / static_cast<double>(rows);
  EXPECT_GT(rate, 0.15);
  EXPECT_LT(rate, 0.35);
  // Some integer values are missing, most are present.
  EXPECT_LT(integer_features, 13 * rows);
  EXPECT_GT(integer_features, 10 * rows);
  // Zipf over 5000 values: most are drawn in 20000 rows, never more.
  EXPECT_LE(categorical.size(), config.distinct_keys);
  EXPECT_GT(categorical.size(), config.distinct_keys / 2);

  EXPECT_GT(quality->auc, 0.62);
  EXPECT_LT(quality->auc, 0.9);
  EXPECT_GT(quality->logloss, 0.2);
  EXPECT_LT(quality->logloss, 0.6);  // better than the constant rate's ~0.54
}

TEST(Datagen, StrongerWeightsGiveHigherPlantedAuc) {
  strata::testing::temp_dir dir;
  auto weak = small_config(dir.path() / "weak.tsv");
  auto strong = small_config(dir.path() / "strong.tsv");
  weak.weight_stddev = 0.3;
  strong.weight_stddev = 2.0;
  auto qw = generate(weak), qs = generate(strong);
  ASSERT_TRUE(qw && qs);
  EXPECT_LT(qw->auc, qs->auc);
  EXPECT_GT(qs->auc, 0.8);
}

TEST(Datagen, PlantedRoundTrip) {
  strata::testing::temp_dir dir;
  auto config = small_config(dir.path() / "data.tsv");
  auto quality = generate(config);
  ASSERT_TRUE(quality);
  auto back = read_planted(config.output);
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_NEAR(back->auc, quality->auc, 1e-8);
  EXPECT_NEAR(back->logloss, quality->logloss, 1e-8);
  EXPECT_EQ(slurp(dir.path() / "data.tsv.planted").substr(0, 4), "auc ");

  auto missing = read_planted(dir.path() / "nothing.tsv");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code(), errc::not_found);
  std::ofstream(dir.path() / "junk.tsv.planted") << "hello\n";
  auto junk = read_planted(dir.path() / "junk.tsv");
  ASSERT_FALSE(junk);
  EXPECT_EQ(junk.err().code(), errc::corrupt_data);
}

TEST(Datagen, UnwritablePathIsAnErrorNamingIt) {
  strata::testing::temp_dir dir;
  auto config = small_config(dir.path() / "no_such_dir" / "data.tsv");
  auto quality = generate(config);
  ASSERT_FALSE(quality);
  EXPECT_EQ(quality.err().code(), errc::io_error);
  EXPECT_NE(quality.err().message().find(config.output.string()), std::string::npos);
}

TEST(Datagen, FullDiskIsDiskFull) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  datagen_config config = small_config("/dev/full");
  auto quality = generate(config);
  ASSERT_FALSE(quality);
  EXPECT_EQ(quality.err().code(), errc::disk_full);
  EXPECT_NE(quality.err().message().find("/dev/full"), std::string::npos);
}

TEST(Datagen, RejectsTooFewKeys) {
  strata::testing::temp_dir dir;
  auto config = small_config(dir.path() / "data.tsv");
  config.distinct_keys = 10;
  auto quality = generate(config);
  ASSERT_FALSE(quality);
  EXPECT_EQ(quality.err().code(), errc::invalid_argument);
}

}  // namespace
}  // namespace strata::model
