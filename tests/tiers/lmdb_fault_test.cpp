// The fault-injection seam (common/io_env.hpp) and the LMDB tier's answers to
// injected storage faults and to older rows arriving after newer ones.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <numeric>

#include "common/io_env.hpp"
#include "tests/tiers/fault_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata {
namespace {

using testing::make_records;
using testing::scoped_faults;
using testing::temp_dir;

const row_layout layout8{8, optimizer_kind::adagrad, true};

std::unique_ptr<lmdb_tier> open_tier(const std::filesystem::path& dir) {
  lmdb_tier_config config;
  config.directory = dir;
  auto tier = lmdb_tier::open(layout8, config);
  EXPECT_TRUE(tier.has_value()) << (tier ? "" : tier.err().to_string());
  return tier ? std::move(*tier) : nullptr;
}

status store(lmdb_tier& tier, const std::vector<uint64_t>& keys, uint32_t salt) {
  const auto records = make_records(layout8, keys, salt);
  row_buffer spilled(layout8);
  return tier.store(keys, const_rows_span{records.data(), layout8.record_bytes()}, true, spilled);
}

// The version stored for each key (0: missing).
std::vector<uint64_t> versions(lmdb_tier& tier, const std::vector<uint64_t>& keys) {
  std::vector<std::byte> out(keys.size() * layout8.record_bytes());
  std::vector<uint32_t> misses;
  auto s = tier.lookup(keys, rows_span{out.data(), layout8.record_bytes()}, misses);
  EXPECT_TRUE(s) << (s ? "" : s.err().to_string());
  std::vector<uint64_t> v(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) v[i] = meta_of(out.data() + i * layout8.record_bytes()).version;
  for (uint32_t m : misses) v[m] = 0;
  return v;
}

TEST(FaultSpec, ParsesEveryForm) {
  auto r = parse_fault_spec("lmdb_commit:3:ENOSPC,fsync:2+:EIO:ckpt-1/x,rename:2-4:28");
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].op, io_op::lmdb_commit);
  EXPECT_EQ((*r)[0].first, 3u);
  EXPECT_EQ((*r)[0].last, 3u);
  EXPECT_EQ((*r)[0].err, ENOSPC);
  EXPECT_EQ((*r)[1].op, io_op::fsync);
  EXPECT_EQ((*r)[1].last, UINT64_MAX);
  EXPECT_EQ((*r)[1].err, EIO);
  EXPECT_EQ((*r)[1].path, "ckpt-1/x");
  EXPECT_EQ((*r)[2].first, 2u);
  EXPECT_EQ((*r)[2].last, 4u);
  EXPECT_EQ((*r)[2].err, 28);
}

TEST(FaultSpec, MalformedValuesAreNamedErrors) {
  for (const char* bad :
       {"lmdb_commit", "commit:1:EIO", "lmdb_commit:0:EIO", "lmdb_commit:x:EIO",
        "lmdb_commit:1:EWHAT", "lmdb_commit:3-2:EIO", "lmdb_sync:1:EIO,", "lmdb_commit:1+:SLOW",
        "lmdb_commit:1+:SLOW0", "lmdb_commit:1:SLOW9x", "lmdb_commit:1:SLOW60001"}) {
    auto r = parse_fault_spec(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.err().code(), errc::invalid_argument);
    EXPECT_NE(r.err().message().find(std::string("STRATA_FAULT='") + bad + "'"), std::string::npos)
        << r.err().message();
  }
}

TEST(FaultSpec, FiresAtTheNthMatchingCallOnly) {
  auto rules = parse_fault_spec("write:2-3:EIO:wanted");
  ASSERT_TRUE(rules);
  faulty_io_env env(std::move(*rules));
  EXPECT_EQ(env.fault(io_op::write, "/a/wanted/1"), 0);
  EXPECT_EQ(env.fault(io_op::write, "/a/other"), 0);  // does not count
  EXPECT_EQ(env.fault(io_op::fsync, "/a/wanted"), 0);
  EXPECT_EQ(env.fault(io_op::write, "/a/wanted/2"), EIO);
  EXPECT_EQ(env.fault(io_op::write, "/a/wanted/3"), EIO);
  EXPECT_EQ(env.fault(io_op::write, "/a/wanted/4"), 0);
  EXPECT_EQ(env.fired(), 2u);
}

// SLOW<ms>: a slow disk, not a failing one: the matching calls wait, then
// succeed.
TEST(FaultSpec, SlowRulesDelayTheMatchingCallsAndSucceed) {
  auto rules = parse_fault_spec("lmdb_commit:2+:SLOW30:wanted");
  ASSERT_TRUE(rules) << rules.err().to_string();
  ASSERT_EQ(rules->size(), 1u);
  EXPECT_EQ((*rules)[0].delay_ms, 30u);
  EXPECT_EQ((*rules)[0].err, 0);
  faulty_io_env env(std::move(*rules));
  auto timed = [&env](std::string_view path) {
    const auto start = std::chrono::steady_clock::now();
    const int e = env.fault(io_op::lmdb_commit, path);
    EXPECT_EQ(e, 0) << path;
    return std::chrono::steady_clock::now() - start;
  };
  timed("/wanted/1");  // call 1: not delayed (no upper bound asserted: the machine is shared)
  EXPECT_GE(timed("/wanted/2"), std::chrono::milliseconds(30));
  EXPECT_GE(timed("/wanted/3"), std::chrono::milliseconds(30));
  timed("/other");
  EXPECT_EQ(env.fired(), 0u);  // nothing failed
}

TEST(LmdbFault, CommitFailureIsDiskFullNamingThePathAndKeepsThePreviousState) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const std::vector<uint64_t> keys{1, 2, 3};
  ASSERT_TRUE(store(*tier, keys, 0));
  {
    scoped_faults faults("lmdb_commit:1:ENOSPC");
    auto s = store(*tier, keys, 4);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.err().code(), errc::disk_full);
    EXPECT_NE(s.err().message().find(dir.path().string()), std::string::npos) << s.err().message();
    EXPECT_NE(s.err().message().find("No space left on device"), std::string::npos)
        << s.err().message();
    EXPECT_EQ(faults.env().fired(), 1u);
    // The next commit goes through: the failure was transient.
    ASSERT_TRUE(store(*tier, {9}, 1));
  }
  EXPECT_EQ(versions(*tier, keys), (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(tier->size(), 4u);
}

TEST(LmdbFault, SyncAndCopyFailuresAreIoErrorsNamingThePaths) {
  temp_dir dir;
  auto tier = open_tier(dir.path() / "shard");
  ASSERT_TRUE(tier);
  ASSERT_TRUE(store(*tier, {1, 2}, 0));
  scoped_faults faults("lmdb_sync:1:EIO,lmdb_copy:1:EIO");
  auto s = tier->sync();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err().code(), errc::io_error);
  EXPECT_NE(s.err().message().find((dir.path() / "shard").string()), std::string::npos);
  std::filesystem::create_directories(dir.path() / "copy");
  s = tier->copy_compacted(dir.path() / "copy");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err().code(), errc::io_error);
  EXPECT_NE(s.err().message().find((dir.path() / "copy").string()), std::string::npos);
  EXPECT_NE(s.err().message().find("Input/output error"), std::string::npos) << s.err().message();
}

// Issue 15 item 1: a retried flush batch arrives after a newer one; the
// stored newer row must stay (keep-newer), within one batch as well.
TEST(LmdbFault, AnOlderRowNeverReplacesANewerOne) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const std::vector<uint64_t> keys{10, 11, 12};
  ASSERT_TRUE(store(*tier, keys, 5));                     // version 6
  ASSERT_TRUE(store(*tier, {10, 11}, 4));                 // version 5: older, skipped
  ASSERT_TRUE(store(*tier, {12, 13}, 6));                 // version 7: newer, written
  EXPECT_EQ(versions(*tier, {10, 11, 12, 13}), (std::vector<uint64_t>{6, 6, 7, 7}));
  EXPECT_EQ(tier->stats().stale_rows_skipped, 2u);
  EXPECT_EQ(tier->size(), 4u);
  // A tombstone (TTL expiry) still deletes, and a row after it is stored.
  const uint64_t zero = 0;
  ASSERT_TRUE(tier->store_tombstones({&keys[0], 1}, {&zero, 1}));
  EXPECT_EQ(versions(*tier, {10}), (std::vector<uint64_t>{0}));
  ASSERT_TRUE(store(*tier, {10}, 0));
  EXPECT_EQ(versions(*tier, {10}), (std::vector<uint64_t>{1}));
  EXPECT_EQ(tier->size(), 4u);
}

}  // namespace
}  // namespace strata
