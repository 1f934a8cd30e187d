// A drained shard (docs/multi-node.md "Draining a node"): once a committed
// map names another actor as shards[its index] (its successor on another
// node), the old shard owns nothing: it forwards every key to the successor
// and drops its own rows. Before, it compared only owners[p] with its index
// and went on serving its old rows.
#include <gtest/gtest.h>

#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
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
  auto old_shard = spawn_shard(h.system(), strata::testing::test_shard_config(old_dir.path(), 0,
                                                                              table, 16));
  ASSERT_TRUE(old_shard) << old_shard.err().to_string();
  auto successor = spawn_shard(h.system(), strata::testing::test_shard_config(new_dir.path(), 0,
                                                                              table, 16));
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

}  // namespace
}  // namespace strata::actors
