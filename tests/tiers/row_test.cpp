#include "tiers/row.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

TEST(RowLayout, StateWordsPerOptimizer) {
  EXPECT_EQ((row_layout{8, optimizer_kind::sgd, true}).state_words(), 0u);
  EXPECT_EQ((row_layout{8, optimizer_kind::adagrad, true}).state_words(), 8u);
  EXPECT_EQ((row_layout{8, optimizer_kind::adam, true}).state_words(), 17u);
  EXPECT_EQ((row_layout{8, optimizer_kind::ftrl, true}).state_words(), 16u);
  EXPECT_EQ((row_layout{8, optimizer_kind::adam, false}).state_words(), 0u);  // serving
  row_layout l{64, optimizer_kind::adagrad, true};
  EXPECT_EQ(l.record_bytes(), 16u + 4u * 128u);
  EXPECT_EQ(l.encoded_bytes(), 32u + 4u * 128u);
  EXPECT_EQ(l.raw_bytes(), 512u);
}

TEST(Version, IncarnationAndCounter) {
  const uint64_t v = make_version(3, 12345);
  EXPECT_EQ(incarnation_of(v), 3u);
  EXPECT_EQ(counter_of(v), 12345u);
  // A new incarnation supersedes any counter of the old one.
  EXPECT_GT(make_version(4, 0), make_version(3, version_counter_mask));
}

class RowEncoding : public ::testing::TestWithParam<optimizer_kind> {};

TEST_P(RowEncoding, RoundTripIsBitExact) {
  const row_layout layout{16, GetParam(), true};
  const std::vector<uint64_t> keys{1, 99, 0xffffffffffffffffULL};
  auto records = testing::make_records(layout, keys, 5);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::byte* rec = records.data() + i * layout.record_bytes();
    std::vector<std::byte> enc(layout.encoded_bytes());
    encode_row(layout, keys[i], rec, enc.data());
    std::vector<std::byte> back(layout.record_bytes());
    auto kind = decode_row(layout, keys[i], enc, back.data(), "table 't'");
    ASSERT_TRUE(kind) << kind.err().to_string();
    EXPECT_EQ(*kind, decoded_kind::row);
    EXPECT_TRUE(same_row(layout, rec, back.data()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, RowEncoding,
                         ::testing::Values(optimizer_kind::sgd, optimizer_kind::adagrad,
                                           optimizer_kind::adam, optimizer_kind::ftrl));

struct encoded_fixture {
  row_layout layout{8, optimizer_kind::adagrad, true};
  std::vector<std::byte> record = testing::make_records(layout, {42}, 1);
  std::vector<std::byte> enc = std::vector<std::byte>(layout.encoded_bytes());
  std::vector<std::byte> out = std::vector<std::byte>(layout.record_bytes());
  encoded_fixture() { encode_row(layout, 42, record.data(), enc.data()); }
};

TEST(RowEncoding, EveryFlippedPayloadOrHeaderBitIsDetected) {
  encoded_fixture f;
  for (size_t byte = 0; byte < f.enc.size(); ++byte) {
    if (byte >= 16 && byte < 32) continue;  // crc itself, access metadata, reserved
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = f.enc;
      bad[byte] ^= std::byte(1u << bit);
      auto r = decode_row(f.layout, 42, bad, f.out.data(), "table 't' at /x");
      ASSERT_FALSE(r) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(RowEncoding, ChecksumCoversTheKeyAndNamesIt) {
  encoded_fixture f;
  auto r = decode_row(f.layout, 43, f.enc, f.out.data(), "table 'ads' at /data/s0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code(), errc::corrupt_data);
  EXPECT_NE(r.err().message().find("key 43"), std::string::npos);
  EXPECT_NE(r.err().message().find("table 'ads' at /data/s0"), std::string::npos);
}

TEST(RowEncoding, AccessMetadataIsNotChecksummed) {
  encoded_fixture f;
  f.enc[20] ^= std::byte{0xff};  // freq
  f.enc[24] ^= std::byte{0x0f};  // tick
  auto r = decode_row(f.layout, 42, f.enc, f.out.data(), "t");
  ASSERT_TRUE(r);
  EXPECT_EQ(meta_of(f.out.data()).version, meta_of(f.record.data()).version);
}

TEST(RowEncoding, TruncatedAndWrongLayoutAreRefused) {
  encoded_fixture f;
  auto shorter = std::span<const std::byte>(f.enc).first(f.enc.size() - 4);
  auto r = decode_row(f.layout, 42, shorter, f.out.data(), "t");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code(), errc::corrupt_data);
  auto r2 = decode_row(row_layout{8, optimizer_kind::sgd, true}, 42, f.enc, f.out.data(), "t");
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.err().code(), errc::format_mismatch);
  auto tiny = std::span<const std::byte>(f.enc).first(10);
  EXPECT_FALSE(decode_row(f.layout, 42, tiny, f.out.data(), "t"));
  f.enc[0] = std::byte{9};  // another format version
  auto r3 = decode_row(f.layout, 42, f.enc, f.out.data(), "t");
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.err().code(), errc::format_mismatch);
}

TEST(RowEncoding, Tombstone) {
  row_layout layout{8, optimizer_kind::sgd, true};
  std::vector<std::byte> enc(encoded_header_bytes);
  encode_tombstone(layout, 7, make_version(1, 9), enc.data());
  std::vector<std::byte> out(layout.record_bytes());
  auto r = decode_row(layout, 7, enc, out.data(), "t");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, decoded_kind::tombstone);
  EXPECT_EQ(meta_of(out.data()).version, make_version(1, 9));
  EXPECT_FALSE(decode_row(layout, 8, enc, out.data(), "t"));  // key is checksummed
}

}  // namespace
}  // namespace strata
