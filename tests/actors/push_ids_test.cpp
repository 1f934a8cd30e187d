// The shard's table of applied push ids (actors/push_ids.hpp): bounded,
// FIFO, evictions counted.
#include "actors/push_ids.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace strata::actors {
namespace {

TEST(PushIds, RemembersWhatItWasToldAndNotZero) {
  push_ids ids(4);
  EXPECT_FALSE(ids.seen(7));
  ids.remember(7);
  EXPECT_TRUE(ids.seen(7));
  ids.remember(7);  // again: held once
  EXPECT_EQ(ids.size(), 1u);
  ids.remember(0);
  EXPECT_FALSE(ids.seen(0)) << "0 means no id";
  EXPECT_EQ(ids.size(), 1u);
}

TEST(PushIds, ForgetsTheOldestWhenFullAndCountsEvictions) {
  push_ids ids(3);
  for (uint64_t id = 1; id <= 3; ++id) ids.remember(id);
  EXPECT_EQ(ids.evictions(), 0u);
  ids.remember(4);  // evicts 1
  EXPECT_FALSE(ids.seen(1));
  EXPECT_TRUE(ids.seen(2));
  EXPECT_TRUE(ids.seen(4));
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.evictions(), 1u);
  for (uint64_t id = 5; id <= 10; ++id) ids.remember(id);
  EXPECT_EQ(ids.evictions(), 7u);
  EXPECT_EQ(ids.size(), 3u);
  for (uint64_t id = 1; id <= 7; ++id) EXPECT_FALSE(ids.seen(id)) << id;
  for (uint64_t id = 8; id <= 10; ++id) EXPECT_TRUE(ids.seen(id)) << id;
}

TEST(PushIds, AFingerprintTellsPartsOfOnePushApart) {
  const std::vector<uint64_t> a = {1, 2, 3}, b = {4, 5};
  EXPECT_EQ(push_fingerprint(0, a), 0u);
  EXPECT_NE(push_fingerprint(9, a), 0u);
  EXPECT_EQ(push_fingerprint(9, a), push_fingerprint(9, a));
  EXPECT_NE(push_fingerprint(9, a), push_fingerprint(9, b));
  EXPECT_NE(push_fingerprint(9, a), push_fingerprint(10, a));
}

}  // namespace
}  // namespace strata::actors
