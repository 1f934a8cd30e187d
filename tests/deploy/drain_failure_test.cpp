// A drain that fails (issue 19, "Failure during a scale"; docs/multi-node.md
// "Draining a node"), by injection: three nodes where n2 hosts only shard 2,
// a standby n3 that joined and holds nothing (so the drain gives shard 2 its
// successor there), and a copy rate limit (shards.migration_rows_per_s) that
// keeps the copy running long enough to kill a node inside it. The line:
// - n3 (the successor's node) killed while the drain copies, before the
//   fence: the drain is abandoned uncommitted: the request fails naming
//   why, shard 2 stays on n2, n2 does not leave, training goes on, and the
//   final checkpoint (a committed three-shard map) passes the exact-sum
//   oracle;
// - n2 (the draining node) killed while the drain copies: its shard is lost
//   like any node's, so the run goes to the crash policy (the launcher
//   exits non-zero naming n2; nobody hangs), and the checkpoint it leaves
//   holds a committed map.
// Both in async and in pass mode (where the fence and the commit fall on a
// pass boundary, ARCHITECTURE.md "Pass mode"). Real processes over UCX on
// loopback; polls with deadlines.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "actors/checkpoint.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/deploy/standby_cluster.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

// Workers and cache tiers on n0 and n1 only: n2 hosts shard 2 alone. The
// copy reads a moving partition's rows from LMDB (rows above it go at the
// fence, unpaced): after a checkpoint LMDB holds a few thousand of shard
// 2's, which at 50 rows/s take far longer to copy than the test needs to
// kill a node inside the copy.
const standby_placements slow_copy{"[n0, n1, n0]", "[n0, n1, n0]", 50};

// A committed map of the three starting shards: every partition owned by
// shard 0, 1 or 2, one row count per shard.
void expect_three_shard_map(const fs::path& checkpoint) {
  auto meta = actors::read_checkpoint_meta(checkpoint);
  ASSERT_TRUE(meta) << meta.err().message();
  EXPECT_EQ(meta->owners.size(), 256u) << checkpoint;
  EXPECT_EQ(meta->shard_rows.size(), 3u) << checkpoint;
  for (uint32_t s = 0; s < 3; ++s)
    EXPECT_NE(std::count(meta->owners.begin(), meta->owners.end(), s), 0) << "shard " << s;
  EXPECT_TRUE(std::all_of(meta->owners.begin(), meta->owners.end(),
                          [](uint32_t o) { return o < 3; }))
      << checkpoint;
}

// Starts `strata drain --node n2` with n3 joined and waits until its copy
// runs (status: scaling_to set; the successor was spawned on n3 before).
struct draining {
  std::unique_ptr<strata_process> n3, drain;
};

void start_drain(standby_cluster& c, draining& run) {
  // A checkpoint first: it writes the rows to LMDB, where the copy reads
  // them (and it is what the crash policy restarts from).
  auto [rcc, outc, errc] = c.cli({"checkpoint", "create", "--manifest", c.manifest().string()});
  ASSERT_EQ(rcc, 0) << outc << errc;
  run.n3 = c.start_node("n3");
  c.wait_joined("n3", *run.n3);
  run.drain = c.start_cli({"drain", "--manifest", c.manifest().string(), "--node", "n2"});
  ASSERT_TRUE(poll_until(
      [&] {
        if (!run.drain->running() || !c.launch().running()) return true;
        auto st = c.status();
        return st.is_object() && !st["scaling_to"].is_null();
      },
      deadline_s));
  ASSERT_TRUE(run.drain->running()) << "the drain ended before the copy could be interrupted\n"
                                    << run.drain->out() << run.drain->err();
  ASSERT_TRUE(c.launch().running()) << c.launch().out() << c.launch().err();
}

void kill_the_successors_node_before_the_fence(bool pass) {
  temp_dir dir;
  const fs::path d = dir.path();
  standby_cluster c(d, 1, /*one_epoch=*/true, pass, slow_copy);
  c.wait_for_training();
  draining run;
  start_drain(c, run);
  if (::testing::Test::HasFatalFailure()) return;

  run.n3->signal(SIGKILL);
  ASSERT_TRUE(run.n3->wait(deadline_s));
  auto ended = run.drain->wait(deadline_s);
  ASSERT_TRUE(ended) << "the drain hung after n3 was killed\n" << c.launch().err();
  EXPECT_TRUE(WIFEXITED(*ended) && WEXITSTATUS(*ended) == 1) << run.drain->out();
  const std::string err = run.drain->err();
  EXPECT_NE(err.find("HTTP 500: cannot drain node \"n2\": cannot move shards 2 of cluster "
                     "'standby' to other nodes: copying partitions failed (the drain is "
                     "abandoned; the shards stay where they were and keep training at map "
                     "epoch "),
            std::string::npos)
      << err << c.launch().out() << c.launch().err();
  EXPECT_NE(err.find("'n3'"), std::string::npos) << "the cause names the lost node\n" << err;
  // The coordinator's node does not call the uncommitted successor a held
  // shard whose loss fails the run.
  EXPECT_TRUE(poll_until(
      [&] {
        return c.launch().err().find("cluster: standby node n3 is gone (") != std::string::npos;
      },
      deadline_s));
  // (Logged before the abandon ended the re-homing, or after it.)
  EXPECT_TRUE(c.launch().err().find(") with the drain's successors of shards 2: the drain is "
                                    "abandoned, training goes on") != std::string::npos ||
              c.launch().err().find("); it held no shards: training goes on") !=
                  std::string::npos)
      << c.launch().err();
  EXPECT_EQ(c.launch().err().find("with shards 2: their requests fail"), std::string::npos)
      << c.launch().err();

  // The committed map is unchanged: shard 2 on n2, which stays.
  auto st = c.status();
  ASSERT_TRUE(st.is_object()) << c.launch().err();
  EXPECT_TRUE(st["scaling_to"].is_null()) << st.dump();
  ASSERT_EQ(st["shards"].size(), 3u) << st.dump();
  EXPECT_EQ(st["shards"][2]["node"], "n2") << st.dump();
  EXPECT_EQ(st["shards"][2]["health"], "ok") << st.dump();
  EXPECT_EQ(c.health("n2"), "ok");
  EXPECT_EQ(c.launch().out().find("cluster: node n2 left"), std::string::npos)
      << c.launch().out();

  // Training goes on.
  const uint64_t before = st["training"]["examples"].get<uint64_t>();
  ASSERT_NO_FATAL_FAILURE(c.wait_for_more_training(before));
  ASSERT_TRUE(c.launch().running()) << c.launch().out() << c.launch().err();

  c.stop_cleanly();
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no checkpoint\n" << c.launch().out();
  expect_three_shard_map(*latest);
  auto positions = check_exact_sums(c.manifest(), *latest);
  ASSERT_EQ(positions.size(), 3u);
  for (auto p : positions) EXPECT_GT(p, 0u);
}

void kill_the_draining_node_before_the_fence(bool pass) {
  temp_dir dir;
  const fs::path d = dir.path();
  standby_cluster c(d, 1, /*one_epoch=*/true, pass, slow_copy);
  c.wait_for_training();
  draining run;
  start_drain(c, run);
  if (::testing::Test::HasFatalFailure()) return;

  // n2 is one of the launcher's nodes (it printed its pid): killed, it
  // takes shard 2's rows with it.
  std::smatch pid;
  const std::string out = c.launch().out();
  ASSERT_TRUE(std::regex_search(out, pid, std::regex("\\(node n2, pid ([0-9]+)\\)"))) << out;
  ASSERT_EQ(::kill(static_cast<pid_t>(std::stoi(pid[1])), SIGKILL), 0);

  auto ended = run.drain->wait(deadline_s);
  ASSERT_TRUE(ended) << "the drain hung after n2 was killed\n" << c.launch().err();
  EXPECT_TRUE(WIFEXITED(*ended) && WEXITSTATUS(*ended) != 0) << run.drain->out();
  auto gone = c.launch().wait(deadline_s);
  ASSERT_TRUE(gone) << "the launcher hung after n2 was killed\n" << c.launch().err();
  EXPECT_FALSE(WIFEXITED(*gone) && WEXITSTATUS(*gone) == 0)
      << c.launch().out() << c.launch().err();
  EXPECT_NE(c.launch().err().find("n2"), std::string::npos) << c.launch().err();
  run.n3->signal(SIGKILL);
  ASSERT_TRUE(run.n3->wait(deadline_s));
  // What a restart resumes from holds the committed three-shard map.
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no checkpoint\n" << c.launch().out();
  expect_three_shard_map(*latest);
}

TEST(DrainFailure, KillingTheSuccessorsNodeBeforeTheFenceAbandonsTheDrainAndTrainingGoesOn) {
  kill_the_successors_node_before_the_fence(/*pass=*/false);
}

TEST(DrainFailure, KillingTheSuccessorsNodeBeforeTheFenceAbandonsTheDrainPassMode) {
  kill_the_successors_node_before_the_fence(/*pass=*/true);
}

TEST(DrainFailure, KillingTheDrainingNodeBeforeTheFenceGoesToTheCrashPolicy) {
  kill_the_draining_node_before_the_fence(/*pass=*/false);
}

TEST(DrainFailure, KillingTheDrainingNodeBeforeTheFenceGoesToTheCrashPolicyPassMode) {
  kill_the_draining_node_before_the_fence(/*pass=*/true);
}

}  // namespace
}  // namespace strata
