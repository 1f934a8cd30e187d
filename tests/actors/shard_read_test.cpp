// The shard's reads off its thread (actors/shard_read.cpp): a pull whose
// rows are below DRAM waits for the reader while other pulls are answered,
// a change arriving after a waiting pull is not seen by it, and a read that
// raced a flush of the same key never installs its older copy.
#include <gtest/gtest.h>

#include "actors/row_batch_util.hpp"
#include "actors/shard_actor.hpp"
#include "actors/shard_reader.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::actor_harness;
using strata::testing::exact_sum_table;
using strata::testing::temp_dir;

struct shard_read_fixture : ::testing::Test {
  temp_dir dir;
  actor_harness h;
  table_config table = exact_sum_table(2);
  std::shared_ptr<shard_read_gate> gate = std::make_shared<shard_read_gate>();
  shard_actor shard;
  void SetUp() override {
    auto cfg = strata::testing::test_shard_config(dir.path(), 0, table, 16);
    auto s = spawn_shard(h.system(), cfg, gate);
    ASSERT_TRUE(s) << s.err().to_string();
    shard = *s;
  }
  // A held reply keeps a pull waiting (and the shard alive): let it go.
  void TearDown() override {
    gate->release();
    h.sched().run();
  }
  void push(uint64_t first, uint64_t count, float inc) {
    push_request req;
    for (uint64_t k = first; k < first + count; ++k) req.keys.push_back(k);
    req.grads.assign(req.keys.size() * table.layout.dim, -inc);
    h.call<push_reply>(shard, push_atom::value, req);
  }
  float weight(const pull_reply& r, size_t i = 0) {
    return weights_of(rows_of(r.rows, table.layout)[i])[0];
  }
  float pulled(uint64_t key) {
    return weight(h.call<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{key}));
  }
  // Keys 0..63 at 3.0 in LMDB; DRAM (16 rows) holds 48..63.
  void cold_rows() {
    push(0, 64, 3.0f);
    h.call<ok_atom>(shard, drain_atom::value);
    std::vector<uint64_t> last;
    for (uint64_t k = 48; k < 64; ++k) last.push_back(k);
    h.call<pull_reply>(shard, pull_atom::value, last);
  }
};

// While the reader holds key 0's read, a pull of a row in DRAM is answered;
// the cold pull is answered once the read comes back.
TEST_F(shard_read_fixture, WarmPullIsAnsweredWhileAColdPullWaitsForTheReader) {
  cold_rows();
  gate->hold = true;
  auto cold = h.ask<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{0});
  h.sched().run();
  EXPECT_FALSE(cold->value) << "the cold pull did not wait for its read";
  auto warm = h.ask<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{63});
  h.sched().run();
  ASSERT_TRUE(warm->value) << "a pull of a DRAM row waited behind the LMDB read";
  EXPECT_EQ(weight(*warm->value), 3.0f);
  EXPECT_FALSE(cold->value);
  auto before = h.call<tier_stats>(shard, stats_atom::value);
  gate->release();
  h.sched().run();
  ASSERT_TRUE(cold->value);
  EXPECT_EQ(weight(*cold->value), 3.0f);
  auto after = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(after.chain_hits[2], before.chain_hits[2] + 1);  // installed from the read
  EXPECT_EQ(after.chain_hits[0], before.chain_hits[0]);      // and counted once, there
}

// The race: the reader reads key 0 (3.0), then a push makes it 8.0 and the
// row is evicted, flushed and released before the read's reply arrives.
// The older copy must not be installed: the next pull sees 8.0. The pull
// that was waiting when the push came is answered before the push (3.0).
TEST_F(shard_read_fixture, ReadThatRacedAFlushOfItsKeyIsNotInstalled) {
  cold_rows();
  gate->hold = true;
  auto early = h.ask<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{0});
  h.sched().run();  // the reader has read 3.0 and holds its reply
  ASSERT_FALSE(early->value);
  push(0, 1, 5.0f);  // answers the waiting pull first, then 0 -> 8.0
  ASSERT_TRUE(early->value);
  EXPECT_EQ(weight(*early->value), 3.0f) << "a waiting pull saw a push that came after it";
  push(100, 64, 1.0f);  // evicts key 0 (dirty): flushed and released
  h.call<ok_atom>(shard, drain_atom::value);
  auto before = h.call<tier_stats>(shard, stats_atom::value);
  ASSERT_EQ(before.write_behind_rows, 0u);
  gate->release();  // the read of 3.0 arrives now
  h.sched().run();
  EXPECT_EQ(pulled(0), 8.0f) << "the read's older copy replaced the flushed row";
}

// A client gets its pull's reply before the answer to its later write of
// any key (as when every read was on the shard's thread): a pass-mode
// cache that wrote a row back and evicted it must not get an older copy
// of it afterwards from a pull it sent before. Another client's write of
// other keys does not hurry the pull.
TEST_F(shard_read_fixture, WaitingPullIsAnsweredBeforeItsClientsLaterWriteBack) {
  cold_rows();
  auto row = h.call<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{63});
  gate->hold = true;
  auto replies = std::make_shared<std::vector<std::string>>();
  h.system().spawn([s = shard, replies](caf::event_based_actor* self) {
    self->request(s, caf::infinite, pull_atom::value, std::vector<uint64_t>{0})
        .then([replies](pull_reply&) { replies->push_back("pull"); });
  });
  h.sched().run();
  auto other = h.ask<ok_atom>(shard, write_back_atom::value, row.rows);
  h.sched().run();
  ASSERT_TRUE(other->value);
  EXPECT_TRUE(replies->empty()) << "another client's write-back answered the waiting pull";
  gate->release();
  h.sched().run();
  ASSERT_EQ(*replies, (std::vector<std::string>{"pull"}));
  replies->clear();
  gate->hold = true;
  h.system().spawn([s = shard, rows = row.rows, replies](caf::event_based_actor* self) {
    self->request(s, caf::infinite, pull_atom::value, std::vector<uint64_t>{1})
        .then([replies](pull_reply&) { replies->push_back("pull"); });
    self->request(s, caf::infinite, write_back_atom::value, rows).then([replies](ok_atom) {
      replies->push_back("write_back");
    });
  });
  h.sched().run();
  EXPECT_EQ(*replies, (std::vector<std::string>{"pull", "write_back"}));
}

// TTL: a row that expires (tombstone written to LMDB by the shard itself,
// not by a flush) while a read of it is out must not come back from the
// read's older copy.
TEST(ShardRead, ReadThatRacedAnExpiryIsNotInstalled) {
  temp_dir dir;
  actor_harness h;
  auto table = exact_sum_table(2);
  auto cfg = strata::testing::test_shard_config(dir.path(), 0, table, 16);
  cfg.dram.ttl_ticks = 2;
  auto gate = std::make_shared<shard_read_gate>();
  auto s = spawn_shard(h.system(), cfg, gate);
  ASSERT_TRUE(s) << s.err().to_string();
  auto push = [&](std::vector<uint64_t> keys, float inc) {
    push_request req;
    req.keys = std::move(keys);
    req.grads.assign(req.keys.size() * table.layout.dim, -inc);
    h.call<push_reply>(*s, push_atom::value, req);
  };
  auto first = [&](const pull_reply& r) { return weights_of(rows_of(r.rows, table.layout)[0])[0]; };
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(k);
  push(keys, 3.0f);
  h.call<ok_atom>(*s, drain_atom::value);
  gate->hold = true;
  auto early = h.ask<pull_reply>(*s, pull_atom::value, std::vector<uint64_t>{0});
  h.sched().run();  // the reader has read 3.0 and holds its reply
  push({0}, 5.0f);  // answers the waiting pull; 0 -> 8.0 in DRAM
  ASSERT_TRUE(early->value);
  EXPECT_EQ(first(*early->value), 3.0f);
  h.system().spawn([s = *s](caf::event_based_actor* self) {
    self->send(s, tick_atom::value, uint32_t{10});  // every row idle for 10 ticks: expired
  });
  h.sched().run();
  gate->release();  // the read of 3.0 arrives now
  h.sched().run();
  auto r = h.call<pull_reply>(*s, pull_atom::value, std::vector<uint64_t>{0});
  EXPECT_EQ(first(r), 0.0f) << "the expired row came back from the read's older copy";
}

// A prefetch reads off the thread too; the pull after it finds DRAM.
TEST_F(shard_read_fixture, PrefetchedRowsAreInstalledWhenTheReadReturns) {
  cold_rows();
  h.system().spawn([s = shard](caf::event_based_actor* self) {
    self->send(s, prefetch_atom::value, std::vector<uint64_t>{0, 1, 1000});
  });
  h.sched().run();
  auto before = h.call<tier_stats>(shard, stats_atom::value);
  auto r = h.call<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{0, 1, 1000});
  EXPECT_EQ(weight(r, 0), 3.0f);
  EXPECT_EQ(weight(r, 1), 3.0f);
  EXPECT_EQ(weight(r, 2), 0.0f);  // never stored: the initializer's row
  auto after = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_EQ(after.lmdb_waits, before.lmdb_waits);
  EXPECT_EQ(after.chain_hits[0], before.chain_hits[0] + 3);
}

// The write-behind's bound with reads off the shard's thread: a prefetch's
// read comes back and its install evicts DRAM's dirty rows into the
// write-behind, past the bound, while no flush is in flight and no pull
// waits on that read. The install sends the flush (and a request held at
// the bound sends whatever flush it can). Before, nothing sent one: the
// next pull, and every later pull, push and write-back, stayed held.
TEST_F(shard_read_fixture, ARequestHeldAtTheBoundAfterAReadsInstallStillGetsAFlushSent) {
  auto cfg = strata::testing::test_shard_config(dir.path(), 1, table, 16);
  cfg.max_queued_flush_batches = 1;  // 8 rows
  auto spawned = spawn_shard(h.system(), cfg, gate);
  ASSERT_TRUE(spawned) << spawned.err().to_string();
  shard = *spawned;
  // A request left held would keep its client alive and the actor system's
  // destructor waiting: the shard is stopped at the end, pass or fail.
  struct stop_at_end {
    actor_harness& h;
    shard_actor& shard;
    ~stop_at_end() {
      caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
      h.sched().run();
    }
  } stop{h, shard};
  push(0, 16, 1.0f);  // DRAM full of dirty rows
  h.sched().run();    // every flush lands
  const auto quiet = h.call<tier_stats>(shard, stats_atom::value);
  ASSERT_EQ(quiet.flushes_in_flight, 0u);
  std::vector<uint64_t> cold;
  for (uint64_t k = 100; k < 140; ++k) cold.push_back(k);
  h.system().spawn([this, cold](caf::event_based_actor* self) {
    self->send(shard, prefetch_atom::value, cold);
  });
  h.sched().run();  // the read returns; its install evicts the dirty rows
  // The install evicted the 16 dirty rows (at least a batch: the bound).
  const auto installed = h.call<tier_stats>(shard, stats_atom::value);
  EXPECT_GE(installed.evictions, quiet.evictions + 16) << "the install evicted too little";
  EXPECT_EQ(installed.flushed_rows, quiet.flushed_rows + 16)
      << "the evicted dirty rows were not flushed";
  auto read = h.ask<pull_reply>(shard, pull_atom::value, std::vector<uint64_t>{0});
  h.sched().run();
  ASSERT_TRUE(read->value) << "a pull waited at the bound with no flush in flight";
  EXPECT_EQ(weight(*read->value), 1.0f);
}

}  // namespace
}  // namespace strata::actors
