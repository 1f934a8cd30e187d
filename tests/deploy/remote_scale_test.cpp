// Scaling a cluster of several nodes at run time (issue 19, remote-scale):
// three real `strata node` processes over UCX on loopback train the count
// objective; `strata scale --shards 5 --placement ...` spawns shards 3 and 4
// on the two nodes other than the coordinator's (each in that node's own
// ssd_path) while training goes on, `strata status` shows them there, a
// scale back to 3 retires them and removes their files on their nodes, a
// scale to 4 puts a fresh shard 3 on n1 again, one to 5 without a placement
// spreads shard 4 to the coordinator's node (the fewest shards), and after a
// graceful stop the final checkpoint holds the exact sums of every batch
// trained (the independent oracle, tests/deploy/exact_sums.hpp): no update
// was lost or applied twice across the four migrations. Async and pass
// mode. Refusals: more shards than partitions, an unknown node.
// Polls with deadlines; no fixed sleeps.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "actors/checkpoint.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

// Generous: a loaded 2-core machine must finish, never hang the suite.
constexpr double deadline_s = 300;

// Three nodes (count objective), admin API on n0, each node's shards under
// d/ssd-nX (a small DRAM tier: most rows are in LMDB, so a scale's copy
// streams rows between nodes); one epoch (the oracle reads each line once),
// long enough that the test stops the run.
fs::path write_manifest(const fs::path& d, uint16_t admin_port, bool pass) {
  const fs::path file = d / "scale.yaml";
  std::ofstream m(file);
  m << "name: rscale\nmode: " << (pass ? "pass\npass_batches: 20" : "async")
    << "\npartitions: 64\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "scale.secret").string()
    << "\n  create_if_missing: true\nnodes:\n";
  for (int i = 0; i < 3; ++i)
    m << "  - name: n" << i << "\n    host: 127.0.0.1\n    transport_port: " << testing::free_port()
      << "\n    ssd_path: " << (d / ("ssd-n" + std::to_string(i))).string() << "\n";
  m << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 3\n  dram_bytes: 64KiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
    << "caches:\n  count: 3\n  sets: 16\n"
    << "workers:\n  count: 3\n  batch_size: 64\n  epochs: 1\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: 300000\n    distinct_keys: 50000\n    seed: 5\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 10\n"
    << "transport:\n  heartbeat_interval_ms: 1000\n  heartbeat_timeout_ms: 10000\n"
    << "  join_timeout_seconds: 120\n"
    << "admin:\n  port: " << admin_port << "\n  token_file: " << (d / "scale.token").string()
    << "\n  create_if_missing: true\n";
  return file;
}

void scale_across_nodes(bool pass) {
  temp_dir dir;
  const fs::path d = dir.path();
  const auto manifest = write_manifest(d, testing::free_port(), pass);
  const std::string m = manifest.string();
  strata_process cluster({"launch", m}, d / "out.txt", d / "err.txt");
  int calls = 0;
  // Runs a CLI verb; (exit code, stdout, stderr).
  auto cli = [&](std::vector<std::string> args) {
    const auto n = std::to_string(calls++);
    strata_process p(args, d / ("cli" + n + ".out"), d / ("cli" + n + ".err"));
    auto st = p.wait(deadline_s);
    const int rc = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
    return std::make_tuple(rc, p.out(), p.err());
  };
  auto status = [&] {
    auto [rc, out, err] = cli({"status", "--manifest", m, "--json"});
    return rc == 0 ? nlohmann::json::parse(out) : nlohmann::json{};
  };
  ASSERT_TRUE(poll_until(
      [&] {
        if (!cluster.running()) return true;
        auto st = status();
        return !st.is_null() && st["state"] == "training" &&
               st["training"]["examples"].get<uint64_t>() > 0;
      },
      deadline_s))
      << cluster.out() << cluster.err();
  ASSERT_TRUE(cluster.running()) << "the cluster ended\n" << cluster.out() << cluster.err();

  // Refusals, named; training goes on.
  auto [rcp, outp, errp] = cli({"scale", "--manifest", m, "--shards", "65"});
  EXPECT_EQ(rcp, 1) << outp;
  EXPECT_NE(errp.find("only 64 partitions to spread"), std::string::npos) << errp;
  auto [rcu, outu, erru] =
      cli({"scale", "--manifest", m, "--shards", "4", "--placement", "n0", "n1", "n2", "n7"});
  EXPECT_EQ(rcu, 1) << outu;
  EXPECT_NE(erru.find("placement: unknown node \"n7\" (nodes: n0, n1, n2)"), std::string::npos)
      << erru;

  // 3 -> 5: shard 3 on n1, shard 4 on n2, while training goes on.
  auto [rc5, out5, err5] =
      cli({"scale", "--manifest", m, "--shards", "5", "--placement", "n0", "n1", "n2", "n1", "n2"});
  ASSERT_EQ(rc5, 0) << out5 << err5 << cluster.err();
  // Rows below DRAM were streamed from LMDB to the other nodes (the copy),
  // the ones touched since at the fence.
  const auto result5 = nlohmann::json::parse(out5);
  EXPECT_GT(result5["copied_rows"].get<uint64_t>(), 0u) << out5;
  EXPECT_GT(result5["moved_partitions"].get<uint64_t>(), 0u) << out5;
  auto st5 = status();
  ASSERT_EQ(st5["shards"].size(), 5u) << st5.dump();
  const char* homes[] = {"n0", "n1", "n2", "n1", "n2"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(st5["shards"][i]["node"], homes[i]) << st5.dump();
    EXPECT_EQ(st5["shards"][i]["health"], "ok") << st5.dump();
    EXPECT_GT(st5["shards"][i]["partition_count"].get<uint64_t>(), 0u) << st5.dump();
  }
  EXPECT_TRUE(fs::exists(d / "ssd-n1" / "shard-3" / "data.mdb"));
  EXPECT_TRUE(fs::exists(d / "ssd-n2" / "shard-4" / "data.mdb"));
  EXPECT_FALSE(fs::exists(d / "ssd-n0" / "shard-3")) << "shard 3 was spawned on the coordinator's node";

  // Training goes on with 5 shards.
  const uint64_t before = st5["training"]["examples"].get<uint64_t>();
  ASSERT_TRUE(poll_until(
      [&] {
        auto st = status();
        return !cluster.running() ||
               (!st.is_null() && st["training"]["examples"].get<uint64_t>() > before);
      },
      deadline_s));

  // 5 -> 3: the new shards hand their partitions back and their files go,
  // on their own nodes.
  auto [rc3, out3, err3] = cli({"scale", "--manifest", m, "--shards", "3"});
  ASSERT_EQ(rc3, 0) << out3 << err3 << cluster.err();
  EXPECT_TRUE(poll_until(
      [&] {
        return !fs::exists(d / "ssd-n1" / "shard-3") && !fs::exists(d / "ssd-n2" / "shard-4");
      },
      60))
      << "the retired shards' files are still on their nodes";
  auto st3 = status();
  EXPECT_EQ(st3["shards"].size(), 3u) << st3.dump();

  // 3 -> 4: shard 3 again on n1 (a fresh shard under the same index and
  // target: the coordinator's node must not reuse the retired one's proxy).
  auto [rc4, out4, err4] =
      cli({"scale", "--manifest", m, "--shards", "4", "--placement", "n0", "n1", "n2", "n1"});
  ASSERT_EQ(rc4, 0) << out4 << err4 << cluster.err();
  auto st4 = status();
  ASSERT_EQ(st4["shards"].size(), 4u) << st4.dump();
  EXPECT_EQ(st4["shards"][3]["node"], "n1") << st4.dump();
  EXPECT_EQ(st4["shards"][3]["health"], "ok") << st4.dump();
  EXPECT_TRUE(fs::exists(d / "ssd-n1" / "shard-3" / "data.mdb"));

  // 4 -> 5 without a placement ("spread"): n1 hosts two shards, n0 and n2
  // one each; the manifest's order picks n0, the coordinator's own node.
  auto [rcs, outs, errs] = cli({"scale", "--manifest", m, "--shards", "5"});
  ASSERT_EQ(rcs, 0) << outs << errs << cluster.err();
  auto st6 = status();
  ASSERT_EQ(st6["shards"].size(), 5u) << st6.dump();
  EXPECT_EQ(st6["shards"][4]["node"], "n0") << st6.dump();
  EXPECT_EQ(st6["shards"][4]["health"], "ok") << st6.dump();
  EXPECT_TRUE(fs::exists(d / "ssd-n0" / "shard-4" / "data.mdb"));

  auto [rcx, outx, errx] = cli({"stop", "--manifest", m});
  EXPECT_EQ(rcx, 0) << errx;
  auto st = cluster.wait(deadline_s);
  ASSERT_TRUE(st) << "the cluster did not stop\n" << cluster.out() << cluster.err();
  ASSERT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << cluster.out() << cluster.err();
  // The final checkpoint: every batch before each worker's position, once.
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no checkpoint under " << d / "ckpt";
  auto positions = check_exact_sums(manifest, *latest);
  ASSERT_EQ(positions.size(), 3u);
  for (auto p : positions) EXPECT_GT(p, 0u);
}

TEST(RemoteScale, ThreeNodesScaleOntoOtherNodesAndBackWithExactSumsAsync) {
  scale_across_nodes(false);
}

TEST(RemoteScale, ThreeNodesScaleOntoOtherNodesAndBackWithExactSumsPassMode) {
  scale_across_nodes(true);
}

}  // namespace
}  // namespace strata
