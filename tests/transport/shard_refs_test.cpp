// Shard handles across nodes (issue 19, remote-scale): routing tables and
// migration orders travel as (node, target) refs, so a partition migration
// runs between shards on two nodes through proxies: copy (shard_migrate,
// rows as shard_migrate_in), fence, commit, forwarding and resend. A
// decoded ref this node cannot map (unknown node, a target no shard is
// exported as, an owner index without a shard) is a reply_error naming it.
// Cache tiers travel the same way when a worker is told its relocated cache
// tiers (worker_rebind, a drain): its node maps each ref to its own cache
// tier or a proxy, and hostile refs are refused, named. Real shards, cache
// tiers and LMDB, real bridges over UCX on loopback.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>

#include "actors/cache_tier_actor.hpp"
#include "actors/partition_map.hpp"
#include "actors/shard_actor.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "transport/codec.hpp"
#include "transport/payloads.hpp"
#include "transport/remote_actors.hpp"

namespace strata::transport {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using strata::testing::temp_dir;

struct system_config : caf::actor_system_config {
  system_config() {
    set("logger.verbosity", caf::atom("quiet"));
    actors::add_message_types(*this);
  }
};

constexpr uint32_t target_a = 0x10000, target_b = 0x10001;

// Nodes "a" and "b" in one actor system, each exporting a real shard
// (index 0 on a, index 1 on b), connected over UCX.
struct two_nodes {
  system_config config;
  caf::actor_system system{config};
  std::unique_ptr<node_transport> a, b;
  actors::shard_actor shard_a, shard_b;
  table_config table = strata::testing::exact_sum_table(2);

  explicit two_nodes(const fs::path& dir) {
    ::setenv("UCX_NET_DEVICES", "lo", 0);
    auto sa = actors::spawn_shard(system, strata::testing::test_shard_config(dir / "a", 0, table, 16));
    auto sb = actors::spawn_shard(system, strata::testing::test_shard_config(dir / "b", 1, table, 16));
    EXPECT_TRUE(sa && sb);
    shard_a = *sa;
    shard_b = *sb;
    bridge_config ca, cb;
    ca.node_name = "a";
    cb.node_name = "b";
    auto ta = node_transport::start(system, ca);
    auto tb = node_transport::start(system, cb);
    EXPECT_TRUE(ta && tb);
    a = std::move(*ta);
    b = std::move(*tb);
    a->export_shard(target_a, shard_a);
    b->export_shard(target_b, shard_b);
    auto peer = a->bridge().connect("127.0.0.1", b->bridge().port(), 30s);
    EXPECT_TRUE(peer) << peer.err().to_string();
    EXPECT_TRUE(b->bridge().wait_for_peer("a", 30s));
  }
  ~two_nodes() {
    a->stop();
    b->stop();
    caf::anon_send_exit(shard_a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(shard_b, caf::exit_reason::user_shutdown);
  }

  // A request (to a handle of any kind); the error's text on failure.
  template <class Reply, class Handle, class... Ts>
  expected<Reply> call(const Handle& to, Ts&&... xs) {
    caf::scoped_actor self{system};
    expected<Reply> out = error(errc::unavailable, "no answer");
    self->request(to, 60s, std::forward<Ts>(xs)...)
        .receive([&](Reply& r) { out = std::move(r); },
                 [&](caf::error& e) { out = error(errc::io_error, system.render(e)); });
    return out;
  }

  // Sends a raw request frame from node a to b's shard (or `target`); the
  // reply frame.
  inbound_frame ask_b(frame_type type, std::vector<std::byte> payload, uint32_t target = target_b) {
    auto answer = std::make_shared<std::promise<expected<inbound_frame>>>();
    auto f = answer->get_future();
    auto s = a->bridge().request(
        "b", type, target, std::move(payload),
        [answer](expected<inbound_frame> r) { answer->set_value(std::move(r)); });
    EXPECT_TRUE(s) << s.err().to_string();
    EXPECT_EQ(f.wait_for(60s), std::future_status::ready);
    auto r = f.get();
    EXPECT_TRUE(r) << r.err().to_string();
    return r ? std::move(*r) : inbound_frame{};
  }
};

std::string error_text(const inbound_frame& f) {
  std::string text;
  if (f.header.type == frame_type::reply_error) (void)decode_payload(f.payload, text);
  return text;
}

TEST(ShardRefs, AMigrationRunsBetweenShardsOnTwoNodes) {
  temp_dir dir;
  two_nodes n(dir.path());
  const auto& layout = n.table.layout;
  // b's shard holds 200 rows (made durable: the copy scans LMDB).
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 200; ++k) keys.push_back(k * 7919);
  const auto bytes = strata::testing::make_records(layout, keys, 3);
  actors::row_batch rows;
  rows.keys = keys;
  rows.records.assign(reinterpret_cast<const uint8_t*>(bytes.data()),
                      reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
  ASSERT_TRUE((n.call<actors::ok_atom>(n.shard_b, actors::migrate_in_atom::value, rows)));
  ASSERT_TRUE((n.call<actors::ok_atom>(n.shard_b, actors::drain_atom::value)));

  // From node a: b's shard (a proxy) moves every partition to a's own shard.
  auto b_on_a = n.a->remote_shard("b", target_b);
  const uint32_t partitions = 64;
  actors::migration_order order;
  order.epoch = 2;
  for (uint32_t p = 0; p < partitions; ++p) {
    order.partitions.push_back(p);
    order.destinations.push_back(caf::actor_cast<caf::actor>(n.shard_a));
  }
  auto copied = n.call<actors::migration_stats>(b_on_a, actors::migrate_atom::value, order);
  ASSERT_TRUE(copied) << copied.err().to_string();
  EXPECT_EQ(copied->rows, keys.size());
  auto fenced = n.call<actors::migration_stats>(b_on_a, actors::fence_atom::value, uint64_t{2});
  ASSERT_TRUE(fenced) << fenced.err().to_string();

  // Commit: every partition to shard 0 (a's), to both shards.
  actors::routing_table table;
  table.epoch = 2;
  table.owners.assign(partitions, 0);
  table.shards = {caf::actor_cast<caf::actor>(n.shard_a), caf::actor_cast<caf::actor>(b_on_a)};
  auto committed_b = n.call<actors::ok_atom>(b_on_a, actors::commit_atom::value, table);
  ASSERT_TRUE(committed_b) << committed_b.err().to_string();
  ASSERT_TRUE((n.call<actors::ok_atom>(n.shard_a, actors::commit_atom::value, table)));

  // a's shard holds every row, read over the transport from node b (resend).
  auto a_on_b = n.b->remote_shard("a", target_a);
  actors::row_batch moved;
  for (uint32_t p = 0; p < partitions; ++p) {
    auto part = n.call<actors::row_batch>(a_on_b, actors::resend_atom::value, p);
    ASSERT_TRUE(part) << part.err().to_string();
    moved.keys.insert(moved.keys.end(), part->keys.begin(), part->keys.end());
    moved.records.insert(moved.records.end(), part->records.begin(), part->records.end());
  }
  ASSERT_EQ(moved.keys.size(), keys.size());
  // The values (weights and optimizer state; the meta's access tick is the
  // shard's own).
  const size_t rb = layout.record_bytes(), meta = sizeof(row_meta), values = layout.raw_bytes();
  for (size_t i = 0; i < moved.keys.size(); ++i) {
    auto at = std::find(keys.begin(), keys.end(), moved.keys[i]) - keys.begin();
    ASSERT_EQ(0, std::memcmp(moved.records.data() + i * rb + meta, bytes.data() + at * rb + meta,
                             values))
        << "key " << moved.keys[i];
  }
  // b no longer owns them: a pull sent to b's shard is forwarded to a's
  // (b resolved the table's ref of a's shard to its proxy).
  auto pulled = n.call<actors::pull_reply>(n.shard_b, actors::pull_atom::value,
                                           std::vector<uint64_t>{keys[5]});
  ASSERT_TRUE(pulled) << pulled.err().to_string();
  ASSERT_EQ(pulled->rows.keys.size(), 1u);
  EXPECT_EQ(0, std::memcmp(pulled->rows.records.data() + meta, bytes.data() + 5 * rb + meta, values));
}

TEST(ShardRefs, ARefToAnUnknownNodeOrTargetIsAnErrorNamingIt) {
  temp_dir dir;
  two_nodes n(dir.path());
  routing_wire t;
  t.epoch = 2;
  t.owners = {0, 0};
  t.shards = {actor_ref{"nowhere", target_a}};
  auto r = n.ask_b(frame_type::shard_commit, encode_payload(t));
  ASSERT_EQ(r.header.type, frame_type::reply_error);
  EXPECT_NE(error_text(r).find("node 'b': bad shard_commit payload: node 'b': a shard on unknown "
                               "node 'nowhere' (target 65536; peers: a)"),
            std::string::npos)
      << error_text(r);

  t.shards = {actor_ref{"b", 99}};
  r = n.ask_b(frame_type::shard_commit, encode_payload(t));
  EXPECT_NE(error_text(r).find("node 'b' exports no shard as target 99"), std::string::npos)
      << error_text(r);

  t.shards = {actor_ref{"b", target_b}};
  t.owners = {0, 3};
  r = n.ask_b(frame_type::shard_commit, encode_payload(t));
  EXPECT_NE(error_text(r).find("routing table of epoch 2: owner shard 3 of 1 shards"),
            std::string::npos)
      << error_text(r);

  migration_wire m;
  m.epoch = 2;
  m.partitions = {1, 2};
  m.destinations = {actor_ref{"a", target_a}};
  r = n.ask_b(frame_type::shard_migrate, encode_payload(m));
  EXPECT_NE(error_text(r).find("migration order of epoch 2: 2 partitions, 1 destinations"),
            std::string::npos)
      << error_text(r);

  // Truncated bytes are the codec's error, never a crash.
  auto bytes = encode_payload(t);
  bytes.resize(bytes.size() - 3);
  r = n.ask_b(frame_type::shard_commit, bytes);
  EXPECT_NE(error_text(r).find("bad shard_commit payload"), std::string::npos) << error_text(r);

  // b's shard still serves (nothing was committed).
  auto stats = n.call<actors::tier_stats>(n.shard_b, actors::stats_atom::value);
  EXPECT_TRUE(stats);
}

// A worker on b (a stand-in that keeps what it is told) run by a is told
// its cache tiers from a: one exported on a, one exported on b (a's proxy
// of it). b maps them to a proxy of a's and to its own, which answer;
// refs b cannot map, too many refs, a rebind before a ran the worker, and
// a cache tier a cannot name are errors naming them.
TEST(CacheRefs, AWorkerIsToldItsCacheTiersAcrossNodesAndHostileRefsAreRefused) {
  temp_dir dir;
  two_nodes n(dir.path());
  constexpr uint32_t cache_target_a = 0x20000, cache_target_b = 0x20001, worker_target = 0x30000;
  auto cache = [&](uint32_t index) {
    actors::cache_config cc;
    cc.index = index;
    cc.table = n.table;
    auto c = actors::spawn_cache_tier(n.system, cc, actors::training_mode::pass,
                                      {n.shard_a, n.shard_b}, actors::partition_map(8, 2));
    EXPECT_TRUE(c) << c.err().to_string();
    return *c;
  };
  auto cache_a = cache(0), cache_b = cache(1);
  n.a->export_cache(cache_target_a, cache_a);
  n.b->export_cache(cache_target_b, cache_b);
  auto told = std::make_shared<std::promise<std::vector<actors::cache_tier_actor>>>();
  auto worker =
      n.system.spawn([told](actors::worker_actor::pointer) -> actors::worker_actor::behavior_type {
        return {
            [](actors::run_atom, uint64_t, uint64_t) { return actors::worker_result{}; },
            [told](actors::rebind_atom, std::vector<actors::cache_tier_actor>& caches) {
              told->set_value(caches);
              return actors::ok_atom::value;
            },
            [](actors::stats_atom) {
              return actors::actor_stats{"worker", 0, 0};
            },
        };
      });
  n.b->export_worker(worker_target, worker);
  auto proxy = n.a->remote_worker("b", worker_target);

  // Only the node that runs the worker may tell it its cache tiers.
  auto r = n.ask_b(frame_type::worker_rebind,
                   encode_payload(std::vector<actor_ref>{actor_ref{"b", cache_target_b}}),
                   worker_target);
  EXPECT_NE(error_text(r).find("node 'b': worker_rebind from node 'a', which does not run this "
                               "worker"),
            std::string::npos)
      << error_text(r);
  auto ran =
      n.call<actors::worker_result>(proxy, actors::run_atom::value, uint64_t{1}, uint64_t{1});
  ASSERT_TRUE(ran) << ran.err().to_string();

  auto ok = n.call<actors::ok_atom>(
      proxy, actors::rebind_atom::value,
      std::vector<actors::cache_tier_actor>{cache_a, n.a->remote_cache("b", cache_target_b)});
  ASSERT_TRUE(ok) << ok.err().to_string();
  auto future = told->get_future();
  ASSERT_EQ(future.wait_for(60s), std::future_status::ready);
  const auto caches = future.get();
  ASSERT_EQ(caches.size(), 2u);
  EXPECT_EQ(caches[1], cache_b) << "b's own cache tier should be the exported actor itself";
  // a's cache tier reaches b's worker as a proxy that answers for it.
  auto stats = n.call<actors::tier_stats>(caches[0], actors::stats_atom::value);
  ASSERT_TRUE(stats) << stats.err().to_string();
  EXPECT_EQ(stats->index, 0u) << "the proxy should reach a's cache tier 0";

  // A cache tier that is neither exported on a nor a proxy: a names it.
  auto hidden = cache(2);
  auto refused = n.call<actors::ok_atom>(proxy, actors::rebind_atom::value,
                                         std::vector<actors::cache_tier_actor>{hidden});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message().find("node 'a': cache tier actor"), std::string::npos)
      << refused.err().message();
  EXPECT_NE(refused.err().message().find("is neither exported here nor a proxy of another "
                                         "node's cache tier"),
            std::string::npos)
      << refused.err().message();

  // Hostile refs in a raw frame: b names what it cannot map.
  r = n.ask_b(frame_type::worker_rebind,
              encode_payload(std::vector<actor_ref>{actor_ref{"nowhere", cache_target_a}}),
              worker_target);
  ASSERT_EQ(r.header.type, frame_type::reply_error);
  EXPECT_NE(error_text(r).find("node 'b': bad worker_rebind payload: node 'b': a cache tier on "
                               "unknown node 'nowhere' (target 131072; peers: a)"),
            std::string::npos)
      << error_text(r);
  r = n.ask_b(frame_type::worker_rebind, encode_payload(std::vector<actor_ref>{actor_ref{"b", 99}}),
              worker_target);
  EXPECT_NE(error_text(r).find("node 'b' exports no cache tier as target 99"), std::string::npos)
      << error_text(r);
  // A shard's target is not a cache tier.
  r = n.ask_b(frame_type::worker_rebind,
              encode_payload(std::vector<actor_ref>{actor_ref{"b", target_b}}), worker_target);
  EXPECT_NE(error_text(r).find("node 'b' exports no cache tier as target 65537"), std::string::npos)
      << error_text(r);
  // More cache tiers than any cluster has: refused before any is mapped.
  r = n.ask_b(frame_type::worker_rebind,
              encode_payload(std::vector<actor_ref>(5000, actor_ref{"a", cache_target_a})),
              worker_target);
  EXPECT_NE(error_text(r).find("worker_rebind names 5000 cache tiers (at most 4096)"),
            std::string::npos)
      << error_text(r);
  // Sent to a shard, the frame is refused as not its kind.
  r = n.ask_b(frame_type::worker_rebind,
              encode_payload(std::vector<actor_ref>{actor_ref{"b", cache_target_b}}));
  EXPECT_NE(error_text(r).find("is a shard, not a worker_rebind receiver"), std::string::npos)
      << error_text(r);

  for (const auto& a : {caf::actor_cast<caf::actor>(cache_a), caf::actor_cast<caf::actor>(cache_b),
                        caf::actor_cast<caf::actor>(hidden), caf::actor_cast<caf::actor>(worker)})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace strata::transport
