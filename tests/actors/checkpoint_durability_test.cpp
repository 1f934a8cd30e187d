// Checkpoints that must survive the failure paths (issue 15): restoring
// the same checkpoint twice (resume, crash, resume) never hands out an
// incarnation again; a damaged CHECKPOINT is a checksum mismatch on
// resume as in verify; a dense record of the wrong size is refused, naming
// dense.bin and both sizes; the shards' TTL clock is driven in a real
// run and recorded in the checkpoint. Real LMDB, run_local_cluster on generated data.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "actors/checkpoint.hpp"
#include "actors/dense_actor.hpp"
#include "actors/local_cluster.hpp"
#include "actors/worker_actor.hpp"
#include "model/ctr_model.hpp"
#include "tests/actors/checkpoint_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {
namespace {

using strata::testing::temp_dir;

// The highest row version in the shards' live LMDB environments.
uint64_t highest_live_version(const cluster_config& c) {
  uint64_t highest = 0;
  for (const auto& shard : c.shards) {
    lmdb_tier_config lc = shard.lmdb;
    lc.read_only = true;
    auto tier = lmdb_tier::open(c.table.layout, lc);
    EXPECT_TRUE(tier) << tier.err().to_string();
    if (!tier) continue;
    auto st = (*tier)->dump([&](uint64_t, const std::byte* r) {
      highest = std::max(highest, meta_of(r).version);
    });
    EXPECT_TRUE(st) << st.err().to_string();
  }
  return highest;
}

// The lowest row version in the shards' live LMDB environments.
uint64_t lowest_live_version(const cluster_config& c) {
  uint64_t lowest = ~uint64_t{0};
  for (const auto& shard : c.shards) {
    lmdb_tier_config lc = shard.lmdb;
    lc.read_only = true;
    auto tier = lmdb_tier::open(c.table.layout, lc);
    EXPECT_TRUE(tier) << tier.err().to_string();
    if (!tier) continue;
    auto st = (*tier)->dump(
        [&](uint64_t, const std::byte* r) { lowest = std::min(lowest, meta_of(r).version); });
    EXPECT_TRUE(st) << st.err().to_string();
  }
  return lowest;
}

// A first run that leaves a checkpoint under dir/ckpt.
std::string first_checkpoint(const fs::path& dir, const fs::path& data) {
  auto c = small_cluster(data, dir / "state0", dir / "ckpt", 2, 2, 2);
  for (auto& w : c.workers) w.max_batches = 30;
  auto r = run_local_cluster(c);
  EXPECT_TRUE(r) << r.err().to_string();
  return r ? r->last_checkpoint : std::string();
}

// Item 6: resume from a checkpoint, train (versions handed out), crash
// before any new checkpoint, resume from the same checkpoint again: the
// second incarnation is strictly greater, and every version the second
// run holds is above every version the first run handed out.
TEST(CheckpointDurability, RestoringTheSameCheckpointTwiceGivesANewIncarnation) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  const fs::path checkpoint = first_checkpoint(dir.path(), data);
  ASSERT_FALSE(checkpoint.empty());

  // The first resume trains 20 more batches per worker and "crashes": no
  // checkpoint at the stop or on the way, its shard state is abandoned.
  auto b1 = small_cluster(data, dir.path() / "state1", dir.path() / "ckpt-b", 2, 2, 2);
  auto restored1 = restore_checkpoint(checkpoint, b1);
  ASSERT_TRUE(restored1) << restored1.err().to_string();
  EXPECT_EQ(b1.incarnation, restored1->incarnation + 1);
  b1.checkpoint.interval_batches = 0;
  b1.checkpoint.at_stop = false;
  for (auto& w : b1.workers) w.max_batches = 50;
  auto r1 = run_local_cluster(b1);
  ASSERT_TRUE(r1) << r1.err().to_string();
  EXPECT_TRUE(r1->last_checkpoint.empty());
  const uint64_t seen_after_first = highest_live_version(b1);
  ASSERT_EQ(incarnation_of(seen_after_first), b1.incarnation);

  // The second resume from the same checkpoint.
  auto b2 = small_cluster(data, dir.path() / "state2", dir.path() / "ckpt-b", 2, 2, 2);
  auto restored2 = restore_checkpoint(checkpoint, b2);
  ASSERT_TRUE(restored2) << restored2.err().to_string();
  EXPECT_GT(b2.incarnation, b1.incarnation)
      << "the second restore of " << checkpoint << " reused incarnation " << b1.incarnation;
  for (auto& w : b2.workers) w.max_batches = 50;
  auto r2 = run_local_cluster(b2);
  ASSERT_TRUE(r2) << r2.err().to_string();
  EXPECT_GT(lowest_live_version(b2), seen_after_first)
      << "a version after the second resume is not above those of the first";

  // The record is durable in both roots, a plain file.
  for (const fs::path& root : {checkpoint.parent_path(), dir.path() / "ckpt-b"}) {
    std::ifstream in(root / incarnation_record_name);
    std::string head;
    unsigned value = 0;
    ASSERT_TRUE(in >> head >> value) << root;
    EXPECT_EQ(head, "strata-incarnation");
    EXPECT_EQ(value, b2.incarnation) << root;
  }
}

// Item 17: one flipped byte of CHECKPOINT is a checksum mismatch naming the
// file both in verify and on the resume path (which reads the metadata
// first to refuse an incompatible layout), not a parse error of the bytes.
TEST(CheckpointDurability, AFlippedCheckpointByteIsAChecksumMismatchOnResume) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  const fs::path checkpoint = first_checkpoint(dir.path(), data);
  ASSERT_FALSE(checkpoint.empty());
  const fs::path copy = dir.path() / "damaged" / checkpoint.filename();
  fs::create_directories(copy.parent_path());
  fs::copy(checkpoint, copy, fs::copy_options::recursive);
  const fs::path file = copy / checkpoint_meta_name;
  auto bytes = file_bytes(file);
  ASSERT_FALSE(bytes.empty());
  bytes[0] ^= 0x20;  // "strata-checkpoint" -> "Strata-checkpoint"
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));

  auto verified = verify_checkpoint(copy);
  ASSERT_FALSE(verified);
  auto meta = read_checkpoint_meta(copy);
  ASSERT_FALSE(meta);
  auto c = small_cluster(data, dir.path() / "state1", dir.path() / "ckpt1", 2, 2, 2);
  auto restored = restore_checkpoint(copy, c);
  ASSERT_FALSE(restored);
  for (const error& e : {verified.err(), meta.err(), restored.err()}) {
    const std::string text = e.to_string();
    EXPECT_EQ(e.code(), errc::corrupt_data) << text;
    EXPECT_NE(text.find("checksum mismatch"), std::string::npos) << text;
    EXPECT_NE(text.find(file.string()), std::string::npos) << text;
  }
}

// Item 7: a checkpoint of a model with another dense size (same table
// layout, so the restore itself fits) is refused when the cluster starts,
// naming dense.bin and both sizes; before, the weights were silently reset
// to the initial ones.
TEST(CheckpointDurability, ADenseRecordOfTheWrongSizeIsRefused) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  const fs::path checkpoint = first_checkpoint(dir.path(), data);
  ASSERT_FALSE(checkpoint.empty());
  const auto recorded = fs::file_size(checkpoint / checkpoint_dense_name);

  auto other = small_cluster(data, dir.path() / "state1", dir.path() / "ckpt1", 2, 2, 2);
  other.model.hidden = {8};  // a different MLP: another dense size
  auto restored = restore_checkpoint(checkpoint, other);
  ASSERT_TRUE(restored) << restored.err().to_string();
  auto r = run_local_cluster(other);
  ASSERT_FALSE(r) << "a dense record of " << recorded << " bytes was accepted";
  const std::string text = r.err().to_string();
  EXPECT_NE(text.find((checkpoint / checkpoint_dense_name).string()), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(recorded)), std::string::npos) << text;
  const size_t wanted = dense_record_bytes(model::ctr_model(other.model).dense_size());
  EXPECT_NE(text.find(std::to_string(wanted)), std::string::npos) << text;
}


// Item 8: shards.ttl_ticks acts in a real training run. The coordinator
// drives the shards' TTL clock in cluster batches; with one worker the
// clock after batch b is b. Rows last touched long before the end are
// expired (gone from the final checkpoint), recent ones stay, and the
// checkpoint records a non-zero clock.
TEST(CheckpointDurability, TtlTicksExpireIdleRowsInATrainingRun) {
  temp_dir dir;
  const auto data = generate_data(dir.path());
  constexpr uint64_t batches = 300;
  constexpr uint32_t ttl = 16;
  auto c = small_cluster(data, dir.path() / "state", dir.path() / "ckpt", 2, 1, 1);
  c.checkpoint.interval_batches = 0;
  c.workers[0].max_batches = batches;
  c.workers[0].batch_size = 8;  // keys recur rarely enough to go idle
  for (auto& sc : c.shards) {
    sc.dram.capacity_bytes = size_t{32} << 20;  // every row stays in DRAM, where TTL acts
    sc.dram.ttl_ticks = ttl;
  }
  auto r = run_local_cluster(c);
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_FALSE(r->last_checkpoint.empty());

  // The recorded clock: the batches trained, in steps of at most 8.
  uint32_t clock = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    const auto bytes =
        file_bytes(shard_checkpoint_dir(r->last_checkpoint, s) / checkpoint_shard_state_name);
    ASSERT_GE(bytes.size(), sizeof clock);
    uint32_t tick = 0;
    std::memcpy(&tick, bytes.data(), sizeof tick);
    EXPECT_GT(tick, 0u) << "shard " << s << ": the TTL clock never moved";
    EXPECT_LE(tick, batches);
    EXPECT_GT(tick + 8, batches);
    clock = std::max(clock, tick);
  }

  // The batch (1-based) in which each key was last seen.
  std::map<uint64_t, uint64_t> last_seen;
  auto source = open_reader_source(c.workers[0]);
  ASSERT_TRUE(source) << source.err().to_string();
  for (uint64_t b = 1; b <= batches; ++b) {
    auto batch = (*source)->next(c.workers[0].batch_size);
    ASSERT_TRUE(batch && !batch->examples.empty());
    for (uint64_t k : batch->keys()) last_seen[k] = b;
  }
  const auto rows = checkpoint_rows(r->last_checkpoint);
  // A row is stamped with the clock when touched, at most a step (8) and
  // the pipeline's lag behind its batch: 16 batches of slack each way.
  size_t idle = 0, recent = 0;
  for (const auto& [key, b] : last_seen) {
    if (b + ttl + 16 < clock) {
      ++idle;
      EXPECT_EQ(rows.count(key), 0u) << "key " << key << " last seen in batch " << b
                                     << " outlived ttl_ticks " << ttl << " (clock " << clock
                                     << ")";
    } else if (b + ttl >= clock + 16) {
      ++recent;
      EXPECT_EQ(rows.count(key), 1u) << "key " << key << " seen in batch " << b << " expired";
    }
  }
  EXPECT_GT(idle, 100u) << "recent " << recent << " of " << last_seen.size();
  EXPECT_GT(recent, 100u);
  EXPECT_LT(rows.size(), last_seen.size());
}

}  // namespace
}  // namespace strata::actors
