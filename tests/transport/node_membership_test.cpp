// Membership against real `strata node` processes (issue 16 item 1): while
// a two-node cluster of the count objective starts, a process that claims
// member n1's name but holds another key connects to node n0's UCX port
// and sends shard pushes and a checkpoint request (a member's sender id
// copied into the headers). Node n0 refuses its hello, naming its address
// and why, drops every frame, and the cluster then trains with the real n1
// to the exact sums: not one of the attacker's pushes reached a shard.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/checkpoint.hpp"
#include "actors/protocol.hpp"
#include "common/child_process.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/tiers/test_util.hpp"
#include "transport/codec.hpp"
#include "transport/node_bridge.hpp"

namespace strata::testing {
namespace {

using namespace std::chrono_literals;

TEST(NodeMembership, ANonMemberCannotPushIntoAStrataNode) {
  ::setenv("UCX_NET_DEVICES", "lo", 0);
  temp_dir dir;
  const auto d = dir.path();
  const auto manifest = d / "pair.yaml";
  const uint16_t port0 = free_port(), port1 = free_port();
  {
    std::ofstream m(manifest);
    m << "name: pair\nmode: async\npartitions: 64\nthreads: 2\n"
      << "cluster_secret:\n  file: " << (d / "cluster.secret").string()
      << "\n  create_if_missing: true\n"
      << "nodes:\n"
      << "  - name: n0\n    host: 127.0.0.1\n    transport_port: " << port0 << "\n"
      << "    ssd_path: " << (d / "n0").string() << "\n"
      << "  - name: n1\n    host: 127.0.0.1\n    transport_port: " << port1 << "\n"
      << "    ssd_path: " << (d / "n1").string() << "\n"
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: 2\n  dram_bytes: 128KiB\n  ssd_path: " << (d / "state").string()
      << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
      << "caches:\n  count: 2\n  sets: 8\n"
      << "workers:\n  count: 2\n  batch_size: 32\n"
      << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: 20000\n    distinct_keys: 5000\n    seed: 5\n"
      << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 2\n";
  }
  child_process n0(STRATA_BINARY, {"node", "--manifest", manifest.string(), "--node", "n0"});
  ASSERT_TRUE(n0.wait_line("transport: node n0 listening", 120s)) << n0.output();

  // The attacker: member n1's name, another key; it sends as soon as its
  // hello left (test_trust_blindly).
  transport::bridge_config ca;
  ca.node_name = "n1";
  ca.cluster_secret.bytes.assign(32, 'x');
  ca.test_trust_blindly = true;
  ca.heartbeat_interval = 100ms;
  ca.heartbeat_timeout = 2s;
  auto attacker = transport::node_bridge::start(ca, [](transport::inbound_frame) {});
  ASSERT_TRUE(attacker) << attacker.err().to_string();
  auto target = (*attacker)->connect("127.0.0.1", port0, 30s);
  ASSERT_TRUE(target) << target.err().to_string();
  actors::push_request push;
  for (uint64_t k = 1; k <= 64; ++k) {
    push.keys.push_back(k);
    push.grads.push_back(-1000.0f);
  }
  push.epoch = 1;
  int sent = 0;
  for (int i = 0; i < 40; ++i) {
    const auto type =
        i % 10 == 9 ? transport::frame_type::shard_checkpoint : transport::frame_type::shard_push;
    auto payload = type == transport::frame_type::shard_push
                       ? transport::encode_payload(push)
                       : transport::encode_payload(uint64_t{7});
    if (!(*attacker)->send(*target, type, static_cast<uint32_t>(i % 2), std::move(payload))) break;
    ++sent;
  }
  EXPECT_GT(sent, 0);
  ASSERT_TRUE(n0.wait_line("strata transport [n0]: hello from 127.0.0.1:", 30s)) << n0.output();
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((*attacker)->is_up(*target) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE((*attacker)->is_up(*target)) << "node n0 kept the non-member's connection";
  (*attacker)->stop();

  // The real n1 joins; the cluster trains to the exact sums.
  child_process n1(STRATA_BINARY, {"node", "--manifest", manifest.string(), "--node", "n1"});
  const auto rc0 = n0.wait_exit(240s);
  const auto rc1 = n1.wait_exit(60s);
  ASSERT_TRUE(rc0 && rc1) << n0.output() << n1.output();
  EXPECT_EQ(*rc0, 0) << n0.output();
  EXPECT_EQ(*rc1, 0) << n1.output();
  const auto out = n0.output();
  EXPECT_NE(out.find("wrong proof for node 'n1'"), std::string::npos) << out;
  EXPECT_NE(out.find("dropped a frame from an endpoint that has not authenticated"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cluster: all 2 nodes ready"), std::string::npos) << out;
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no complete checkpoint\n" << out;
  const auto positions = check_exact_sums(manifest, *latest);
  EXPECT_EQ(positions.size(), 2u);
}

}  // namespace
}  // namespace strata::testing
