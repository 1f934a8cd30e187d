#include "actors/shard_actor.hpp"

#include <gtest/gtest.h>

#include "actors/row_batch_util.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::actor_harness;
using strata::testing::exact_sum_table;
using strata::testing::temp_dir;

shard_config make_shard(const temp_dir& dir, uint32_t index, const table_config& table,
                        size_t dram_rows) {
  return strata::testing::test_shard_config(dir.path(), index, table, dram_rows);
}

// Rows a shard's LMDB environment holds (after a drain; -1: cannot open).
int64_t lmdb_size(const shard_config& config, const table_config& table) {
  lmdb_tier_config lc = config.lmdb;
  lc.shared_handle = true;
  auto lmdb = lmdb_tier::open(table.layout, lc);
  EXPECT_TRUE(lmdb) << (lmdb ? "" : lmdb.err().to_string());
  return lmdb ? static_cast<int64_t>((*lmdb)->size()) : -1;
}

float weight(const pull_reply& r, const row_layout& layout, size_t i, uint32_t j = 0) {
  return weights_of(rows_of(r.rows, layout)[i])[j];
}

struct shard_fixture : ::testing::Test {
  temp_dir dir;
  actor_harness h;
  table_config table = exact_sum_table(2);
  shard_actor shard;
  void SetUp() override {
    auto s = spawn_shard(h.system(), make_shard(dir, 0, table, 16));
    ASSERT_TRUE(s) << s.err().to_string();
    shard = *s;
  }
  void push(const std::vector<uint64_t>& keys, float inc) {
    push_request req;
    req.keys = keys;
    req.grads.assign(keys.size() * table.layout.dim, -inc);
    auto reply = h.call<push_reply>(shard, push_atom::value, req);
    EXPECT_TRUE(well_formed(reply.rows, table.layout));
  }
  pull_reply pull(const std::vector<uint64_t>& keys) {
    return h.call<pull_reply>(shard, pull_atom::value, keys);
  }
};

TEST_F(shard_fixture, PullServesInitializerRowsForUnknownKeys) {
  auto r = pull({1, 2, 1});
  ASSERT_EQ(r.rows.keys.size(), 3u);
  EXPECT_EQ(r.admitted, (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(weight(r, table.layout, 0), 0.0f);
}

TEST_F(shard_fixture, PushIsAppliedOncePerKeyAndRepliesWithUpdatedRows) {
  push_request req;
  req.keys = {5, 5, 6};
  req.grads = {-1, -1, -2, -2, -3, -3};
  auto reply = h.call<push_reply>(shard, push_atom::value, req);
  ASSERT_EQ(reply.rows.keys, (std::vector<uint64_t>{5, 6}));
  auto rows = rows_of(reply.rows, table.layout);
  EXPECT_EQ(weights_of(rows[0])[0], 3.0f);  // -(-1 + -2): summed, one step
  EXPECT_EQ(meta_of(rows[0]).version, 1u);
  EXPECT_EQ(weights_of(rows[1])[0], 3.0f);
}

TEST_F(shard_fixture, MalformedMessagesAreRejected) {
  push_request bad;
  bad.keys = {1};
  bad.grads = {1.0f};  // dim is 2
  auto a = h.ask<push_reply>(shard, push_atom::value, bad);
  h.sched().run();
  ASSERT_TRUE(a->error);
  row_batch rows;
  rows.keys = {1};
  rows.records.resize(3);
  auto b = h.ask<ok_atom>(shard, write_back_atom::value, rows);
  h.sched().run();
  EXPECT_TRUE(b->error);
}

// Evicted dirty rows go to ssd_flush; while a flush is in flight (its
// actor not yet run) the rows are still served from the write-behind
// buffer, newest first.
TEST_F(shard_fixture, ReadYourWritesWhileFlushesAreInFlight) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 100; ++k) keys.push_back(k);
  push(keys, 1.0f);  // 100 keys through a 16-row DRAM tier: most spill
  auto first = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_GT(first.flushed_rows, 0u);
  // Now hold ssd_flush: pushes spill into batches that stay in flight.
  push_request req;
  req.keys = keys;
  req.grads.assign(keys.size() * 2, -1.0f);
  auto a = h.ask<push_reply>(shard, push_atom::value, req);
  h.run_except_named("ssd_flush");
  ASSERT_TRUE(a->value);
  auto r = h.ask<pull_reply>(shard, pull_atom::value, keys);
  h.run_except_named("ssd_flush");
  ASSERT_TRUE(r->value);
  for (size_t i = 0; i < keys.size(); ++i)
    ASSERT_EQ(weight(*r->value, table.layout, i), 2.0f) << "key " << keys[i];
  h.sched().run();  // the flushes complete; nothing changes
  EXPECT_EQ(weight(pull(keys), table.layout, 99), 2.0f);
}

// Back-pressure: with ssd_flush stalled, at most max_flushes_in_flight
// batches are out and further rows wait, readable, in the write-behind.
TEST_F(shard_fixture, BackPressureKeepsRowsReadableAndLosesNone) {
  // A bound high enough that these pushes never reach it (the next test
  // is about the bound).
  auto config = make_shard(dir, 1, table, 16);
  config.max_queued_flush_batches = 64;
  auto spawned = spawn_shard(h.system(), config);
  ASSERT_TRUE(spawned) << spawned.err().to_string();
  shard = *spawned;
  // ssd_flush is stalled: five pushes of 40 new keys each spill into
  // write-behind batches; at most max_flushes_in_flight (2) go out, the
  // rest wait, readable, in the write-behind buffer.
  std::vector<uint64_t> keys;
  for (uint64_t round = 0; round < 5; ++round) {
    push_request req;
    for (uint64_t k = 0; k < 40; ++k) req.keys.push_back(round * 1000 + k);
    req.grads.assign(req.keys.size() * 2, -1.0f);
    keys.insert(keys.end(), req.keys.begin(), req.keys.end());
    auto a = h.ask<push_reply>(shard, push_atom::value, req);
    h.run_except_named("ssd_flush");
    ASSERT_TRUE(a->value);
  }
  auto pulled = h.ask<pull_reply>(shard, pull_atom::value, keys);
  h.run_except_named("ssd_flush");
  ASSERT_TRUE(pulled->value);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(weight(*pulled->value, table.layout, i), 1.0f);
  auto stalled = h.ask<tier_stats>(shard, stats_atom::value);
  h.run_except_named("ssd_flush");
  ASSERT_TRUE(stalled->value);
  EXPECT_EQ(stalled->value->flushes_in_flight, 2u);   // max_flushes_in_flight
  EXPECT_GT(stalled->value->write_behind_rows, 16u);  // more than two batches wait
  EXPECT_EQ(stalled->value->write_behind_stalls, 0u);
  h.sched().run();
  auto after = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(after.flushes_in_flight, 0u);
  // Drain: everything reaches LMDB.
  h.call<ok_atom>(shard, drain_atom::value);
  EXPECT_EQ(lmdb_size(config, table), static_cast<int64_t>(keys.size()));
}

// The write-behind's bound (max_queued_flush_batches): with ssd_flush
// stalled (a disk slower than training), once a batch's rows wait behind
// the two flushes in flight, requests that could spill more wait in the
// shard's mailbox, in order; the shard still answers the rest. When the
// disk catches up they run in the order sent and nothing is lost. Before
// the bound, every push was taken and the write-behind grew with each.
TEST_F(shard_fixture, BoundedWriteBehindHoldsRequestsInOrderUntilAFlushLands) {
  auto config = make_shard(dir, 2, table, 16);
  config.max_queued_flush_batches = 1;  // bound: 8 rows queued behind 2 x 8 in flight
  auto spawned = spawn_shard(h.system(), config);
  ASSERT_TRUE(spawned) << spawned.err().to_string();
  shard = *spawned;
  auto request = [&](uint64_t first, uint64_t count) {
    push_request req;
    for (uint64_t k = first; k < first + count; ++k) req.keys.push_back(k);
    req.grads.assign(req.keys.size() * table.layout.dim, -1.0f);  // +1 per push
    return req;
  };
  // Pushes of 40 new keys each: the DRAM tier (16 rows) spills each
  // push's rows; a batch takes every queued row, so two pushes fill the
  // two flushes in flight and the third's rows wait, over the bound. Each
  // was under the bound when it arrived, so each is taken.
  for (uint64_t round = 0; round < 3; ++round) {
    auto pushed = h.ask<push_reply>(shard, push_atom::value, request(round * 1000, 40));
    h.run_except_named("ssd_flush");
    ASSERT_TRUE(pushed->value) << "round " << round;
  }
  // Stats while ssd_flush stays stalled.
  auto stats_stalled = [&] {
    auto a = h.ask<tier_stats>(shard, stats_atom::value);
    h.run_except_named("ssd_flush");
    EXPECT_TRUE(a->value) << "no stats while ssd_flush is stalled";
    return a->value ? *a->value : tier_stats{};
  };
  auto full = stats_stalled();
  EXPECT_EQ(full.flushes_in_flight, 2u);
  EXPECT_EQ(full.write_behind_stalls, 0u);
  const uint64_t bounded = full.write_behind_rows;
  // Each batch is the queue taken whole: at most (2 in flight + 1 queued)
  // x (the bound, 8 rows, + one request's spill, 40).
  EXPECT_LE(bounded, 3u * (8u + 40u));
  // Now every request that can spill waits: a push of 40 more keys, a push
  // of key 0 again, and a pull of key 0 that must see that second push.
  auto second = h.ask<push_reply>(shard, push_atom::value, request(3000, 40));
  auto again = h.ask<push_reply>(shard, push_atom::value, request(0, 1));
  auto read = h.ask<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{0});
  h.run_except_named("ssd_flush");
  EXPECT_FALSE(second->value || second->error);
  EXPECT_FALSE(again->value || again->error);
  EXPECT_FALSE(read->value || read->error);
  // The shard is not wedged: it answers what cannot spill.
  auto held = stats_stalled();
  EXPECT_EQ(held.write_behind_rows, bounded);  // nothing more was taken
  EXPECT_EQ(held.write_behind_stalls, 1u);
  EXPECT_EQ(held.pushes, 3u);
  // The disk catches up: the held requests run, in the order sent.
  h.sched().run();
  ASSERT_TRUE(second->value);
  ASSERT_TRUE(again->value);
  ASSERT_TRUE(read->value);
  EXPECT_EQ(weight(*read->value, table.layout, 0), 2.0f);  // after the second push of key 0
  auto after = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(after.pushes, 5u);
  EXPECT_GE(after.write_behind_stalls, 1u);
  h.call<ok_atom>(shard, drain_atom::value);
  EXPECT_EQ(lmdb_size(config, table), 160);
}

TEST_F(shard_fixture, WriteBackKeepsTheHigherVersion) {
  push({9}, 1.0f);
  push({9}, 1.0f);  // version 2, weight 2
  row_batch old;
  old.keys = {9};
  old.records.resize(table.layout.record_bytes());
  auto rec = rows_of(old, table.layout)[0];
  meta_of(rec) = row_meta{1, 0, 0};
  weights_of(rec)[0] = 50.0f;
  h.call<ok_atom>(shard, write_back_atom::value, old);
  EXPECT_EQ(weight(pull({9}), table.layout, 0), 2.0f);
  meta_of(rec).version = 7;
  h.call<ok_atom>(shard, write_back_atom::value, old);
  EXPECT_EQ(weight(pull({9}), table.layout, 0), 50.0f);
}

TEST_F(shard_fixture, PrefetchPromotesFromLmdb) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(k);
  push(keys, 3.0f);
  h.call<ok_atom>(shard, drain_atom::value);
  auto before = h.call<tier_stats>(shard, stats_atom::value);
  // Key 0 was evicted long ago: prefetch brings it to DRAM, the pull hits.
  h.system().spawn([s = shard](caf::event_based_actor* self) {
    self->send(s, prefetch_atom::value, std::vector<uint64_t>{0});
  });
  h.sched().run();
  auto r = pull({0});
  EXPECT_EQ(weight(r, table.layout, 0), 3.0f);
  auto after = h.call<tier_stats>(shard, stats_atom::value);
  ASSERT_EQ(after.chain_hits.size(), 3u);
  EXPECT_EQ(after.chain_hits[2], before.chain_hits[2] + 1);  // one LMDB hit (the prefetch)
  EXPECT_EQ(after.chain_hits[0], before.chain_hits[0] + 1);  // then a DRAM hit
}

// strata_shard_lmdb_waits_total: a pull whose reply had to read LMDB (the
// row was cold) counts as a wait; a pull of a row a prefetch brought up
// does not; every pull counts in strata_shard_lookups_total.
TEST_F(shard_fixture, ColdPullWaitsOnLmdbPrefetchedPullDoesNot) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(k);
  push(keys, 3.0f);
  h.call<ok_atom>(shard, drain_atom::value);
  auto before = h.call<tier_stats>(shard, stats_atom::value);
  // Keys 0 and 1 were evicted long ago (DRAM holds 16 rows).
  EXPECT_EQ(weight(pull({1}), table.layout, 0), 3.0f);
  auto cold = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(cold.pulls, before.pulls + 1);
  EXPECT_EQ(cold.lmdb_waits, before.lmdb_waits + 1);
  h.system().spawn([s = shard](caf::event_based_actor* self) {
    self->send(s, prefetch_atom::value, std::vector<uint64_t>{0});
  });
  h.sched().run();
  auto prefetched = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(prefetched.pulls, cold.pulls);  // a prefetch is not a pull
  EXPECT_EQ(weight(pull({0}), table.layout, 0), 3.0f);
  auto warm = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(warm.pulls, cold.pulls + 1);
  EXPECT_EQ(warm.lmdb_waits, cold.lmdb_waits);
}

TEST_F(shard_fixture, DrainMakesEveryAcknowledgedPushDurable) {
  std::vector<uint64_t> keys{1, 2, 3, 4, 5};
  push(keys, 2.0f);
  push(keys, 2.0f);
  h.call<ok_atom>(shard, drain_atom::value);
  lmdb_tier_config lc = make_shard(dir, 0, table, 16).lmdb;
  lc.shared_handle = true;
  auto lmdb = lmdb_tier::open(table.layout, lc);
  ASSERT_TRUE(lmdb);
  std::vector<std::byte> out(keys.size() * table.layout.record_bytes());
  std::vector<uint32_t> misses;
  ASSERT_TRUE((*lmdb)->lookup(keys, {out.data(), table.layout.record_bytes()}, misses));
  EXPECT_TRUE(misses.empty());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(weights_of(out.data() + i * table.layout.record_bytes())[1], 4.0f);
}

// The shard's metrics count what happened: one pull latency per pull, one
// LMDB write per flush batch, lookups = hits + misses.
TEST_F(shard_fixture, StatsCountRequestsFlushesAndLatencies) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 100; ++k) keys.push_back(k);
  push(keys, 1.0f);
  pull(keys);
  pull({1, 2});
  h.call<ok_atom>(shard, drain_atom::value);
  auto s = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(s.kind, "shard");
  EXPECT_EQ(s.pushes, 1u);
  EXPECT_EQ(s.push_rows, 100u);
  EXPECT_EQ(s.lookups, s.hits + s.misses);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.flush_batches, 0u);
  EXPECT_EQ(s.flush_bytes, s.flushed_rows * table.layout.encoded_bytes());
  EXPECT_EQ(s.capacity_rows, 16u);
  EXPECT_LE(s.bytes, s.capacity_bytes);
  auto count = [&](const std::string& name) {
    for (const auto& l : s.latencies) {
      if (l.name != name) continue;
      uint64_t n = 0;
      for (uint64_t c : l.counts) n += c;
      return n;
    }
    return uint64_t{0};
  };
  EXPECT_EQ(count("pull"), 2u);
  EXPECT_EQ(count("push"), 1u);
  EXPECT_EQ(count("lmdb_write"), s.flush_batches);
  EXPECT_EQ(count("flush"), s.flush_batches);
  EXPECT_GT(count("lmdb_read"), 0u);  // the pulls reached evicted rows in LMDB
}

// Coalescing: a row rewritten three times before its flush (each time
// pushed, then evicted into the write-behind buffer, where the newer copy
// replaces the queued one) is written to LMDB once, with the last value.
TEST(ShardFlush, RowRewrittenBeforeItsFlushIsFlushedOnce) {
  temp_dir dir;
  actor_harness h;
  auto table = exact_sum_table(2);
  auto cfg = make_shard(dir, 0, table, 16);
  cfg.flush_batch_rows = 1000;  // nothing leaves before the drain
  auto s = spawn_shard(h.system(), cfg);
  ASSERT_TRUE(s) << s.err().to_string();
  auto push = [&](uint64_t first, uint64_t count) {
    push_request req;
    for (uint64_t k = first; k < first + count; ++k) req.keys.push_back(k);
    req.grads.assign(req.keys.size() * table.layout.dim, -1.0f);
    h.call<push_reply>(*s, push_atom::value, req);
  };
  for (uint64_t round = 1; round <= 3; ++round) {
    push(0, 1);
    push(100 * round, 16);  // evicts key 0 (dirty) into the write-behind
  }
  auto queued = h.call<tier_stats>(*s, stats_atom::value);
  EXPECT_EQ(queued.flushed_rows, 0u);
  h.call<ok_atom>(*s, drain_atom::value);
  auto drained = h.call<tier_stats>(*s, stats_atom::value);
  EXPECT_EQ(drained.flushed_rows, 1u + 3 * 16) << "key 0 was written more than once";
  EXPECT_EQ(drained.lmdb_rows, 1u + 3 * 16);
  auto r = h.call<pull_reply>(*s, pull_atom::value, std::vector<uint64_t>{0});
  EXPECT_EQ(weight(r, table.layout, 0), 3.0f);
}

TEST(ShardSpawn, UnusableLmdbDirectoryIsAnErrorNamingThePath) {
  temp_dir dir;
  actor_harness h;
  auto table = exact_sum_table(2);
  auto cfg = make_shard(dir, 0, table, 16);
  std::filesystem::create_directories(dir.path());
  {
    std::FILE* f = std::fopen((dir.path() / "blocker").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  cfg.lmdb.directory = dir.path() / "blocker" / "shard0";
  auto s = spawn_shard(h.system(), cfg);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message().find("blocker"), std::string::npos) << s.err().message();
}

}  // namespace
}  // namespace strata::actors
