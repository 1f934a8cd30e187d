// feature_key(): the slot names users know (criteo_tsv's I1..I13, C1..C26)
// map to exactly the keys the reader gives the same columns, so a key
// computed by `strata key` or strata_client.key() finds the trained row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "model/features.hpp"
#include "model/reader.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::model {
namespace {

TEST(FeatureKey, CriteoNamesAreTheReadersSlots) {
  // The golden vector of features_test: slot 13 is C1.
  EXPECT_EQ(*feature_key("C1", "68fd1e64"), 0x2da8351397fab253ULL);
  EXPECT_EQ(*feature_key("C26", "68fd1e64"), 0x0f42c1b5d0477d77ULL);
  EXPECT_EQ(*feature_key("I1", "1000"), 0x2bf6e1b0fe6c450bULL);
  EXPECT_EQ(*feature_key("I13", "-100"), 0x11a2ecab23357e84ULL);
  // Integers parse as the reader does: a float with an integral meaning is floored.
  EXPECT_EQ(*feature_key("I1", "1000.0"), integer_key(0, 1000));
  // A plain number is a categorical slot.
  EXPECT_EQ(*feature_key("13", "68fd1e64"), categorical_key(13, "68fd1e64"));
}

TEST(FeatureKey, UnknownSlotsAndBadIntegersAreNamed) {
  for (const char* bad : {"", "C0", "C27", "I0", "I14", "X1", "C", "c1", "C1x", "-3"}) {
    auto k = feature_key(bad, "68fd1e64");
    ASSERT_FALSE(k.has_value()) << bad;
    EXPECT_EQ(k.err().code(), errc::invalid_argument);
    EXPECT_NE(k.err().message().find("unknown slot '" + std::string(bad) + "'"), std::string::npos)
        << k.err().message();
    EXPECT_NE(k.err().message().find("C1..C26"), std::string::npos) << k.err().message();
  }
  auto k = feature_key("I2", "68fd1e64");
  ASSERT_FALSE(k.has_value());
  EXPECT_NE(k.err().message().find("slot I2 is an integer column: '68fd1e64' is not an integer"),
            std::string::npos)
      << k.err().message();
}

TEST(FeatureKey, MatchesTheKeysTheReaderGivesALine) {
  testing::temp_dir dir;
  const auto path = dir.path() / "one.tsv";
  std::string line = "1";
  for (int i = 0; i < 13; ++i) line += "\t" + std::to_string(i * 7 - 3);
  for (int c = 0; c < 26; ++c) line += "\t" + std::to_string(1000 + c) + "abc";
  std::ofstream(path) << line << "\n";
  reader_config config;
  config.path = path;
  config.format = data_format::criteo_tsv;
  auto r = reader::open(config);
  ASSERT_TRUE(r.has_value()) << r.err().to_string();
  auto got = (*r)->next();
  ASSERT_TRUE(got.has_value()) << got.err().to_string();
  ASSERT_TRUE(got->has_value());
  const example& e = **got;
  ASSERT_EQ(e.features.size(), 39u);
  for (int i = 0; i < 13; ++i)
    EXPECT_EQ(e.features[i].key,
              *feature_key("I" + std::to_string(i + 1), std::to_string(i * 7 - 3)));
  for (int c = 0; c < 26; ++c)
    EXPECT_EQ(e.features[13 + c].key,
              *feature_key("C" + std::to_string(c + 1), std::to_string(1000 + c) + "abc"));
}

}  // namespace
}  // namespace strata::model
