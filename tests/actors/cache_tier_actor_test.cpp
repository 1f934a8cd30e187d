#include "actors/cache_tier_actor.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::actor_harness;
using strata::testing::temp_dir;

table_config sgd_table(uint32_t dim, initializer_kind init) {
  table_config t;
  t.name = "emb";
  t.layout = row_layout{dim, optimizer_kind::sgd, true};
  t.optimizer.kind = optimizer_kind::sgd;
  t.optimizer.learning_rate = 1.0f;
  t.initializer.kind = init;
  t.initializer.seed = 3;
  return t;
}

struct cluster_fixture {
  temp_dir dir;
  actor_harness h;
  table_config table;
  std::vector<shard_actor> shards;
  partition_map map;

  cluster_fixture(table_config t, uint32_t shard_count, size_t dram_rows = 1024)
      : table(std::move(t)), map(64, shard_count) {
    for (uint32_t i = 0; i < shard_count; ++i) {
      shard_config c = strata::testing::test_shard_config(dir.path(), i, table, dram_rows);
      c.flush_batch_rows = 16;
      c.max_flushes_in_flight = 4;
      auto s = spawn_shard(h.system(), c);
      EXPECT_TRUE(s) << s.err().to_string();
      shards.push_back(*s);
    }
  }
  cache_tier_actor cache(training_mode mode, uint32_t sets = 64, uint32_t index = 0,
                         uint32_t staleness = 8) {
    cache_config c;
    c.index = index;
    c.table = table;
    c.geometry.sets = sets;
    c.staleness = staleness;
    return *spawn_cache_tier(h.system(), c, mode, shards, map);
  }
  row_batch lookup(cache_tier_actor c, std::vector<uint64_t> keys) {
    return h.call<lookup_reply>(c, lookup_atom::value, std::move(keys)).rows;
  }
  push_ack push(cache_tier_actor c, std::vector<uint64_t> keys, float inc) {
    push_request req;
    req.grads.assign(keys.size() * table.layout.dim, -inc);
    req.keys = std::move(keys);
    return h.call<push_ack>(c, push_atom::value, req);
  }
  // The shard's own copy, bypassing every cache.
  float shard_weight(uint64_t key) {
    auto r =
        h.call<pull_reply>(shards[map.shard_of(key)], pull_atom::value, std::vector<uint64_t>{key});
    return weights_of(rows_of(r.rows, table.layout)[0])[0];
  }
  float weight(const row_batch& b, size_t i) { return weights_of(rows_of(b, table.layout)[i])[0]; }
};

TEST(CacheTier, LookupFetchesMissesFromEveryShardThenHits) {
  cluster_fixture f(sgd_table(4, initializer_kind::normal), 3);
  auto cache = f.cache(training_mode::async);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 30; ++k) keys.push_back(k * 101);
  keys.push_back(keys[0]);  // a duplicate gets the same row
  auto rows = f.lookup(cache, keys);
  ASSERT_EQ(rows.keys, keys);
  std::vector<std::byte> expect(f.table.layout.record_bytes());
  std::set<uint32_t> owners;
  for (size_t i = 0; i < keys.size(); ++i) {
    f.table.initial_row(keys[i], expect.data());
    EXPECT_TRUE(same_row(f.table.layout, rows_of(rows, f.table.layout)[i], expect.data())) << i;
    owners.insert(f.map.shard_of(keys[i]));
  }
  EXPECT_EQ(owners.size(), 3u);  // the batch really spans every shard
  auto s1 = f.h.call<tier_stats>(cache, stats_atom::value);
  EXPECT_EQ(s1.misses, keys.size());
  EXPECT_EQ(s1.inserts, keys.size() - 1);  // the duplicate is one key
  EXPECT_EQ(s1.evictions, 0u);
  f.lookup(cache, keys);
  auto s2 = f.h.call<tier_stats>(cache, stats_atom::value);
  EXPECT_EQ(s2.hits, keys.size());
}

TEST(CacheTier, PrefetchWarmsTheCache) {
  cluster_fixture f(sgd_table(2, initializer_kind::zeros), 2);
  auto cache = f.cache(training_mode::async);
  f.h.system().spawn([cache](caf::event_based_actor* self) {
    self->send(cache, prefetch_atom::value, std::vector<uint64_t>{1, 2, 3});
  });
  f.h.sched().run();
  f.lookup(cache, {1, 2, 3});
  auto s = f.h.call<tier_stats>(cache, stats_atom::value);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 0u);
}

TEST(CacheTier, AsyncPushIsAppliedByTheShardAndRefreshesTheCopy) {
  cluster_fixture f(sgd_table(2, initializer_kind::zeros), 2);
  auto cache = f.cache(training_mode::async);
  f.lookup(cache, {7, 8});
  auto ack = f.push(cache, {7, 8, 7}, 1.0f);
  EXPECT_EQ(ack.versions, (std::vector<uint64_t>{1, 1, 1}));  // duplicates: one step
  EXPECT_EQ(f.shard_weight(7), 2.0f);
  auto rows = f.lookup(cache, {7, 8});
  EXPECT_EQ(f.weight(rows, 0), 2.0f);
  EXPECT_EQ(f.weight(rows, 1), 1.0f);
  // Refreshing resident copies from the push reply is no eviction.
  auto stats = f.h.call<tier_stats>(cache, stats_atom::value);
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(stats.inserts, 2u);
}

// Another cache tier's copy may be stale, but at most `staleness` batches.
TEST(CacheTier, AsyncCopiesAreRefreshedAfterStaleness) {
  cluster_fixture f(sgd_table(1, initializer_kind::zeros), 1);
  auto writer = f.cache(training_mode::async, 64, 0);
  auto reader = f.cache(training_mode::async, 64, 1, /*staleness=*/2);
  f.lookup(reader, {5});
  f.push(writer, {5}, 1.0f);
  float seen = f.weight(f.lookup(reader, {5}), 0);
  int batches = 1;
  while (seen != 1.0f && batches < 10) {
    seen = f.weight(f.lookup(reader, {5}), 0);
    ++batches;
  }
  EXPECT_EQ(seen, 1.0f);
  EXPECT_LE(batches, 3);  // fetched at clock 1, refreshed once older than 2 batches
}

TEST(CacheTier, PassModeUpdatesInTheCacheAndWritesBackAtPassEnd) {
  cluster_fixture f(sgd_table(2, initializer_kind::zeros), 2);
  auto cache = f.cache(training_mode::pass);
  f.h.call<ok_atom>(cache, pass_start_atom::value, uint64_t{1});
  f.lookup(cache, {1, 2});
  auto ack = f.push(cache, {1, 2, 1}, 1.0f);
  EXPECT_EQ(ack.versions, (std::vector<uint64_t>{1, 1, 1}));
  f.push(cache, {1}, 1.0f);
  EXPECT_EQ(f.shard_weight(1), 0.0f);  // owned by the cache for this pass
  EXPECT_EQ(f.weight(f.lookup(cache, {1}), 0), 3.0f);
  f.h.call<ok_atom>(cache, pass_end_atom::value, uint64_t{1});
  EXPECT_EQ(f.shard_weight(1), 3.0f);
  EXPECT_EQ(f.shard_weight(2), 1.0f);
}

// The exact-sum test through one cache tier whose single 32-slot set
// overflows all the time: evicted dirty rows are written back, served from
// the evicted buffer meanwhile, and every increment arrives exactly once.
TEST(CacheTier, PassModeExactSumUnderEvictionPressure) {
  cluster_fixture f(sgd_table(1, initializer_kind::zeros), 2, /*dram_rows=*/32);
  auto cache = f.cache(training_mode::pass, /*sets=*/1);
  std::map<uint64_t, int> expected;
  std::mt19937_64 rng(5);
  for (int batch = 0; batch < 40; ++batch) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 24; ++i) keys.push_back(rng() % 300);
    f.lookup(cache, keys);
    push_request req;
    req.keys = keys;
    for (uint64_t k : keys) {
      const int inc = static_cast<int>(k % 3) + 1;
      req.grads.push_back(-static_cast<float>(inc));
      expected[k] += inc;
    }
    f.h.call<push_ack>(cache, push_atom::value, req);
  }
  f.h.call<ok_atom>(cache, pass_end_atom::value, uint64_t{1});
  auto stats = f.h.call<tier_stats>(cache, stats_atom::value);
  EXPECT_GT(stats.evictions, 100u);
  for (const auto& [k, sum] : expected) ASSERT_EQ(f.shard_weight(k), static_cast<float>(sum)) << k;
}

// A scripted shard that holds pull requests until the test releases them
// (a tick(i) message answers held request i with the key's initializer
// row, version 0), to deliver an old row after a newer one is cached.
struct held_pull {
  std::vector<uint64_t> keys;
  caf::typed_response_promise<pull_reply> promise;
};
struct fake_shard_state {
  std::vector<held_pull> held;
  static inline const char* name = "fake_shard";
};

shard_actor::behavior_type fake_shard(shard_actor::stateful_pointer<fake_shard_state> self,
                                      table_config table, std::shared_ptr<size_t> held_count) {
  return {
      [self, held_count](pull_atom, std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
        auto p = self->make_response_promise<pull_reply>();
        self->state.held.push_back({keys, p});
        *held_count = self->state.held.size();
        return p;
      },
      // A prefetch's fill: held the same way.
      [self, held_count](pull_atom, prefetch_atom,
                         std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
        auto p = self->make_response_promise<pull_reply>();
        self->state.held.push_back({keys, p});
        *held_count = self->state.held.size();
        return p;
      },
      [](push_atom, const push_request&) -> push_reply { return {}; },
      [](write_back_atom, const row_batch&) -> ok_atom { return ok_atom::value; },
      [](prefetch_atom, const std::vector<uint64_t>&) {},
      [self, table](tick_atom, uint32_t i) {
        auto& h = self->state.held.at(i);
        pull_reply r;
        r.rows.keys = h.keys;
        r.rows.records.resize(h.keys.size() * table.layout.record_bytes());
        for (size_t j = 0; j < h.keys.size(); ++j)
          table.initial_row(h.keys[j], rows_of(r.rows, table.layout)[j]);
        r.admitted.assign(h.keys.size(), 1);
        h.promise.deliver(std::move(r));
      },
      [](drain_atom) -> ok_atom { return ok_atom::value; },
      [](stats_atom) -> tier_stats { return {}; },
      [](checkpoint_atom, uint64_t) -> ok_atom { return ok_atom::value; },
      [](copied_atom, uint64_t) -> uint64_t { return 0; },
      [](migrate_atom, const migration_order&) -> migration_stats { return {}; },
      [](fence_atom, uint64_t) -> migration_stats { return {}; },
      [](migrate_in_atom, const row_batch&) -> ok_atom { return ok_atom::value; },
      [](resend_atom, uint32_t) -> row_batch { return {}; },
      [](commit_atom, const routing_table&) -> ok_atom { return ok_atom::value; },
  };
}

TEST(CacheTier, LatePrefetchDoesNotOverwriteANewerRow) {
  actor_harness h;
  auto table = sgd_table(1, initializer_kind::zeros);
  auto held = std::make_shared<size_t>(0);
  shard_actor shard = h.system().spawn(fake_shard, table, held);
  cache_config c;
  c.table = table;
  c.geometry.sets = 4;
  auto cache = *spawn_cache_tier(h.system(), c, training_mode::pass, {shard}, partition_map(8, 1));
  auto release = [&](uint32_t i) {
    h.system().spawn(
        [shard, i](caf::event_based_actor* self) { self->send(shard, tick_atom::value, i); });
    h.sched().run();
  };
  // 1. A prefetch asks the shard for key 42; the answer is held.
  h.system().spawn([cache](caf::event_based_actor* self) {
    self->send(cache, prefetch_atom::value, std::vector<uint64_t>{42});
  });
  h.sched().run();
  ASSERT_EQ(*held, 1u);
  // 2. A push for 42 misses too and asks again; that answer comes first,
  //    the push is applied in the cache: version 1, weight 5.
  push_request req;
  req.keys = {42};
  req.grads = {-5.0f};
  auto ack = h.ask<push_ack>(cache, push_atom::value, req);
  h.sched().run();
  ASSERT_EQ(*held, 2u);
  release(1);
  ASSERT_TRUE(ack->value);
  EXPECT_EQ(ack->value->versions[0], 1u);
  // 3. The prefetch's old row (version 0) finally arrives: it must not win.
  release(0);
  auto rows = h.call<lookup_reply>(cache, lookup_atom::value, std::vector<uint64_t>{42});
  EXPECT_EQ(weights_of(rows_of(rows.rows, table.layout)[0])[0], 5.0f);
  EXPECT_EQ(meta_of(rows_of(rows.rows, table.layout)[0]).version, 1u);
}

// A stale pull reply for a key that is resident and dirty must not win, not
// even when inserting the reply's own batch evicts the dirty copy before the
// key's turn (cache_backend::insert processes a set in ascending key order).
TEST(CacheTier, StalePullReplyDoesNotReplaceADirtyRowItsBatchEvicts) {
  actor_harness h;
  auto table = sgd_table(1, initializer_kind::zeros);
  auto held = std::make_shared<size_t>(0);
  shard_actor shard = h.system().spawn(fake_shard, table, held);
  cache_config c;
  c.table = table;
  c.geometry.sets = 1;  // one set of 32 slots
  auto cache = *spawn_cache_tier(h.system(), c, training_mode::pass, {shard}, partition_map(8, 1));
  auto send = [&](auto... xs) {
    h.system().spawn([=](caf::event_based_actor* self) { self->send(xs...); });
    h.sched().run();
  };
  const uint64_t key = 100;
  // 1. A prefetch of the key, then one of 32 smaller keys and the key: both
  //    ask the shard, which holds the answers.
  send(cache, prefetch_atom::value, std::vector<uint64_t>{key});
  std::vector<uint64_t> batch;
  for (uint64_t k = 1; k <= 32; ++k) batch.push_back(k);
  batch.push_back(key);
  send(cache, prefetch_atom::value, batch);
  ASSERT_EQ(*held, 2u);
  // 2. The first answer comes; a push updates the key in the cache (dirty).
  send(shard, tick_atom::value, uint32_t{0});
  push_request req;
  req.keys = {key};
  req.grads = {-5.0f};
  auto ack = h.ask<push_ack>(cache, push_atom::value, req);
  h.sched().run();
  ASSERT_TRUE(ack->value);
  EXPECT_EQ(ack->value->versions[0], 1u);
  // 3. The second, older answer: its 32 small keys evict the dirty row
  //    (written back) before the key itself is inserted.
  send(shard, tick_atom::value, uint32_t{1});
  auto rows = h.call<lookup_reply>(cache, lookup_atom::value, std::vector<uint64_t>{key});
  EXPECT_EQ(weights_of(rows_of(rows.rows, table.layout)[0])[0], 5.0f);
  EXPECT_EQ(meta_of(rows_of(rows.rows, table.layout)[0]).version, 1u);
}

// A pass-mode push waits for rows from two shards. Meanwhile a row it was
// already served is updated by another push, evicted and acknowledged: the
// waiting push must still build on that newer version (its keys are
// pinned in the evicted buffer until it has run).
TEST(CacheTier, WaitingPushSeesAVersionWrittenBackWhileItWaited) {
  actor_harness h;
  auto table = sgd_table(1, initializer_kind::zeros);
  auto held0 = std::make_shared<size_t>(0), held1 = std::make_shared<size_t>(0);
  std::vector<shard_actor> shards{h.system().spawn(fake_shard, table, held0),
                                  h.system().spawn(fake_shard, table, held1)};
  const partition_map map(8, 2);
  cache_config c;
  c.table = table;
  c.geometry.sets = 1;  // one set of 32 slots
  auto cache = *spawn_cache_tier(h.system(), c, training_mode::pass, shards, map);
  auto send = [&](auto... xs) {
    h.system().spawn([=](caf::event_based_actor* self) { self->send(xs...); });
    h.sched().run();
  };
  uint64_t a = 1, b = 1;
  while (map.shard_of(a) != 0) ++a;
  while (map.shard_of(b) != 1) ++b;
  auto push = [&](std::vector<uint64_t> keys, float inc) {
    push_request req;
    req.grads.assign(keys.size(), -inc);
    req.keys = std::move(keys);
    return h.ask<push_ack>(cache, push_atom::value, req);
  };
  // 1. Push P of a and b: both miss, one pull per shard, both held.
  auto p = push({a, b}, 5.0f);
  h.sched().run();
  ASSERT_EQ(*held0, 1u);
  ASSERT_EQ(*held1, 1u);
  // 2. Shard 0 answers: a is inserted (version 0) and served to P.
  send(shards[0], tick_atom::value, uint32_t{0});
  // 3. Push Q of a hits: version 1, dirty.
  auto q = push({a}, 3.0f);
  h.sched().run();
  ASSERT_TRUE(q->value);
  EXPECT_EQ(q->value->versions[0], 1u);
  // 4. 32 other keys come in and evict a (written back, acknowledged).
  std::vector<uint64_t> others;
  for (uint64_t k = 1000; others.size() < 32; ++k)
    if (k != a && k != b) others.push_back(k);
  send(cache, prefetch_atom::value, others);
  send(shards[0], tick_atom::value, uint32_t{1});
  send(shards[1], tick_atom::value, uint32_t{1});
  // 5. Shard 1 answers P. a is not resident: P applies its update to the
  //    newest copy, Q's (kept in the evicted buffer while P waited), not to
  //    the row P was served in step 2.
  send(shards[1], tick_atom::value, uint32_t{0});
  ASSERT_TRUE(p->value);
  EXPECT_EQ(p->value->versions[0], 2u) << "P's update of key " << a << " lost Q's";
  EXPECT_EQ(p->value->versions[1], 1u);
}

// Graceful stop: cache drain writes every dirty row back, shard drain
// makes it durable; reopening LMDB finds every acknowledged update.
TEST(CacheTier, GracefulStopLosesNoAcknowledgedUpdate) {
  cluster_fixture f(sgd_table(1, initializer_kind::zeros), 2, /*dram_rows=*/16);
  auto cache = f.cache(training_mode::pass, 2);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 150; ++k) keys.push_back(k);
  f.lookup(cache, keys);
  // 150 keys through a 64-slot cache: the overflow is applied by the shards.
  auto ack = f.push(cache, keys, 4.0f);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(ack.versions[i], 1u) << keys[i];
  f.h.call<ok_atom>(cache, drain_atom::value);
  for (auto& s : f.shards) f.h.call<ok_atom>(s, drain_atom::value);
  uint64_t found = 0;
  for (uint32_t i = 0; i < 2; ++i) {
    lmdb_tier_config lc = strata::testing::test_shard_config(f.dir.path(), i, f.table, 16).lmdb;
    lc.shared_handle = true;
    auto lmdb = lmdb_tier::open(f.table.layout, lc);
    ASSERT_TRUE(lmdb) << lmdb.err().to_string();
    ASSERT_TRUE((*lmdb)->dump([&](uint64_t, const std::byte* rec) {
      EXPECT_EQ(weights_of(rec)[0], 4.0f);
      ++found;
    }));
  }
  EXPECT_EQ(found, keys.size());
}

// A shard whose write-backs fail `failures` times (negative: always), for
// the cache tier's write-back failure paths; pulls reach the real shard.
shard_actor failing_write_backs(caf::actor_system& system, shard_actor real,
                                std::shared_ptr<int> failures) {
  auto proxy = system.spawn([real, failures](caf::event_based_actor* self) -> caf::behavior {
    return {
        [self, real, failures](write_back_atom a, row_batch& rows) -> caf::result<ok_atom> {
          if (*failures != 0) {
            if (*failures > 0) --*failures;
            return caf::make_error(caf::sec::runtime_error, "injected write-back failure");
          }
          return self->delegate(real, a, std::move(rows));
        },
        [self, real](pull_atom a, std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
          return self->delegate(real, a, std::move(keys));
        },
    };
  });
  return caf::actor_cast<shard_actor>(proxy);
}

// Issue 15 item 3: a failed write-back is sent again; the pass ends with
// every row at its shard (before: pass_end failed and the rows were never
// re-sent).
TEST(CacheTier, FailedWriteBackIsResentAndLosesNothing) {
  cluster_fixture f(sgd_table(1, initializer_kind::zeros), 2);
  auto failures = std::make_shared<int>(2);
  f.shards[0] = failing_write_backs(f.h.system(), f.shards[0], failures);
  auto cache = f.cache(training_mode::pass);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 40; ++k) keys.push_back(k);
  f.h.call<ok_atom>(cache, pass_start_atom::value, uint64_t{1});
  f.lookup(cache, keys);
  f.push(cache, keys, 2.0f);
  f.h.call<ok_atom>(cache, pass_end_atom::value, uint64_t{1});
  EXPECT_EQ(*failures, 0);
  for (uint64_t k : keys) EXPECT_EQ(f.shard_weight(k), 2.0f) << "key " << k;
}

// A write-back that keeps failing fail-stops the tier: pass_end and every
// later pass_end, drain or push fail naming the tier and the cause (before:
// the next pass_end answered ok with the rows lost).
TEST(CacheTier, WriteBackThatKeepsFailingFailStopsTheTier) {
  cluster_fixture f(sgd_table(1, initializer_kind::zeros), 2);
  f.shards[0] = failing_write_backs(f.h.system(), f.shards[0], std::make_shared<int>(-1));
  auto cache = f.cache(training_mode::pass);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 40; ++k) keys.push_back(k);
  f.h.call<ok_atom>(cache, pass_start_atom::value, uint64_t{1});
  f.lookup(cache, keys);
  f.push(cache, keys, 2.0f);
  auto expect_failure = [&](auto answer, const char* what) {
    f.h.sched().run();
    ASSERT_TRUE(answer->error) << what << " answered ok after rows were lost";
    const std::string text = f.h.system().render(*answer->error);
    EXPECT_NE(text.find("cache 0 fail-stopped"), std::string::npos) << what << ": " << text;
    EXPECT_NE(text.find("injected write-back failure"), std::string::npos) << what << ": " << text;
  };
  expect_failure(f.h.ask<ok_atom>(cache, pass_end_atom::value, uint64_t{1}), "pass_end");
  expect_failure(f.h.ask<ok_atom>(cache, pass_end_atom::value, uint64_t{2}), "second pass_end");
  expect_failure(f.h.ask<ok_atom>(cache, drain_atom::value), "drain");
  push_request req;
  req.keys = keys;
  req.grads.assign(keys.size(), -1.0f);
  expect_failure(f.h.ask<push_ack>(cache, push_atom::value, req), "push");
}

}  // namespace
}  // namespace strata::actors
