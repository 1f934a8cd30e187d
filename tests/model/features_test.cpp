// Golden vectors of the feature hashes. They define the keys of every stored
// model: if this test fails, trained tables no longer match their data. Do
// not update these values; add a new hash version instead.
#include "model/features.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace strata::model {
namespace {

struct categorical_golden {
  uint32_t slot;
  const char* value;
  uint64_t key;
};
struct integer_golden {
  uint32_t slot;
  int64_t value;
  uint64_t key;
};
struct ffm_golden {
  uint32_t field;
  uint64_t feature;
  uint64_t key;
};

constexpr categorical_golden categorical_vectors[] = {
    {0, "", 0x55883145105584f3ULL},          {0, "05db9164", 0x734abffa527905d5ULL},
    {0, "68fd1e64", 0x7e4a6f574b61cbdbULL},  {0, "a", 0x7a4ac4afff21bbf3ULL},
    {13, "", 0x84ebf0d219079b9dULL},         {13, "05db9164", 0x0bb4c4012086cb80ULL},
    {13, "68fd1e64", 0x2da8351397fab253ULL}, {13, "a", 0x4f14bee269c12edbULL},
    {38, "", 0x6d380e243d5cd1b0ULL},         {38, "05db9164", 0x8e9ab2b2b3843b3fULL},
    {38, "68fd1e64", 0x0f42c1b5d0477d77ULL}, {38, "a", 0x3cffa873d644978bULL},
};
constexpr integer_golden integer_vectors[] = {
    {0, -100, 0xdaf224881c07d2a0ULL},  {0, -8, 0xdaf224881c07d2a0ULL},
    {0, -1, 0x55e779f83abe7ca6ULL},    {0, 0, 0x456bb809df60a231ULL},
    {0, 1, 0x28b56f2566b673c8ULL},     {0, 2, 0x3d1bdc77358ebbc0ULL},
    {0, 3, 0x3d1bdc77358ebbc0ULL},     {0, 4, 0x2bfe469db6e0fd37ULL},
    {0, 1000, 0x2bf6e1b0fe6c450bULL},  {0, 9000000000000000000LL, 0x9468be482c5abdc5ULL},
    {12, -100, 0x11a2ecab23357e84ULL}, {12, -8, 0x11a2ecab23357e84ULL},
    {12, -1, 0xfcfd1988f9ceb2eaULL},   {12, 0, 0x86628c06d37bcca5ULL},
    {12, 1, 0x6be12891e73a577aULL},    {12, 2, 0x7077d1dc9957103eULL},
    {12, 3, 0x7077d1dc9957103eULL},    {12, 4, 0x714c98def3576f2aULL},
    {12, 1000, 0xae646b929c5324acULL}, {12, 9000000000000000000LL, 0x3c6df49ca33ef94eULL},
};
constexpr ffm_golden ffm_vectors[] = {
    {0, 0, 0xdd90f309bcfb613eULL},     {0, 1163, 0x9dd5c09e423021e2ULL},
    {0, 9714, 0x390218b4520b63a2ULL},  {17, 0, 0xf4f69f8646c437b6ULL},
    {17, 1163, 0xd2c5188dd98ee6e2ULL}, {17, 9714, 0x7f0ee0b60df3694bULL},
};

TEST(Features, CategoricalGolden) {
  for (const auto& g : categorical_vectors) {
    SCOPED_TRACE(std::to_string(g.slot) + ":" + g.value);
    EXPECT_EQ(categorical_key(g.slot, g.value), g.key);
  }
}

TEST(Features, IntegerGolden) {
  for (const auto& g : integer_vectors) {
    SCOPED_TRACE(std::to_string(g.slot) + ":" + std::to_string(g.value));
    EXPECT_EQ(integer_key(g.slot, g.value), g.key);
  }
}

TEST(Features, FfmGolden) {
  for (const auto& g : ffm_vectors) {
    SCOPED_TRACE(std::to_string(g.field) + ":" + std::to_string(g.feature));
    EXPECT_EQ(ffm_key(g.field, g.feature), g.key);
  }
}

TEST(Features, SlotSeparatesEqualValues) {
  EXPECT_NE(categorical_key(13, "05db9164"), categorical_key(14, "05db9164"));
  EXPECT_NE(integer_key(0, 5), integer_key(1, 5));
  EXPECT_NE(ffm_key(0, 7), ffm_key(1, 7));
}

TEST(Features, IntegerBuckets) {
  // 1 + floor(log2 v) for v > 0: 2 and 3 share a bucket, 4..7 share the next.
  EXPECT_EQ(integer_key(3, 2), integer_key(3, 3));
  EXPECT_EQ(integer_key(3, 4), integer_key(3, 7));
  EXPECT_NE(integer_key(3, 7), integer_key(3, 8));
  EXPECT_EQ(integer_key(3, 1024), integer_key(3, 2047));
  // v <= 0 is its own bucket, clamped at -8.
  EXPECT_NE(integer_key(3, 0), integer_key(3, 1));
  EXPECT_NE(integer_key(3, 0), integer_key(3, -1));
  EXPECT_NE(integer_key(3, -7), integer_key(3, -8));
  EXPECT_EQ(integer_key(3, -8), integer_key(3, -1000000));
  // All buckets of one slot are distinct keys.
  std::set<uint64_t> keys;
  for (int64_t bucket = -8; bucket <= 0; ++bucket) keys.insert(integer_key(3, bucket));
  for (int shift = 0; shift < 63; ++shift) keys.insert(integer_key(3, int64_t{1} << shift));
  EXPECT_EQ(keys.size(), 9u + 63u);
}

TEST(Features, CategoricalHashesBytesNotHexValue) {
  // "0a" and "a" are different raw values.
  EXPECT_NE(categorical_key(20, "0a"), categorical_key(20, "a"));
  EXPECT_NE(categorical_key(20, ""), categorical_key(20, "0"));
}

}  // namespace
}  // namespace strata::model
