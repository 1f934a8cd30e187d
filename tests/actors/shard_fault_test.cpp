// The shard under storage faults (issue 15 items 1, 2, 16): a failed flush
// is retried in order and loses nothing; one that keeps failing fail-stops
// the shard with an error naming the shard, its LMDB path and the cause.
#include <gtest/gtest.h>

#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/fault_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::actor_harness;
using strata::testing::exact_sum_table;
using strata::testing::scoped_faults;
using strata::testing::temp_dir;

struct shard_fault_fixture : ::testing::Test {
  temp_dir dir;
  actor_harness h;
  table_config table = exact_sum_table(2);
  shard_config config;
  shard_actor shard;
  void start(uint32_t max_in_flight) {
    config = strata::testing::test_shard_config(dir.path(), 3, table, 16);
    config.max_flushes_in_flight = max_in_flight;
    auto s = spawn_shard(h.system(), config);
    ASSERT_TRUE(s) << s.err().to_string();
    shard = *s;
  }
  push_request request(const std::vector<uint64_t>& keys) {
    push_request req;
    req.keys = keys;
    req.grads.assign(keys.size() * table.layout.dim, -1.0f);  // +1 per push
    return req;
  }
  // A push that runs while ssd_flush is held: its batches stay in flight.
  void push_held(const std::vector<uint64_t>& keys) {
    auto a = h.ask<push_reply>(shard, push_atom::value, request(keys));
    h.run_except_named("ssd_flush");
    ASSERT_TRUE(a->value) << (a->error ? h.system().render(*a->error) : "no reply");
  }
  // What LMDB holds for `keys` (weight 0 and version 0: missing).
  std::vector<std::pair<float, uint64_t>> stored(const std::vector<uint64_t>& keys) {
    lmdb_tier_config lc = config.lmdb;
    lc.shared_handle = true;
    auto lmdb = lmdb_tier::open(table.layout, lc);
    EXPECT_TRUE(lmdb) << (lmdb ? "" : lmdb.err().to_string());
    std::vector<std::pair<float, uint64_t>> out(keys.size());
    if (!lmdb) return out;
    std::vector<std::byte> rows(keys.size() * table.layout.record_bytes());
    std::vector<uint32_t> misses;
    EXPECT_TRUE((*lmdb)->lookup(keys, {rows.data(), table.layout.record_bytes()}, misses));
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::byte* r = rows.data() + i * table.layout.record_bytes();
      out[i] = {weights_of(r)[0], meta_of(r).version};
    }
    for (uint32_t m : misses) out[m] = {0.0f, 0};
    return out;
  }
  std::string shard_path() const { return config.lmdb.directory.string(); }
};

std::vector<uint64_t> range(uint64_t first, uint64_t count) {
  std::vector<uint64_t> keys;
  for (uint64_t k = first; k < first + count; ++k) keys.push_back(k);
  return keys;
}

// Item 1: key K at v5 in batch N, v6 in a later batch, both in flight; the
// first commit of N fails once. LMDB must end with v6 (it ended with v5:
// the retry of N was re-sent behind the later batch, and the later batch's
// release had dropped the newer row from the write-behind).
TEST_F(shard_fault_fixture, TransientFlushFailureIsRetriedInOrderAndLosesNothing) {
  start(4);
  scoped_faults faults("lmdb_commit:1:EIO:" + shard_path());
  const uint64_t k = 7;
  for (int i = 0; i < 5; ++i) push_held({k});  // K at v5, in DRAM
  push_held(range(100, 24));                   // K evicted: in the first batch out
  push_held({k});                              // v6: back in DRAM
  push_held(range(200, 24));                   // evicted again: a later batch
  h.sched().run();                             // the flushes run; the first commit fails
  EXPECT_EQ(faults.env().fired(), 1u);
  h.call<ok_atom>(shard, drain_atom::value);
  auto got = stored({k});
  EXPECT_EQ(got[0].first, 6.0f) << "LMDB holds an older row of key " << k;
  EXPECT_EQ(got[0].second, 6u);
  // Nothing else was lost either: every key holds exactly its pushes.
  auto others = stored(range(100, 24));
  for (size_t i = 0; i < others.size(); ++i) EXPECT_EQ(others[i].first, 1.0f) << "key " << 100 + i;
  others = stored(range(200, 24));
  for (size_t i = 0; i < others.size(); ++i) EXPECT_EQ(others[i].first, 1.0f) << "key " << 200 + i;
}

// Items 2 and 16: a full disk at a flush commit. After the bounded retries
// the shard fail-stops: the pending drain and every later request get an
// error naming the shard, its LMDB path and the cause; nothing hangs, and
// the write-behind does not grow.
TEST_F(shard_fault_fixture, PersistentFlushFailureFailStopsNamingShardPathAndCause) {
  start(2);
  scoped_faults faults("lmdb_commit:1+:ENOSPC:" + shard_path());
  push_held(range(0, 40));  // batches in flight and queued
  auto drained = h.ask<ok_atom>(shard, drain_atom::value);
  h.sched().run();
  ASSERT_TRUE(drained->error) << "the drain answered ok over a failed flush";
  const std::string text = h.system().render(*drained->error);
  for (const std::string& part :
       {std::string("shard 3"), shard_path(), std::string("disk_full"),
        std::string("No space left on device"), std::string("fail-stopped")})
    EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in " << text;
  // Bounded: the first batch's attempts, then nothing more is written.
  EXPECT_EQ(faults.env().fired(), 4u);
  const auto before = h.call<tier_stats>(shard, stats_atom::value);
  for (auto* what : {"push", "pull", "drain"}) {
    caf::error err;
    if (std::string(what) == "push") {
      auto a = h.ask<push_reply>(shard, push_atom::value, request(range(500, 40)));
      h.sched().run();
      ASSERT_TRUE(a->error) << what;
      err = *a->error;
    } else if (std::string(what) == "pull") {
      auto a = h.ask<pull_reply>(shard, pull_atom::value, range(0, 4));
      h.sched().run();
      ASSERT_TRUE(a->error) << what;
      err = *a->error;
    } else {
      auto a = h.ask<ok_atom>(shard, drain_atom::value);
      h.sched().run();
      ASSERT_TRUE(a->error) << what;
      err = *a->error;
    }
    EXPECT_NE(h.system().render(err).find(shard_path()), std::string::npos) << what;
  }
  const auto after = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(after.write_behind_rows, before.write_behind_rows);
  EXPECT_EQ(faults.env().fired(), 4u);
}

// A slow disk (every LMDB commit of the shard waits 5 ms), real threads:
// a client sends 60 pushes of 40 new keys at once, far faster than the
// disk takes them. The write-behind stays within its bound (before the
// bound it queued every push's rows: 2400), the shard stalls instead, and
// every row lands with its value.
TEST(ShardSlowDisk, TheWriteBehindStaysBoundedAndLosesNothing) {
  temp_dir dir;
  const table_config table = exact_sum_table(2);
  shard_config config = strata::testing::test_shard_config(dir.path(), 5, table, 16);
  config.flush_on_own_thread = true;
  config.max_queued_flush_batches = 1;  // 8 rows queued behind 2 flushes in flight
  scoped_faults faults("lmdb_commit:1+:SLOW5:" + config.lmdb.directory.string());
  caf::actor_system_config system_config;
  add_message_types(system_config);
  system_config.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system system{system_config};
  auto spawned = spawn_shard(system, config);
  ASSERT_TRUE(spawned) << spawned.err().to_string();
  const shard_actor shard = *spawned;
  caf::scoped_actor self{system};
  constexpr uint64_t pushes = 60, width = 40;
  std::vector<caf::response_handle<caf::blocking_actor, caf::detail::type_list<push_reply>, true>>
      replies;
  for (uint64_t p = 0; p < pushes; ++p) {
    push_request req;
    for (uint64_t k = 0; k < width; ++k) req.keys.push_back(p * 1000 + k);
    req.grads.assign(req.keys.size() * table.layout.dim, -1.0f);
    replies.push_back(self->request(shard, caf::infinite, push_atom::value, std::move(req)));
  }
  for (auto& r : replies)
    r.receive([](push_reply&) {}, [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
  tier_stats stats;
  self->request(shard, caf::infinite, stats_atom::value)
      .receive([&](tier_stats& t) { stats = t; },
               [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
  EXPECT_EQ(stats.pushes, pushes);
  EXPECT_GE(stats.write_behind_stalls, 1u) << "the disk was never slower than the pushes";
  EXPECT_GT(stats.write_behind_stall_seconds, 0.0);
  // A flush batch takes every queued row: (2 in flight + 1 queued) x (8 + 40).
  EXPECT_LE(stats.write_behind_peak_rows, 3u * (8u + width));
  self->request(shard, caf::infinite, drain_atom::value)
      .receive([](ok_atom) {}, [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
  self->send_exit(shard, caf::exit_reason::user_shutdown);
  self->wait_for(shard);
  lmdb_tier_config lc = config.lmdb;
  lc.shared_handle = true;
  auto lmdb = lmdb_tier::open(table.layout, lc);
  ASSERT_TRUE(lmdb) << lmdb.err().to_string();
  EXPECT_EQ((*lmdb)->size(), pushes * width);
  std::vector<uint64_t> keys;
  for (uint64_t p = 0; p < pushes; ++p)
    for (uint64_t k = 0; k < width; ++k) keys.push_back(p * 1000 + k);
  std::vector<std::byte> rows(keys.size() * table.layout.record_bytes());
  std::vector<uint32_t> misses;
  ASSERT_TRUE((*lmdb)->lookup(keys, {rows.data(), table.layout.record_bytes()}, misses));
  EXPECT_TRUE(misses.empty());
  size_t wrong = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    wrong += weights_of(rows.data() + i * table.layout.record_bytes())[0] != 1.0f;
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace strata::actors
