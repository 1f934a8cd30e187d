#include "tiers/lmdb_tier.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>

#include "common/hash.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using testing::make_records;
using testing::temp_dir;

const row_layout layout16{16, optimizer_kind::adagrad, true};

std::unique_ptr<lmdb_tier> open_tier(const std::filesystem::path& dir, row_layout layout = layout16,
                                     lmdb_tier_config config = {}) {
  config.directory = dir;
  auto tier = lmdb_tier::open(layout, config);
  EXPECT_TRUE(tier.has_value()) << (tier ? "" : tier.err().to_string());
  return tier ? std::move(*tier) : nullptr;
}

std::vector<uint64_t> key_range(uint64_t first, uint64_t count) {
  std::vector<uint64_t> keys(count);
  std::iota(keys.begin(), keys.end(), first);
  return keys;
}

void store_all(lmdb_tier& tier, const std::vector<uint64_t>& keys,
               const std::vector<std::byte>& records) {
  row_buffer spilled(tier.layout());
  auto st = tier.store(keys, const_rows_span{records.data(), tier.layout().record_bytes()}, true,
                       spilled);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_TRUE(spilled.empty());
}

struct lookup_result {
  std::vector<std::byte> records;
  std::vector<uint32_t> misses;
};

lookup_result lookup_all(lmdb_tier& tier, const std::vector<uint64_t>& keys) {
  lookup_result r;
  const size_t rb = tier.layout().record_bytes();
  r.records.assign(keys.size() * rb, std::byte{0});
  auto st = tier.lookup(keys, rows_span{r.records.data(), rb}, r.misses);
  EXPECT_TRUE(st) << st.err().to_string();
  return r;
}

// True if the records are bit-identical, access metadata included.
bool same_bytes(const row_layout& layout, const std::byte* a, const std::byte* b) {
  return std::memcmp(a, b, layout.record_bytes()) == 0;
}

std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void write_file(const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(LmdbTier, RowsPersistAcrossReopenBitExact) {
  temp_dir dir;
  const auto keys = key_range(1, 3000);
  auto records = make_records(layout16, keys, 3);
  for (size_t i = 0; i < keys.size(); ++i) {
    meta_of(records.data() + i * layout16.record_bytes()).freq = static_cast<uint32_t>(i);
    meta_of(records.data() + i * layout16.record_bytes()).tick = static_cast<uint32_t>(2 * i);
  }
  {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier);
    store_all(*tier, keys, records);
    EXPECT_EQ(tier->size(), keys.size());
    EXPECT_EQ(tier->stats().rows_written, keys.size());
    EXPECT_EQ(tier->stats().transactions, 1u);
    ASSERT_TRUE(tier->sync());
  }
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->size(), keys.size());
  auto probe = keys;
  probe.push_back(999999);  // absent
  probe.insert(probe.begin(), 888888);
  auto got = lookup_all(*tier, probe);
  EXPECT_EQ(got.misses, (std::vector<uint32_t>{0, static_cast<uint32_t>(probe.size() - 1)}));
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(same_bytes(layout16, got.records.data() + (i + 1) * layout16.record_bytes(),
                           records.data() + i * layout16.record_bytes()))
        << "key " << keys[i];
  }
  EXPECT_EQ(tier->stats().hits, keys.size());
  EXPECT_EQ(tier->stats().misses, 2u);
}

TEST(LmdbTier, SmallAndLargeLookupBatchesAgree) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const auto keys = key_range(100, 500);
  const auto records = make_records(layout16, keys, 1);
  store_all(*tier, keys, records);
  std::vector<uint64_t> probe;
  for (uint64_t k = 0; k < 700; k += 3) probe.push_back(k);  // hits and misses mixed
  auto big = lookup_all(*tier, probe);
  lookup_result small;
  for (size_t i = 0; i < probe.size(); ++i) {
    auto one = lookup_all(*tier, {probe[i]});
    small.records.insert(small.records.end(), one.records.begin(), one.records.end());
    if (!one.misses.empty()) small.misses.push_back(static_cast<uint32_t>(i));
  }
  EXPECT_EQ(big.misses, small.misses);
  EXPECT_TRUE(std::is_sorted(big.misses.begin(), big.misses.end()));
  for (size_t i = 0; i < probe.size(); ++i) {
    const bool miss = probe[i] < 100 || probe[i] >= 600;
    EXPECT_EQ(miss, std::binary_search(big.misses.begin(), big.misses.end(), i));
    if (!miss) {
      EXPECT_TRUE(same_bytes(layout16, big.records.data() + i * layout16.record_bytes(),
                             records.data() + (probe[i] - 100) * layout16.record_bytes()));
    }
  }
  EXPECT_EQ(big.records, small.records);
}

TEST(LmdbTier, TruncatedDataFileIsRefusedWithItsPath) {
  temp_dir dir;
  {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier);
    const auto keys = key_range(0, 20000);  // ~3 MB: many hundred pages
    store_all(*tier, keys, make_records(layout16, keys, 0));
  }
  const auto data = dir.path() / "data.mdb";
  const auto full = std::filesystem::file_size(data);
  ASSERT_GT(full, 2'000'000u);
  std::filesystem::resize_file(data, full * 6 / 10);
  lmdb_tier_config config;
  config.directory = dir.path();
  auto tier = lmdb_tier::open(layout16, config);  // would SIGBUS without the check
  ASSERT_FALSE(tier.has_value());
  EXPECT_EQ(tier.err().code(), errc::corrupt_data);
  EXPECT_NE(tier.err().message().find(data.string()), std::string::npos) << tier.err().message();
  EXPECT_NE(tier.err().message().find("truncated"), std::string::npos) << tier.err().message();

  // Cut inside the first meta page: refused too, not mistaken for a new file.
  std::filesystem::resize_file(data, 100);
  tier = lmdb_tier::open(layout16, config);
  ASSERT_FALSE(tier.has_value());
  EXPECT_EQ(tier.err().code(), errc::corrupt_data);
  EXPECT_NE(tier.err().message().find(data.string()), std::string::npos);
}

TEST(LmdbTier, HealthyFilesPassTheTruncationCheckAfterChurn) {
  // Inserts, erases and tombstones in many transactions (page splits, merges,
  // freed pages): reopening must never report a healthy file as truncated.
  temp_dir dir;
  for (int round = 0; round < 6; ++round) {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier);
    const auto keys = key_range(static_cast<uint64_t>(round) * 700, 3000);
    store_all(*tier, keys, make_records(layout16, keys, static_cast<uint32_t>(round)));
    std::vector<uint64_t> gone;
    for (size_t i = 0; i < keys.size(); i += 2) gone.push_back(keys[i]);
    ASSERT_TRUE(tier->erase(gone));
    std::vector<uint64_t> versions(gone.size(), 9);
    for (auto& k : gone) k += 1;
    ASSERT_TRUE(tier->store_tombstones(gone, versions));
  }
  EXPECT_TRUE(open_tier(dir.path()));
}

TEST(LmdbTier, FlippedBitInStoredRowIsDetectedWithItsKey) {
  temp_dir dir;
  const auto keys = key_range(5000, 400);
  const auto records = make_records(layout16, keys, 11);
  const uint64_t victim = 5123;
  {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier);
    store_all(*tier, keys, records);
  }
  // Find the victim's encoded value in the file and flip a payload bit.
  std::vector<std::byte> encoded(layout16.encoded_bytes());
  encode_row(layout16, victim, records.data() + (victim - 5000) * layout16.record_bytes(),
             encoded.data());
  const auto data = dir.path() / "data.mdb";
  auto bytes = read_file(data);
  int flipped = 0;
  for (auto it = bytes.begin();
       (it = std::search(it, bytes.end(), encoded.begin(), encoded.end())) != bytes.end(); ++it) {
    *(it + encoded_header_bytes + 17) ^= std::byte{0x04};
    ++flipped;
  }
  ASSERT_GE(flipped, 1);
  write_file(data, bytes);

  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  // Other keys still read fine.
  auto ok = lookup_all(*tier, {5000, 5001, 5399});
  EXPECT_TRUE(ok.misses.empty());
  for (std::vector<uint64_t> batch : {std::vector<uint64_t>{victim}, keys}) {  // small and sorted
    std::vector<std::byte> out(batch.size() * layout16.record_bytes());
    std::vector<uint32_t> misses;
    auto st = tier->lookup(batch, rows_span{out.data(), layout16.record_bytes()}, misses);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.err().code(), errc::corrupt_data);
    EXPECT_NE(st.err().message().find("key 5123"), std::string::npos) << st.err().message();
    EXPECT_NE(st.err().message().find("table 'default'"), std::string::npos);
  }
  auto st = tier->dump([](uint64_t, const std::byte*) {});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code(), errc::corrupt_data);
  EXPECT_NE(st.err().message().find("key 5123"), std::string::npos);
}

TEST(LmdbTier, AbortedTransactionLeavesOldValues) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const auto keys = key_range(10, 200);
  const auto old_rows = make_records(layout16, keys, 1);
  store_all(*tier, keys, old_rows);
  const auto tx_before = tier->stats().transactions;

  auto more = key_range(150, 200);  // overlaps 150..209, adds 210..349
  const auto new_rows = make_records(layout16, more, 2);
  ASSERT_TRUE(
      tier->write_then_abort(more, const_rows_span{new_rows.data(), layout16.record_bytes()}));
  EXPECT_EQ(tier->size(), keys.size());
  EXPECT_EQ(tier->stats().transactions, tx_before);

  auto got = lookup_all(*tier, keys);
  EXPECT_TRUE(got.misses.empty());
  EXPECT_EQ(got.records, old_rows);
  auto fresh = lookup_all(*tier, key_range(210, 140));
  EXPECT_EQ(fresh.misses.size(), 140u);
}

TEST(LmdbTier, RangeScanReturnsExactlyOnePartition) {
  temp_dir dir;
  lmdb_tier_config config;
  config.partitions = 16;
  auto tier = open_tier(dir.path(), layout16, config);
  ASSERT_TRUE(tier);
  const auto keys = key_range(0, 3000);
  const auto records = make_records(layout16, keys, 4);
  store_all(*tier, keys, records);
  // A tombstoned key of the partition must not come back.
  uint64_t tombstoned = 0;
  while (partition_of(tombstoned, 16) != 7) ++tombstoned;
  const uint64_t version = 99;
  ASSERT_TRUE(tier->store_tombstones({&tombstoned, 1}, {&version, 1}));

  for (uint32_t p : {0u, 7u, 15u}) {
    std::vector<uint64_t> expected;
    for (uint64_t k : keys)
      if (partition_of(k, 16) == p && !(p == 7 && k == tombstoned)) expected.push_back(k);
    ASSERT_GT(expected.size(), 50u);
    std::vector<uint64_t> seen;
    auto st = tier->range_scan(p, [&](uint64_t key, const std::byte* record) {
      seen.push_back(key);
      EXPECT_TRUE(same_bytes(layout16, record, records.data() + key * layout16.record_bytes()));
    });
    ASSERT_TRUE(st) << st.err().to_string();
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));  // one ascending key range
    EXPECT_EQ(seen, expected) << "partition " << p;
  }
  // A partition past the last one is empty.
  size_t none = 0;
  ASSERT_TRUE(tier->range_scan(16, [&](uint64_t, const std::byte*) { ++none; }));
  EXPECT_EQ(none, 0u);
}

TEST(LmdbTier, TombstonesHideRowsAndSurviveReopen) {
  temp_dir dir;
  const auto keys = key_range(1, 100);
  const auto records = make_records(layout16, keys, 1);
  std::vector<uint64_t> dead;
  for (uint64_t k = 1; k <= 100; k += 4) dead.push_back(k);
  dead.push_back(5000);  // a tombstone for a key never stored
  std::vector<uint64_t> versions(dead.size(), 42);
  {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier);
    store_all(*tier, keys, records);
    ASSERT_TRUE(tier->store_tombstones(dead, versions));
    EXPECT_EQ(tier->size(), 75u);
    EXPECT_EQ(tier->stats().tombstones_written, dead.size());
  }
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->size(), 75u);
  auto got = lookup_all(*tier, dead);
  EXPECT_EQ(got.misses.size(), dead.size());
  size_t visited = 0;
  ASSERT_TRUE(tier->dump([&](uint64_t key, const std::byte*) {
    ++visited;
    EXPECT_NE((key - 1) % 4, 0u) << key;
  }));
  EXPECT_EQ(visited, 75u);

  // A newer row replaces the tombstone.
  const auto revived = make_records(layout16, {1}, 50);
  store_all(*tier, {1}, revived);
  EXPECT_EQ(tier->size(), 76u);
  auto one = lookup_all(*tier, {1});
  EXPECT_TRUE(one.misses.empty());
  EXPECT_EQ(one.records, revived);
}

TEST(LmdbTier, EraseRemovesRows) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const auto keys = key_range(0, 50);
  store_all(*tier, keys, make_records(layout16, keys, 0));
  const std::vector<uint64_t> gone{3, 3, 7, 1000};  // repeated and absent keys are fine
  ASSERT_TRUE(tier->erase(gone));
  EXPECT_EQ(tier->size(), 48u);
  auto got = lookup_all(*tier, {2, 3, 7, 8});
  EXPECT_EQ(got.misses, (std::vector<uint32_t>{1, 2}));
}

TEST(LmdbTier, FullMapIsDiskFullNamingThePath) {
  temp_dir dir;
  lmdb_tier_config config;
  config.map_bytes = size_t{1} << 20;
  auto tier = open_tier(dir.path(), layout16, config);
  ASSERT_TRUE(tier);
  status st;
  uint64_t next = 0;
  size_t committed = 0;
  for (int batch = 0; batch < 100 && st; ++batch) {
    const auto keys = key_range(next, 500);
    const auto rows = make_records(layout16, keys, 0);
    row_buffer spilled(layout16);
    st = tier->store(keys, const_rows_span{rows.data(), layout16.record_bytes()}, true, spilled);
    if (st) committed += keys.size();
    next += keys.size();
  }
  ASSERT_FALSE(st) << "1 MiB map never filled";
  EXPECT_EQ(st.err().code(), errc::disk_full) << st.err().to_string();
  EXPECT_NE(st.err().message().find(tier->path().string()), std::string::npos)
      << st.err().message();
  // The failed batch left nothing behind; committed rows stay readable.
  EXPECT_EQ(tier->size(), committed);
  auto got = lookup_all(*tier, key_range(0, committed));
  EXPECT_TRUE(got.misses.empty());
}

TEST(LmdbTier, UnusableDirectoryIsAnErrorNamingThePath) {
  temp_dir dir;
  const auto file = dir.path() / "not-a-directory";
  std::ofstream(file) << "x";
  for (const auto& bad : {file, file / "shard0"}) {
    lmdb_tier_config config;
    config.directory = bad;
    auto tier = lmdb_tier::open(layout16, config);
    ASSERT_FALSE(tier.has_value());
    EXPECT_EQ(tier.err().code(), errc::io_error);
    EXPECT_NE(tier.err().message().find(bad.string()), std::string::npos) << tier.err().message();
  }
  // A data file that is a directory: LMDB cannot open it.
  const auto odd = dir.path() / "odd";
  std::filesystem::create_directories(odd / "data.mdb");
  lmdb_tier_config config;
  config.directory = odd;
  auto tier = lmdb_tier::open(layout16, config);
  ASSERT_FALSE(tier.has_value());
  EXPECT_NE(tier.err().message().find(odd.string()), std::string::npos) << tier.err().message();
}

TEST(LmdbTier, WrongLayoutIsFormatMismatch) {
  temp_dir dir;
  {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier);
    const auto keys = key_range(0, 10);
    store_all(*tier, keys, make_records(layout16, keys, 0));
  }
  for (row_layout other :
       {row_layout{8, optimizer_kind::adagrad, true}, row_layout{16, optimizer_kind::adam, true},
        row_layout{16, optimizer_kind::adagrad, false}}) {
    lmdb_tier_config config;
    config.directory = dir.path();
    auto tier = lmdb_tier::open(other, config);
    ASSERT_FALSE(tier.has_value());
    EXPECT_EQ(tier.err().code(), errc::format_mismatch);
    EXPECT_NE(tier.err().message().find("table 'default'"), std::string::npos)
        << tier.err().message();
    EXPECT_NE(tier.err().message().find(dir.path().string()), std::string::npos);
  }
  EXPECT_TRUE(open_tier(dir.path()));  // the right layout still opens
}

TEST(LmdbTier, TablesShareOneEnvironment) {
  temp_dir dir;
  lmdb_tier_config a_config, b_config;
  a_config.table = "ads";
  b_config.table = "users";
  const row_layout layout8{8, optimizer_kind::sgd, true};
  auto a = open_tier(dir.path(), layout16, a_config);
  auto b = open_tier(dir.path(), layout8, b_config);
  ASSERT_TRUE(a && b);
  store_all(*a, {1, 2}, make_records(layout16, {1, 2}, 1));
  store_all(*b, {2, 3, 4}, make_records(layout8, {2, 3, 4}, 2));
  EXPECT_EQ(a->size(), 2u);
  EXPECT_EQ(b->size(), 3u);
  EXPECT_EQ(lookup_all(*a, {3}).misses.size(), 1u);
  EXPECT_EQ(lookup_all(*b, {2, 3}).records, make_records(layout8, {2, 3}, 2));
  // The same table twice in one process is refused.
  a_config.directory = dir.path();
  auto again = lmdb_tier::open(layout16, a_config);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.err().code(), errc::invalid_argument);
}

TEST(LmdbTier, DuplicateKeysInStoreBatchLastCopyWins) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const std::vector<uint64_t> keys{5, 7, 5, 9, 7, 5};
  std::vector<std::byte> rows;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto one = make_records(layout16, {keys[i]}, static_cast<uint32_t>(i));
    rows.insert(rows.end(), one.begin(), one.end());
  }
  store_all(*tier, keys, rows);
  EXPECT_EQ(tier->size(), 3u);
  EXPECT_EQ(tier->stats().rows_written, 3u);
  auto got = lookup_all(*tier, {5, 7, 9});
  EXPECT_TRUE(got.misses.empty());
  EXPECT_EQ(got.records[0 * layout16.record_bytes()], rows[5 * layout16.record_bytes()]);
  for (auto [slot, pos] : {std::pair{0, 5}, std::pair{1, 4}, std::pair{2, 3}}) {
    EXPECT_TRUE(same_bytes(layout16, got.records.data() + slot * layout16.record_bytes(),
                           rows.data() + pos * layout16.record_bytes()))
        << "slot " << slot;
  }
}

TEST(LmdbTier, DuplicateKeysInLookupBatchGetTheSameRow) {
  temp_dir dir;
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  const auto keys = key_range(0, 100);
  const auto records = make_records(layout16, keys, 0);
  store_all(*tier, keys, records);
  for (size_t repeats : {2u, 40u}) {  // a small (unsorted) and a large (sorted) batch
    std::vector<uint64_t> probe;
    for (size_t r = 0; r < repeats; ++r) {
      probe.push_back(42);
      probe.push_back(1000);  // absent
      probe.push_back(7);
    }
    auto got = lookup_all(*tier, probe);
    std::vector<uint32_t> want_misses;
    for (size_t i = 0; i < probe.size(); ++i) {
      if (probe[i] == 1000) {
        want_misses.push_back(static_cast<uint32_t>(i));
      } else {
        EXPECT_TRUE(same_bytes(layout16, got.records.data() + i * layout16.record_bytes(),
                               records.data() + probe[i] * layout16.record_bytes()))
            << i;
      }
    }
    EXPECT_EQ(got.misses, want_misses);
  }
}

TEST(LmdbTier, SyncModeCommitsDurablyAndSyncWorks) {
  temp_dir dir;
  lmdb_tier_config config;
  config.sync = true;
  {
    auto tier = open_tier(dir.path(), layout16, config);
    ASSERT_TRUE(tier);
    store_all(*tier, {1}, make_records(layout16, {1}, 0));
    EXPECT_TRUE(tier->sync());
    row_buffer dirty(layout16);
    EXPECT_TRUE(tier->take_dirty(dirty));
    EXPECT_TRUE(dirty.empty());
  }
  auto tier = open_tier(dir.path());
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->size(), 1u);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A shard reads through one handle while its ssd_flush actor writes through
// a second one: the reader sees committed rows, and the live-row count stays
// exact whichever handle writes.
TEST(LmdbTier, SharedHandleReaderSeesTheWritersRows) {
  temp_dir dir;
  auto reader = open_tier(dir.path());
  ASSERT_TRUE(reader);
  lmdb_tier_config shared;
  shared.shared_handle = true;
  auto writer = open_tier(dir.path(), layout16, shared);
  ASSERT_TRUE(writer);
  auto keys = key_range(100, 50);
  auto rows = make_records(layout16, keys, 2);
  store_all(*writer, keys, rows);
  auto r = lookup_all(*reader, keys);
  EXPECT_TRUE(r.misses.empty());
  EXPECT_TRUE(same_bytes(layout16, r.records.data(), rows.data()));
  EXPECT_EQ(reader->size(), 50u);
  // The reader handle writes tombstones (TTL): both counts agree.
  std::vector<uint64_t> gone{100, 101};
  std::vector<uint64_t> versions{9, 9};
  ASSERT_TRUE(reader->store_tombstones(gone, versions));
  store_all(*writer, key_range(1000, 5), make_records(layout16, key_range(1000, 5), 1));
  EXPECT_EQ(writer->size(), 53u);
  EXPECT_EQ(reader->size(), 53u);
}

TEST(LmdbTier, SecondHandleWithoutSharingIsRefused) {
  temp_dir dir;
  auto first = open_tier(dir.path());
  ASSERT_TRUE(first);
  lmdb_tier_config config;
  config.directory = dir.path();
  auto second = lmdb_tier::open(layout16, config);
  ASSERT_FALSE(second);
  EXPECT_NE(second.err().message().find("already open"), std::string::npos);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A checkpoint's copy of a shard: compacted, complete, readable on its own.
TEST(LmdbTier, CompactedCopyHoldsEveryRow) {
  temp_dir dir;
  auto tier = open_tier(dir.path() / "live");
  ASSERT_TRUE(tier);
  auto keys = key_range(1, 3000);
  auto rows = make_records(layout16, keys, 4);
  store_all(*tier, keys, rows);
  std::vector<uint64_t> gone = key_range(1, 1000);
  ASSERT_TRUE(tier->erase(gone));  // freed pages: the compacted copy is smaller
  std::filesystem::create_directories(dir.path() / "copy");
  auto st = tier->copy_compacted(dir.path() / "copy");
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_LT(std::filesystem::file_size(dir.path() / "copy" / "data.mdb"),
            std::filesystem::file_size(dir.path() / "live" / "data.mdb"));
  auto copy = open_tier(dir.path() / "copy");
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->size(), 2000u);
  auto kept = key_range(1001, 2000);  // keys 1001..3000
  auto r = lookup_all(*copy, kept);
  EXPECT_TRUE(r.misses.empty());
  for (size_t i = 0; i < kept.size(); ++i)
    ASSERT_TRUE(same_bytes(layout16, r.records.data() + i * layout16.record_bytes(),
                           rows.data() + (1000 + i) * layout16.record_bytes()));
  auto bad = tier->copy_compacted(dir.path() / "no" / "such" / "dir");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message().find("no/such/dir"), std::string::npos) << bad.err().message();
}

// A read-only handle maps only the committed pages, not the writer's
// reserved map: 200 open read-only copies written with a 1 TiB map would
// need 200 TiB of address space (more than x86-64's 128 TiB user space; a
// ThreadSanitizer process ran out at the second copy).
TEST(LmdbTier, ReadOnlyCopiesReserveNoMapEach) {
  temp_dir dir;
  {
    auto writer = open_tier(dir.path() / "copy-0");
    ASSERT_TRUE(writer);
    store_all(*writer, key_range(1, 100), make_records(layout16, key_range(1, 100), 1));
  }
  constexpr int copies = 200;
  for (int i = 1; i < copies; ++i)
    std::filesystem::copy(dir.path() / "copy-0", dir.path() / ("copy-" + std::to_string(i)));
  std::vector<std::unique_ptr<lmdb_tier>> readers;
  for (int i = 0; i < copies; ++i) {
    lmdb_tier_config config;
    config.read_only = true;  // map_bytes stays the 1 TiB default
    auto reader = open_tier(dir.path() / ("copy-" + std::to_string(i)), layout16, config);
    ASSERT_TRUE(reader) << "copy " << i;
    readers.push_back(std::move(reader));
  }
  auto r = lookup_all(*readers.back(), key_range(1, 100));
  EXPECT_TRUE(r.misses.empty());
}

}  // namespace
}  // namespace strata
