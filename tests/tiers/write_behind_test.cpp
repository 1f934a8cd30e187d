#include "tiers/write_behind.hpp"

#include <gtest/gtest.h>

#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

const row_layout layout{4, optimizer_kind::sgd, true};

std::vector<std::byte> rows_with_version(const std::vector<uint64_t>& keys, uint64_t version) {
  auto recs = testing::make_records(layout, keys, static_cast<uint32_t>(version));
  for (size_t i = 0; i < keys.size(); ++i)
    meta_of(recs.data() + i * layout.record_bytes()).version = version;
  return recs;
}

uint64_t version_in(write_behind_buffer& wb, uint64_t key) {
  std::vector<std::byte> out(layout.record_bytes());
  std::vector<uint32_t> misses;
  EXPECT_TRUE(wb.lookup({&key, 1}, {out.data(), out.size()}, misses));
  return misses.empty() ? meta_of(out.data()).version : 0;
}

TEST(WriteBehind, RowsStayReadableUntilTheirBatchIsConfirmed) {
  write_behind_buffer wb(layout);
  row_buffer none(layout);
  std::vector<uint64_t> keys{1, 2, 3};
  auto recs = rows_with_version(keys, 5);
  ASSERT_TRUE(wb.store(keys, {recs.data(), layout.record_bytes()}, true, none));
  row_buffer batch;
  uint64_t seq = 0;
  ASSERT_TRUE(wb.take_batch(batch, seq));
  EXPECT_EQ(batch.size(), 3u);
  EXPECT_EQ(wb.in_flight_batches(), 1u);
  EXPECT_EQ(version_in(wb, 2), 5u);  // still readable while in flight
  wb.release(seq);
  EXPECT_EQ(wb.size(), 0u);
  EXPECT_EQ(version_in(wb, 2), 0u);
  EXPECT_FALSE(wb.take_batch(batch, seq));  // nothing left
}

TEST(WriteBehind, NewerCopySurvivesReleaseOfOlderBatch) {
  write_behind_buffer wb(layout);
  row_buffer none(layout);
  std::vector<uint64_t> k{7};
  auto v1 = rows_with_version(k, 1);
  auto v2 = rows_with_version(k, 2);
  ASSERT_TRUE(wb.store(k, {v1.data(), layout.record_bytes()}, true, none));
  row_buffer b1, b2;
  uint64_t s1 = 0, s2 = 0;
  ASSERT_TRUE(wb.take_batch(b1, s1));
  ASSERT_TRUE(wb.store(k, {v2.data(), layout.record_bytes()}, true, none));
  wb.release(s1);  // the flushed copy was version 1; version 2 must stay
  EXPECT_EQ(version_in(wb, 7), 2u);
  ASSERT_TRUE(wb.take_batch(b2, s2));
  EXPECT_GT(s2, s1);
  EXPECT_EQ(meta_of(b2.record(0)).version, 2u);
  wb.release(s2);
  EXPECT_EQ(version_in(wb, 7), 0u);
}

TEST(WriteBehind, RequeuedSameKeyIsFlushedOnceWithNewestCopy) {
  write_behind_buffer wb(layout);
  row_buffer none(layout);
  std::vector<uint64_t> k{1, 1, 2};
  auto recs = rows_with_version({1, 1, 2}, 3);
  meta_of(recs.data() + layout.record_bytes()).version = 4;  // second copy of key 1 is newer
  ASSERT_TRUE(wb.store(k, {recs.data(), layout.record_bytes()}, true, none));
  row_buffer batch;
  uint64_t seq;
  ASSERT_TRUE(wb.take_batch(batch, seq));
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch.key(0), 1u);
  EXPECT_EQ(meta_of(batch.record(0)).version, 4u);
}

TEST(WriteBehind, UnknownOrRepeatedReleaseIsHarmless) {
  write_behind_buffer wb(layout);
  row_buffer none(layout);
  std::vector<uint64_t> k{1};
  auto recs = rows_with_version(k, 1);
  ASSERT_TRUE(wb.store(k, {recs.data(), layout.record_bytes()}, true, none));
  wb.release(99);
  EXPECT_EQ(version_in(wb, 1), 1u);
  row_buffer batch;
  uint64_t seq;
  ASSERT_TRUE(wb.take_batch(batch, seq));
  wb.release(seq);
  wb.release(seq);
  EXPECT_EQ(wb.size(), 0u);
}

TEST(WriteBehind, EraseDropsQueuedRows) {
  write_behind_buffer wb(layout);
  row_buffer none(layout);
  std::vector<uint64_t> k{1, 2};
  auto recs = rows_with_version(k, 1);
  ASSERT_TRUE(wb.store(k, {recs.data(), layout.record_bytes()}, true, none));
  std::vector<uint64_t> gone{1};
  ASSERT_TRUE(wb.erase(gone));
  row_buffer batch;
  uint64_t seq;
  ASSERT_TRUE(wb.take_batch(batch, seq));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch.key(0), 2u);
}

}  // namespace
}  // namespace strata
