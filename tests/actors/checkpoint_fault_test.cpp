// Storage faults under the checkpoint writer and restore, injected through
// the io_env seam (common/io_env.hpp), issue 15: EIO writing a checkpoint
// file, a failing fsync of the checkpoint root, ENOSPC while a restore
// writes the shards' LMDB. Each fails with an error naming the file, leaves
// the last good checkpoint loadable, and ends with a resume from it whose
// rows are the exact sums (count objective: every weight is its key's
// sightings before the recorded positions).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "actors/checkpoint.hpp"
#include "actors/local_cluster.hpp"
#include "common/file_manifest.hpp"
#include "common/io_env.hpp"
#include "tests/actors/checkpoint_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::temp_dir;

// Installs `env` for the scope.
struct scoped_io_env {
  explicit scoped_io_env(io_env& env) { set_io_env(&env); }
  ~scoped_io_env() { set_io_env(nullptr); }
};

faulty_io_env faults(const std::string& spec) {
  auto rules = parse_fault_spec(spec);
  EXPECT_TRUE(rules) << rules.err().to_string();
  return faulty_io_env(rules ? *rules : std::vector<fault_rule>{});
}

// Every row of `checkpoint` holds its key's sightings before the recorded
// positions, replayed from `original` (the configuration before any
// restore: its workers skip nothing).
void expect_exact_sums(const cluster_config& original, const fs::path& checkpoint) {
  auto meta = read_checkpoint_meta(checkpoint);
  ASSERT_TRUE(meta) << meta.err().to_string();
  const auto want = sightings(original, meta->positions);
  const auto have = checkpoint_rows(checkpoint);
  ASSERT_EQ(have.size(), want.size()) << checkpoint;
  size_t wrong = 0;
  for (const auto& [key, rec] : have) {
    auto it = want.find(key);
    if (it == want.end() || weights_of(rec.data())[0] != it->second) ++wrong;
  }
  EXPECT_EQ(wrong, 0u) << checkpoint << ": rows that are not their key's sightings";
}

// Resumes from the newest complete checkpoint under the original's root
// into fresh shard directories, trains to the end, checks the exact sums of
// the final checkpoint.
void resume_to_the_end(const cluster_config& original, const fs::path& dir) {
  auto latest = latest_checkpoint(original.checkpoint.directory);
  ASSERT_TRUE(latest);
  expect_exact_sums(original, *latest);
  auto c = original;
  for (uint32_t s = 0; s < c.shards.size(); ++s)
    c.shards[s].lmdb.directory = dir / "resumed" / ("shard-" + std::to_string(s));
  auto restored = restore_checkpoint(*latest, c);
  ASSERT_TRUE(restored) << restored.err().to_string();
  auto r = run_local_cluster(c);
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_FALSE(r->last_checkpoint.empty());
  expect_exact_sums(original, r->last_checkpoint);
  auto meta = read_checkpoint_meta(r->last_checkpoint);
  ASSERT_TRUE(meta);
  for (size_t w = 0; w < c.workers.size(); ++w)
    EXPECT_EQ(meta->positions[w], original.workers[w].max_batches);
}

cluster_config faulted_run_config(const fs::path& data, const fs::path& dir) {
  auto c = count_cluster(data, dir, training_mode::async);
  for (auto& w : c.workers) w.max_batches = 45;  // checkpoints at 10, 20, 30, 40, 45
  return c;
}

// EIO writing the third checkpoint's dense.bin: the run fails naming the
// file; checkpoint 2 stays the newest complete one, loadable, exact.
TEST(CheckpointFault, EioWritingACheckpointFileFailsItAndKeepsThePreviousOne) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  const auto c = faulted_run_config(data, dir.path());
  auto env = faults("write:1:EIO:" + checkpoint_name(3) + "/dense.bin");
  expected<training_report> r = error(errc::invalid_argument, "not run");
  {
    scoped_io_env installed(env);
    r = run_local_cluster(c);
  }
  EXPECT_EQ(env.fired(), 1u);
  ASSERT_FALSE(r) << "the run ended although checkpoint 3 could not be written";
  const std::string text = r.err().to_string();
  EXPECT_NE(text.find(checkpoint_name(3) + "/dense.bin"), std::string::npos) << text;
  EXPECT_NE(text.find("Input/output error"), std::string::npos) << text;
  const auto latest = latest_checkpoint(c.checkpoint.directory);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->filename(), checkpoint_name(2));
  EXPECT_FALSE(fs::exists(c.checkpoint.directory / checkpoint_name(3) / file_manifest_name));
  resume_to_the_end(c, dir.path());
}

// A failing fsync of the checkpoint root (the new ckpt-N's entry is not
// durable): the checkpoint fails with an error naming the root.
TEST(CheckpointFault, AFailingFsyncOfTheCheckpointRootFailsTheCheckpoint) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  const auto c = faulted_run_config(data, dir.path());
  // Only the root itself, not the files and directories under it.
  struct root_fsync_fails : io_env {
    std::string root;
    std::atomic<int> calls{0};
    int fault(io_op op, std::string_view path) override {
      if (op != io_op::fsync || path != root) return 0;
      return ++calls >= 2 ? EIO : 0;  // the second checkpoint's
    }
  } env;
  env.root = c.checkpoint.directory.string();
  expected<training_report> r = error(errc::invalid_argument, "not run");
  {
    scoped_io_env installed(env);
    r = run_local_cluster(c);
  }
  ASSERT_FALSE(r) << "the root was never fsynced";
  const std::string text = r.err().to_string();
  EXPECT_NE(text.find(env.root + ": fsync failed"), std::string::npos) << text;
  resume_to_the_end(c, dir.path());
}

// ENOSPC while a restore writes the shards' LMDB: a named disk_full error;
// the half-written shard directories are not used — a restore into them is
// refused — and a restore into cleared ones succeeds with exact sums.
TEST(CheckpointFault, EnospcDuringRestoreIsNamedAndNothingHalfRestoredIsUsed) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  auto c = faulted_run_config(data, dir.path());
  for (auto& w : c.workers) w.max_batches = 30;
  auto first = run_local_cluster(c);
  ASSERT_TRUE(first) << first.err().to_string();
  auto target = c;
  for (uint32_t s = 0; s < target.shards.size(); ++s)
    target.shards[s].lmdb.directory = dir.path() / "full-disk" / ("shard-" + std::to_string(s));
  auto env = faults("lmdb_commit:2+:ENOSPC:full-disk");
  expected<checkpoint_meta> restored = error(errc::invalid_argument, "not run");
  {
    scoped_io_env installed(env);
    restored = restore_checkpoint(first->last_checkpoint, target);
  }
  EXPECT_GE(env.fired(), 1u);
  ASSERT_FALSE(restored) << "a restore onto a full disk succeeded";
  EXPECT_EQ(restored.err().code(), errc::disk_full) << restored.err().to_string();
  EXPECT_NE(restored.err().to_string().find("full-disk"), std::string::npos)
      << restored.err().to_string();
  // What the failed restore left is never taken for a restored shard.
  auto again = restore_checkpoint(first->last_checkpoint, target);
  EXPECT_FALSE(again) << "a restore reused a half-restored shard directory";
  // Cleared (as strata node does before a restore), it succeeds; the run
  // goes on to the end with exact sums.
  for (auto& w : c.workers) w.max_batches = 45;
  resume_to_the_end(c, dir.path());
}

}  // namespace
}  // namespace strata::actors
