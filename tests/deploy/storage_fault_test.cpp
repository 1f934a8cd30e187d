// Storage faults in a real node (issue 15 items 2, 16 and the fault tests):
// the strata binary runs with STRATA_FAULT (common/io_env.hpp) failing LMDB
// operations, and on a real full disk (a small tmpfs as ssd_path in a
// private mount namespace). Each run must stop non-zero naming the shard,
// the path and the error, leave the last complete checkpoint loadable, and
// a resume from it must end with the exact sums of the oracle
// (tests/deploy/exact_sums.hpp).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <string>

#include "actors/checkpoint.hpp"
#include "tests/deploy/crash_setup.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"

namespace strata {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct run_result {
  int status = -1;  // exit status, -1: did not exit in time / killed
  double seconds = 0;
  std::string out, err;
};

run_result run(const std::string& binary, const std::vector<std::string>& args,
               const std::vector<std::string>& env, const fs::path& dir, const std::string& tag,
               double timeout) {
  const auto start = clock_type::now();
  child_process p(binary, args, env, child_output{dir / (tag + ".out"), dir / (tag + ".err")});
  run_result r;
  auto status = p.wait_raw(std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
  r.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  if (status && WIFEXITED(*status)) r.status = WEXITSTATUS(*status);
  r.out = p.output();
  r.err = p.err();
  return r;
}

uint64_t sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t{0}); }

// The run stopped non-zero with the shard's fail-stop naming its path and
// `cause`; then `launch --resume` finishes from the latest complete
// checkpoint with the exact sums, at the checkpoint it resumed from and at
// the end.
void expect_fail_stop_then_exact_resume(const crash_setup& s, const run_result& failed,
                                        const std::string& shard_dir, const std::string& cause) {
  EXPECT_EQ(failed.status, 1) << failed.err;
  const std::string all = failed.out + failed.err;
  EXPECT_NE(all.find("fail-stopped (LMDB " + shard_dir + ")"), std::string::npos) << all;
  EXPECT_NE(all.find(cause), std::string::npos) << all;
  auto latest = actors::latest_checkpoint(s.checkpoints);
  ASSERT_TRUE(latest) << "no complete checkpoint before the fault: " << all;
  const auto at_fault = sum(check_exact_sums(s.manifest, *latest));
  EXPECT_LT(at_fault, total_batches(s.manifest)) << "the fault came after training";
  auto resumed = run(STRATA_BINARY, {"launch", s.manifest.string(), "--resume"}, {}, s.dir.path(),
                     "resume", 120);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(fs::path(resumed_from(resumed.out)), *latest) << resumed.out;
  EXPECT_EQ(sum(check_exact_sums(s.manifest, *actors::latest_checkpoint(s.checkpoints))),
            total_batches(s.manifest));
}

// ENOSPC at every commit of shard 1's flushes from its 60th on (a run
// makes 150-300 of them, depending on how flushes batch up under load):
// the retries fail, shard 1 fail-stops, the node exits 1 naming it.
TEST(StorageFault, EnospcAtAFlushCommitFailStopsTheNodeAndResumeIsExact) {
  auto s = make_setup("stop", 60000, 40);
  const fs::path shard = s->dir.path() / "state" / "shard-1";
  auto failed = run(STRATA_BINARY, {"launch", s->manifest.string()},
                    {"STRATA_FAULT=lmdb_commit:60+:ENOSPC:" + shard.string()}, s->dir.path(),
                    "launch", 120);
  EXPECT_NE(failed.err.find("injected fault: lmdb_commit call 60"), std::string::npos)
      << failed.err;
  std::printf("[ fault ] ENOSPC at commit 60: node exited %d after %.1f s\n", failed.status,
              failed.seconds);
  expect_fail_stop_then_exact_resume(*s, failed, shard.string(),
                                     "disk_full: flush batch 60 (");
}

// The same fault under checkpoint.on_failure: restart: the launcher
// restarts the cluster from the last complete checkpoint (the fault is
// one-shot, STRATA_FAULT_ONCE: the restarted node runs without it), and
// training ends with every key's exact total.
TEST(StorageFault, FailStopUnderRestartPolicyRecoversFromTheLastCheckpoint) {
  auto s = make_setup("restart", 60000, 40);
  const fs::path shard = s->dir.path() / "state" / "shard-1";
  auto r = run(STRATA_BINARY, {"launch", s->manifest.string()},
               {"STRATA_FAULT=lmdb_commit:60-63:ENOSPC:" + shard.string(),
                "STRATA_FAULT_ONCE=" + (s->dir.path() / "fault-fired").string()},
               s->dir.path(),
               "launch", 180);
  const std::string all = r.out + r.err;
  EXPECT_EQ(r.status, 0) << all;
  EXPECT_NE(all.find("shard 1 fail-stopped (LMDB " + shard.string() + ")"), std::string::npos)
      << all;
  EXPECT_NE(r.err.find("restarting the cluster from checkpoint"), std::string::npos) << r.err;
  const std::string from = resumed_from(r.out);
  ASSERT_FALSE(from.empty()) << r.out;
  check_exact_sums(s->manifest, from);
  EXPECT_EQ(sum(check_exact_sums(s->manifest, *actors::latest_checkpoint(s->checkpoints))),
            total_batches(s->manifest));
}

// EIO at the LMDB copy of the 5th checkpoint: that checkpoint fails with an
// error naming the copy's path; the 4th stays complete and loadable, and a
// resume from it is exact.
TEST(StorageFault, EioAtACheckpointCopyFailsThatCheckpointAndKeepsThePreviousOne) {
  auto s = make_setup("stop", 60000, 40);
  auto failed = run(STRATA_BINARY, {"launch", s->manifest.string()},
                    {"STRATA_FAULT=lmdb_copy:1+:EIO:ckpt-000000000005"}, s->dir.path(), "launch",
                    120);
  const std::string all = failed.out + failed.err;
  EXPECT_EQ(failed.status, 1) << all;
  EXPECT_NE(all.find("cannot copy"), std::string::npos) << all;
  EXPECT_NE(all.find("ckpt-000000000005"), std::string::npos) << all;
  EXPECT_NE(all.find("Input/output error"), std::string::npos) << all;
  auto latest = actors::latest_checkpoint(s->checkpoints);
  ASSERT_TRUE(latest) << all;
  EXPECT_EQ(latest->filename(), "ckpt-000000000004");
  check_exact_sums(s->manifest, *latest);
  auto resumed = run(STRATA_BINARY, {"launch", s->manifest.string(), "--resume"}, {},
                     s->dir.path(), "resume", 120);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(fs::path(resumed_from(resumed.out)), *latest) << resumed.out;
  EXPECT_EQ(sum(check_exact_sums(s->manifest, *actors::latest_checkpoint(s->checkpoints))),
            total_batches(s->manifest));
}

// A real full disk (item 16): ssd_path on a 2 MiB tmpfs, mounted in a
// private mount namespace (unshare -m as root, unshare -rm otherwise), so
// nothing outlives the run. The shard fail-stops at the failure with
// disk_full naming the path.
TEST(StorageFault, FullTmpfsSsdPathFailStopsWithDiskFull) {
  const bool root = ::geteuid() == 0;
  const std::string unshare_flags = root ? "-m" : "-rm";
  {
    testing::temp_dir probe;
    auto r = run("unshare", {unshare_flags, "sh", "-c",
                             "mount -t tmpfs -o size=1m tmpfs " + probe.path().string()},
                 {}, probe.path(), "probe", 30);
    if (r.status != 0)
      GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace (unshare "
                   << unshare_flags << "): " << r.err;
  }
  const fs::path mount_dir = fs::temp_directory_path() /
                             ("strata-tmpfs-" + std::to_string(::getpid()));
  fs::create_directories(mount_dir);
  auto s = make_setup("stop", 60000, 40, mount_dir);
  const std::string script = "mount -t tmpfs -o size=2m tmpfs \"$0\" && exec \"$1\" launch \"$2\"";
  auto failed = run("unshare",
                    {unshare_flags, "sh", "-c", script, mount_dir.string(), STRATA_BINARY,
                     s->manifest.string()},
                    {}, s->dir.path(), "launch", 120);
  std::printf("[ fault ] 2 MiB tmpfs ssd_path: node exited %d after %.1f s\n", failed.status,
              failed.seconds);
  const std::string all = failed.out + failed.err;
  EXPECT_NE(all.find("disk_full"), std::string::npos) << all;
  EXPECT_NE(all.find("No space left on device"), std::string::npos) << all;
  // The resume runs outside the namespace: ssd_path is the empty directory.
  std::string shard_dir;
  for (const char* name : {"shard-0", "shard-1"})
    if (all.find("fail-stopped (LMDB " + (mount_dir / name).string() + ")") != std::string::npos)
      shard_dir = (mount_dir / name).string();
  EXPECT_FALSE(shard_dir.empty()) << all;
  expect_fail_stop_then_exact_resume(*s, failed, shard_dir.empty() ? "?" : shard_dir,
                                     "disk_full");
  fs::remove_all(mount_dir);
}

}  // namespace
}  // namespace strata
