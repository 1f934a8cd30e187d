// A gateway push spanning shards that fails part-way (issue 15 item 5):
// the gateway pushes shard by shard, so when one shard fails the earlier
// shards have applied their part. The error must say exactly what was
// applied, what is unknown and what was not sent, so the client never
// re-sends what landed. In one process on real shards (no workers: a
// store), the failure injected by killing a shard.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "actors/local_cluster.hpp"
#include "actors/partition_map.hpp"
#include "serving/training_gateway.hpp"
#include "tests/actors/checkpoint_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::serving {
namespace {

using namespace std::chrono_literals;
using strata::testing::temp_dir;

TEST(GatewayPartialPush, AFailureSaysExactlyWhichShardsAndKeysWereApplied) {
  temp_dir dir;
  // SGD with learning rate 1 from zeros: a weight is minus its gradients.
  auto c = actors::count_cluster(dir.path() / "no-data.tsv", dir.path(),
                                 actors::training_mode::async);
  c.workers.clear();
  c.heldout = model::reader_config{};
  c.checkpoint = actors::checkpoint_settings{};
  const actors::partition_map map(c.partitions, 2);
  std::vector<uint64_t> mine[2];
  for (uint64_t k = 1; mine[0].size() < 3 || mine[1].size() < 3; ++k)
    if (mine[map.shard_of(k)].size() < 3) mine[map.shard_of(k)].push_back(k);
  const std::vector<uint64_t> keys = {mine[0][0], mine[1][0], mine[0][1],
                                      mine[1][1], mine[0][2], mine[1][2]};
  const uint32_t dim = c.table.layout.dim;

  std::string failure;
  std::vector<float> shard0_after;
  actors::cluster_hooks hooks;
  hooks.started = [&](caf::actor_system& system, const actors::training_cluster& cluster) {
    // A store runs until a stop: stop it however this ends.
    struct stop_at_exit {
      actors::coordinator_actor coordinator;
      ~stop_at_exit() { caf::anon_send(coordinator, actors::stop_atom::value); }
    } stop{cluster.coordinator};
    gateway_config gc;
    gc.table = c.table.name;
    gc.layout = c.table.layout;
    gc.timeout = 10s;
    gc.routing_refresh = std::chrono::hours(1);  // the map is read once, below
    training_gateway gateway(system, cluster.coordinator, gc);
    lookup_result fresh;
    ASSERT_TRUE(gateway.lookup(c.table.name, keys, fresh));
    // Shard 1 dies: the push reaches shard 0, then fails at shard 1.
    {
      caf::scoped_actor self{system};
      self->monitor(cluster.shards[1]);
      caf::anon_send_exit(cluster.shards[1], caf::exit_reason::kill);
      self->receive([](caf::down_msg&) {});
    }
    const std::vector<float> grads(keys.size() * dim, 1.0f);
    auto pushed = gateway.push(c.table.name, dim, keys, grads);
    ASSERT_FALSE(pushed) << "a push to a dead shard succeeded";
    failure = pushed.err().message();
    lookup_result after;
    ASSERT_TRUE(gateway.lookup(c.table.name, mine[0], after)) << "shard 0 must still answer";
    shard0_after = after.weights;
  };
  auto r = actors::run_local_cluster(c, {}, hooks);  // fails: a shard was killed
  (void)r;

  auto keys_text = [](const std::vector<uint64_t>& ks) {
    std::string out = std::to_string(ks.size()) + " keys";
    for (size_t i = 0; i < ks.size(); ++i) out += (i ? ", " : ": ") + std::to_string(ks[i]);
    return out;
  };
  EXPECT_NE(failure.find("applied: shard 0 (" + keys_text(mine[0]) + ")"), std::string::npos)
      << failure;
  EXPECT_NE(failure.find("unknown (the failed request may still apply): shard 1 (" +
                         keys_text(mine[1]) + ")"),
            std::string::npos)
      << failure;
  EXPECT_NE(failure.find("not sent: nothing"), std::string::npos) << failure;
  // What the message calls applied was applied, once.
  ASSERT_EQ(shard0_after.size(), mine[0].size() * dim);
  for (float w : shard0_after) EXPECT_EQ(w, -1.0f);
}

}  // namespace
}  // namespace strata::serving
