// Crash recovery with real processes: the `strata` binary's launcher
// supervises a node process; the test kills it with SIGKILL mid-training
// and mid-checkpoint, or stops the launcher with SIGTERM, then checks the
// exact-sum invariant on the checkpoints: with model.objective: count (SGD,
// learning rate 1, zeros) every key's weights equal the number of its
// sightings in the batches before each worker's recorded position — no
// update missing, none extra — and that an interrupted checkpoint is never
// used. Polls with deadlines; no fixed sleeps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "actors/checkpoint.hpp"
#include "actors/worker_actor.hpp"
#include "common/file_manifest.hpp"
#include "deploy/manifest.hpp"
#include "tests/deploy/crash_setup.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata {
namespace {

namespace fs = std::filesystem;
using strata::testing::temp_dir;
using clock_type = std::chrono::steady_clock;

// kill -9 of the node mid-training, policy restart: the launcher restarts
// the cluster from the latest complete checkpoint, which holds the exact
// sums of the batches before its positions, and training finishes with
// every key's exact total (nothing lost, nothing applied twice).
TEST(CrashRecovery, KillMidTrainingRestartsFromTheLatestCheckpoint) {
  auto s = make_setup("restart", 60000, 40);
  strata_process launcher({"launch", s->manifest.string()}, s->dir.path() / "out.txt",
                          s->dir.path() / "err.txt");
  ASSERT_TRUE(
      poll_until([&] { return actors::complete_checkpoints(s->checkpoints).size() >= 2; }, 60))
      << launcher.err();
  auto pid = node_pid(launcher);
  ASSERT_TRUE(pid) << launcher.out();
  ASSERT_EQ(::kill(*pid, SIGKILL), 0);
  auto status = launcher.wait(120);
  ASSERT_TRUE(status) << "launcher did not finish";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << launcher.err();
  const std::string err = launcher.err();
  EXPECT_NE(err.find("node 'crash' (pid " + std::to_string(*pid) + ") was killed by signal 9"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("restarting the cluster from checkpoint"), std::string::npos) << err;
  const std::string from = resumed_from(launcher.out());
  ASSERT_FALSE(from.empty()) << launcher.out();
  auto at_restart = check_exact_sums(s->manifest, from);
  auto latest = actors::latest_checkpoint(s->checkpoints);
  ASSERT_TRUE(latest);
  auto at_end = check_exact_sums(s->manifest, *latest);
  uint64_t sum_restart = 0, sum_end = 0;
  for (auto p : at_restart) sum_restart += p;
  for (auto p : at_end) sum_end += p;
  EXPECT_GT(sum_restart, 0u);
  EXPECT_LT(sum_restart, sum_end);
  EXPECT_EQ(sum_end, total_batches(s->manifest));
}

// kill -9 while a checkpoint is being written (caught when a checkpoint
// directory without FILES exists), policy stop: the launcher exits 1 naming
// the node; a torn checkpoint (no FILES, truncated LMDB copy) with a
// higher epoch is then planted as well; `launch --resume` picks the latest
// complete checkpoint, never the torn one, and finishes with exact sums.
TEST(CrashRecovery, KillMidCheckpointNeverUsesTheInterruptedOne) {
  auto s = make_setup("stop", 60000, 20);
  strata_process launcher({"launch", s->manifest.string()}, s->dir.path() / "out.txt",
                          s->dir.path() / "err.txt");
  auto torn_now = [&] {
    for (const auto& entry : fs::directory_iterator(s->checkpoints))
      if (!fs::exists(entry.path() / file_manifest_name)) return true;
    return false;
  };
  ASSERT_TRUE(
      poll_until([&] { return actors::complete_checkpoints(s->checkpoints).size() >= 1; }, 60));
  auto pid = node_pid(launcher);
  ASSERT_TRUE(pid) << launcher.out();
  const bool caught = poll_until(torn_now, 10);
  ASSERT_EQ(::kill(*pid, SIGKILL), 0);
  std::printf("[ crash ] killed %s a checkpoint write\n", caught ? "during" : "outside");
  auto status = launcher.wait(60);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  const std::string err = launcher.err();
  EXPECT_NE(err.find("node 'crash' (pid " + std::to_string(*pid) +
                     ") was killed by signal 9 (Killed); stopping the cluster "
                     "(checkpoint.on_failure: stop)"),
            std::string::npos)
      << err;

  const auto complete = actors::latest_checkpoint(s->checkpoints);
  ASSERT_TRUE(complete);
  const fs::path torn = s->checkpoints / actors::checkpoint_name(
                                             actors::highest_checkpoint_epoch(s->checkpoints) + 1);
  fs::copy(*complete, torn, fs::copy_options::recursive);
  fs::remove(torn / file_manifest_name);
  fs::resize_file(torn / "shard-0" / "data.mdb", fs::file_size(torn / "shard-0" / "data.mdb") / 2);

  strata_process resumed({"launch", s->manifest.string(), "--resume"}, s->dir.path() / "out2.txt",
                         s->dir.path() / "err2.txt");
  auto rc = resumed.wait(120);
  ASSERT_TRUE(rc);
  EXPECT_TRUE(WIFEXITED(*rc) && WEXITSTATUS(*rc) == 0) << resumed.err();
  const std::string from = resumed_from(resumed.out());
  EXPECT_EQ(fs::path(from), *complete) << resumed.out();
  check_exact_sums(s->manifest, from);
  auto at_end = check_exact_sums(s->manifest, *actors::latest_checkpoint(s->checkpoints));
  uint64_t sum_end = 0;
  for (auto p : at_end) sum_end += p;
  EXPECT_EQ(sum_end, total_batches(s->manifest));
}

// SIGTERM to the launcher: the node stops at the next cut with a final
// checkpoint holding exactly the batches before its positions; resuming
// (past a newer but damaged checkpoint, which is skipped with a message)
// finishes the data.
TEST(CrashRecovery, SigtermStopsGracefullyWithAFinalCheckpoint) {
  auto s = make_setup("stop", 60000, 1000000);
  strata_process launcher({"launch", s->manifest.string()}, s->dir.path() / "out.txt",
                          s->dir.path() / "err.txt");
  ASSERT_TRUE(
      poll_until([&] { return launcher.out().find("training:") != std::string::npos; }, 60));
  ASSERT_TRUE(poll_until([&] { return fs::exists(s->dir.path() / "state" / "shard-0"); }, 60));
  ASSERT_EQ(::kill(launcher.pid(), SIGTERM), 0);
  auto status = launcher.wait(60);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << launcher.err();
  EXPECT_NE(launcher.out().find("stopped: on request"), std::string::npos) << launcher.out();
  auto latest = actors::latest_checkpoint(s->checkpoints);
  ASSERT_TRUE(latest) << launcher.out();
  auto at_stop = check_exact_sums(s->manifest, *latest);
  uint64_t sum_stop = 0;
  for (auto p : at_stop) sum_stop += p;
  EXPECT_LT(sum_stop, total_batches(s->manifest));

  // A newer checkpoint that is complete but damaged (one flipped byte):
  // the resume falls back to the one before, saying so.
  const fs::path damaged =
      s->checkpoints /
      actors::checkpoint_name(actors::highest_checkpoint_epoch(s->checkpoints) + 1);
  fs::copy(*latest, damaged, fs::copy_options::recursive);
  {
    std::fstream f(damaged / actors::checkpoint_dense_name,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x10));
  }
  ASSERT_EQ(*actors::latest_checkpoint(s->checkpoints), damaged);

  strata_process resumed({"launch", s->manifest.string(), "--resume"}, s->dir.path() / "out2.txt",
                         s->dir.path() / "err2.txt");
  auto rc = resumed.wait(120);
  ASSERT_TRUE(rc);
  EXPECT_TRUE(WIFEXITED(*rc) && WEXITSTATUS(*rc) == 0) << resumed.err();
  EXPECT_EQ(fs::path(resumed_from(resumed.out())), *latest) << resumed.out();
  EXPECT_NE(resumed.err().find("checkpoint " + damaged.string() + " is damaged"), std::string::npos)
      << resumed.err();
  EXPECT_NE(resumed.err().find("checksum mismatch"), std::string::npos) << resumed.err();
  auto at_end = check_exact_sums(s->manifest, *actors::latest_checkpoint(s->checkpoints));
  uint64_t sum_end = 0;
  for (auto p : at_end) sum_end += p;
  EXPECT_EQ(sum_end, total_batches(s->manifest));
}

}  // namespace
}  // namespace strata
