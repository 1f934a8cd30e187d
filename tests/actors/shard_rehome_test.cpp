// A drained shard (docs/multi-node.md "Draining a node"): once a committed
// map names another actor as shards[its index] (its successor on another
// node), the old shard owns nothing: it forwards every key to the successor
// and drops its own rows. Before, it compared only owners[p] with its index
// and went on serving its old rows.
#include <gtest/gtest.h>

#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
#include "common/hash.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::actor_harness;
using strata::testing::exact_sum_table;
using strata::testing::temp_dir;

TEST(ShardRehome, AReplacedShardForwardsEveryKeyToItsSuccessorAndDropsItsRows) {
  temp_dir old_dir, new_dir;
  actor_harness h;
  const table_config table = exact_sum_table(2);
  auto old_shard =
      spawn_shard(h.system(), strata::testing::test_shard_config(old_dir.path(), 0, table, 16));
  ASSERT_TRUE(old_shard) << old_shard.err().to_string();
  auto successor =
      spawn_shard(h.system(), strata::testing::test_shard_config(new_dir.path(), 0, table, 16));
  ASSERT_TRUE(successor) << successor.err().to_string();

  // Key 7 holds 5 on the old shard; the successor never saw it.
  push_request req;
  req.keys = {7};
  req.grads = {-5, -5};
  h.call<push_reply>(*old_shard, push_atom::value, req);

  // The drain's commit: the same owners (all shard 0), shards[0] is the
  // successor. Both get it.
  routing_table t;
  t.epoch = 2;
  t.owners.assign(64, 0);
  t.shards = {caf::actor_cast<caf::actor>(*successor)};
  h.call<ok_atom>(*successor, commit_atom::value, t);
  h.call<ok_atom>(*old_shard, commit_atom::value, t);

  // A pull through the old shard is the successor's answer (a fresh row),
  // not the old shard's 5.
  auto via_old = h.call<pull_reply>(*old_shard, pull_atom::value, std::vector<uint64_t>{7});
  ASSERT_EQ(via_old.rows.keys, (std::vector<uint64_t>{7}));
  EXPECT_EQ(weights_of(rows_of(via_old.rows, table.layout)[0])[0], 0.0f)
      << "the replaced shard served its own row";
  // A push through it lands on the successor.
  req.grads = {-2, -2};
  h.call<push_reply>(*old_shard, push_atom::value, req);
  auto on_successor = h.call<pull_reply>(*successor, pull_atom::value, std::vector<uint64_t>{7});
  EXPECT_EQ(weights_of(rows_of(on_successor.rows, table.layout)[0])[0], 2.0f);
  // The old shard keeps no row.
  auto stats = h.call<tier_stats>(*old_shard, stats_atom::value);
  EXPECT_EQ(stats.rows, 0u);
  // Both stop before the actor system goes (it waits for every actor).
  caf::anon_send_exit(*old_shard, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*successor, caf::exit_reason::user_shutdown);
  h.sched().run();
}

// Between a scale's fence and its commit, a request for a moving partition
// that reached the destination (whose map still names the source) went to
// the source, fenced, which forwarded it back, and so on without end: with
// two such ping-pongs on CAF's two scheduler threads nothing else ran, the
// coordinator never sent the commit that would end them, and the cluster
// hung with its memory growing (ScaleMetrics.OneProcess... in CI: a 4 -> 2
// scale never answered). The destination now serves what the fenced source
// forwards to it. The partition here holds no row, so only the fence's
// (empty) batch tells the destination that the source migrates to it.
TEST(ShardForwarding, ARequestAFencedSourceForwardsIsServedByItsDestinationNotSentBack) {
  temp_dir a_dir, b_dir;
  actor_harness h;
  const table_config table = exact_sum_table(2);
  auto a = spawn_shard(h.system(), strata::testing::test_shard_config(a_dir.path(), 0, table, 16));
  ASSERT_TRUE(a) << a.err().to_string();
  auto b = spawn_shard(h.system(), strata::testing::test_shard_config(b_dir.path(), 1, table, 16));
  ASSERT_TRUE(b) << b.err().to_string();
  // Epoch 2: shard 0 owns every partition.
  routing_table t;
  t.epoch = 2;
  t.owners.assign(64, 0);
  t.shards = {caf::actor_cast<caf::actor>(*a), caf::actor_cast<caf::actor>(*b)};
  h.call<ok_atom>(*a, commit_atom::value, t);
  h.call<ok_atom>(*b, commit_atom::value, t);
  // Epoch 3 moves key 9's partition (no row yet) to shard 1: copy, fence.
  migration_order order;
  order.epoch = 3;
  order.partitions = {partition_of(9, 64)};
  order.destinations = {caf::actor_cast<caf::actor>(*b)};
  h.call<migration_stats>(*a, migrate_atom::value, order);
  h.call<migration_stats>(*a, fence_atom::value, uint64_t{3});

  // Before the commit reaches shard 1, a pull and a push of key 9 through it.
  auto pulled = h.ask<pull_reply>(*b, pull_atom::value, std::vector<uint64_t>{9});
  h.sched().run(10000);
  ASSERT_TRUE(pulled->value) << "no answer after 10000 jobs: the pull went back and forth";
  EXPECT_EQ(weights_of(rows_of(pulled->value->rows, table.layout)[0])[0], 0.0f);
  push_request req;
  req.keys = {9};
  req.grads = {-3, -3};
  auto pushed = h.ask<push_reply>(*b, push_atom::value, req);
  h.sched().run(10000);
  ASSERT_TRUE(pushed->value) << "no answer after 10000 jobs: the push went back and forth";
  // The row lives on shard 1, the partition's owner from epoch 3 on.
  auto on_b = h.call<tier_stats>(*b, stats_atom::value);
  EXPECT_EQ(on_b.rows, 1u);
  auto on_a = h.call<tier_stats>(*a, stats_atom::value);
  EXPECT_EQ(on_a.rows, 0u);
  // After the commit, shard 1 serves it, whoever asks.
  t.epoch = 3;
  t.owners[partition_of(9, 64)] = 1;
  h.call<ok_atom>(*a, commit_atom::value, t);
  h.call<ok_atom>(*b, commit_atom::value, t);
  auto via_a = h.call<pull_reply>(*a, pull_atom::value, std::vector<uint64_t>{9});
  EXPECT_EQ(weights_of(rows_of(via_a.rows, table.layout)[0])[0], 3.0f);
  caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*b, caf::exit_reason::user_shutdown);
  h.sched().run();
}

}  // namespace
}  // namespace strata::actors
