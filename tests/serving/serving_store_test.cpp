// The serving store against a real checkpoint (real LMDB): HugeCTR HPS's
// black-box expectations, the sync/async cache insertion switch, warm-up,
// and online updates that never go backwards.
#include "serving/serving_store.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "tests/serving/serving_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/cpu_cache.hpp"
#if STRATA_TEST_GPU
#include "gpu/device_memory.hpp"
#include "gpu/staged_cache.hpp"
#endif

namespace strata::serving {
namespace {

using testing::checkpoint_rows;

constexpr uint32_t dim = 8;

struct fixture {
  testing::temp_dir dir;
  checkpoint_rows rows;
  std::unique_ptr<serving_store> store;

  using cache_maker = std::function<std::unique_ptr<cache_backend>(const row_layout&,
                                                                   const cache_geometry&)>;
  explicit fixture(serving_store_config config = {}, uint32_t cache_sets = 4,
                   uint32_t rows_n = 600, cache_maker make_cache = {}) {
    rows = testing::write_test_checkpoint(dir.path() / "ckpt-000000000001", "ads", dim, rows_n, 2);
    config.table = "ads";
    config.dim = dim;
    config.partitions = 64;
    config.lmdb_path = dir.path() / "serving";
    if (config.dram_bytes == serving_store_config{}.dram_bytes)
      config.dram_bytes =
          dram_tier::budget_for_rows({dim, optimizer_kind::sgd, false}, eviction_policy::lru, 100);
    const row_layout layout{dim, optimizer_kind::sgd, false};
    const cache_geometry geometry{cache_sets, 1};
    auto opened = serving_store::open(config, make_cache
                                                  ? make_cache(layout, geometry)
                                                  : std::make_unique<cpu_cache>(layout, geometry));
    EXPECT_TRUE(opened.has_value()) << (opened ? "" : opened.err().to_string());
    store = std::move(*opened);
    auto loaded = store->load_checkpoint(dir.path() / "ckpt-000000000001");
    EXPECT_TRUE(loaded.has_value()) << (loaded ? "" : loaded.err().to_string());
  }

  // Every key's served row equals the checkpoint's bit for bit (or the
  // default vector for keys it lacks).
  void expect_rows(std::span<const uint64_t> keys, const lookup_result& r, float default_value) {
    ASSERT_EQ(r.dim, dim);
    ASSERT_EQ(r.versions.size(), keys.size());
    ASSERT_EQ(r.weights.size(), keys.size() * dim);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = rows.weights.find(keys[i]);
      if (it == rows.weights.end()) {
        EXPECT_EQ(r.versions[i], 0u) << "key " << keys[i];
        for (uint32_t d = 0; d < dim; ++d) EXPECT_EQ(r.weights[i * dim + d], default_value);
        continue;
      }
      EXPECT_EQ(r.versions[i], rows.versions.at(keys[i])) << "key " << keys[i];
      EXPECT_EQ(std::memcmp(r.weights.data() + i * dim, it->second.data(), dim * 4), 0)
          << "key " << keys[i] << " at position " << i;
    }
  }
};

TEST(ServingStore, KnownKeysReturnTheCheckpointRowsBitForBit) {
  fixture f;
  EXPECT_EQ(f.store->stats().loaded_rows, 600u);
  lookup_result r;
  // Twice: the first pass fills cache and DRAM from LMDB, the second is
  // served from them (the cache holds 128 rows, DRAM ~100: both evict).
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(f.store->lookup(f.rows.keys, r).has_value());
    f.expect_rows(f.rows.keys, r, 0.0f);
    ASSERT_TRUE(f.store->insert_pending().has_value());
  }
  EXPECT_GT(f.store->stats().cache_hits + f.store->stats().dram_hits, 0u);
  EXPECT_GT(f.store->stats().lmdb_hits, 0u);
}

TEST(ServingStore, UnknownKeysGetTheDefaultVectorNotAnError) {
  serving_store_config c;
  c.default_value = 0.25f;
  fixture f(c);
  const std::vector<uint64_t> keys = {1, 1001, 1000, 999999999999ull, ~uint64_t{0}};
  lookup_result r;
  ASSERT_TRUE(f.store->lookup(keys, r).has_value());
  f.expect_rows(keys, r, 0.25f);
  EXPECT_EQ(f.store->stats().defaults, 4u);
}

TEST(ServingStore, RepeatedKeysGetTheSameRow) {
  fixture f;
  const std::vector<uint64_t> keys = {1003, 7, 1003, 1003, 7, 1006, 1003};
  lookup_result r;
  ASSERT_TRUE(f.store->lookup(keys, r).has_value());
  f.expect_rows(keys, r, 0.0f);
  for (size_t i : {2, 3, 6}) EXPECT_EQ(std::memcmp(&r.weights[i * dim], &r.weights[0], dim * 4), 0);
}

TEST(ServingStore, BatchesOf0_1_16_1024Keys) {
  fixture f;
  std::mt19937_64 rng(5);
  for (size_t n : {0, 1, 16, 1024}) {
    std::vector<uint64_t> keys(n);
    for (auto& k : keys)  // mostly known keys, some unknown, repeats likely
      k = rng() % 8 == 0 ? rng() : f.rows.keys[rng() % f.rows.keys.size()];
    lookup_result r;
    ASSERT_TRUE(f.store->lookup(keys, r).has_value()) << n << " keys";
    f.expect_rows(keys, r, 0.0f);
  }
}

// serving.cache_backend: gpu: the CUDA cache behind pinned staging serves
// the same rows bit for bit (through evictions, repeats, every batch size).
// On a device only (gpu/check.sh runs it there); skipped elsewhere.
TEST(ServingStore, GpuCacheServesTheCheckpointRowsBitForBit) {
#if STRATA_TEST_GPU
  if (const auto why = gpu::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  fixture f({}, 4, 600, [](const row_layout& layout, const cache_geometry& geometry) {
    auto made = gpu::staged_cache::create(layout, geometry, 1024);
    EXPECT_TRUE(made.has_value()) << (made ? "" : made.err().to_string());
    return std::unique_ptr<cache_backend>(made ? std::move(*made) : nullptr);
  });
  lookup_result r;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(f.store->lookup(f.rows.keys, r).has_value());
    f.expect_rows(f.rows.keys, r, 0.0f);
    ASSERT_TRUE(f.store->insert_pending().has_value());
  }
  EXPECT_GT(f.store->stats().cache_hits, 0u);
  std::mt19937_64 rng(9);
  for (size_t n : {0, 1, 16, 1024}) {
    std::vector<uint64_t> keys(n);
    for (auto& k : keys) k = rng() % 8 == 0 ? rng() : f.rows.keys[rng() % f.rows.keys.size()];
    ASSERT_TRUE(f.store->lookup(keys, r).has_value()) << n << " keys";
    f.expect_rows(keys, r, 0.0f);
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST(ServingStore, LowHitRateInsertsSynchronouslyHighHitRateAsynchronously) {
  {
    serving_store_config c;
    c.async_insert_hit_rate = 1.0;  // never reached by a cold cache: always synchronous
    fixture f(c);
    lookup_result r;
    const std::vector<uint64_t> keys(f.rows.keys.begin(), f.rows.keys.begin() + 10);
    ASSERT_TRUE(f.store->lookup(keys, r).has_value());
    EXPECT_EQ(f.store->stats().sync_inserts, 10u);
    EXPECT_FALSE(f.store->has_pending());
    ASSERT_TRUE(f.store->lookup(keys, r).has_value());
    EXPECT_EQ(f.store->stats().cache_hits, 10u);  // inserted before the first reply
  }
  {
    serving_store_config c;
    c.async_insert_hit_rate = 0.0;  // always "high enough": asynchronous
    fixture f(c);
    lookup_result r;
    const std::vector<uint64_t> keys(f.rows.keys.begin(), f.rows.keys.begin() + 10);
    ASSERT_TRUE(f.store->lookup(keys, r).has_value());
    EXPECT_EQ(f.store->stats().async_inserts, 10u);
    EXPECT_TRUE(f.store->has_pending());
    ASSERT_TRUE(f.store->lookup(keys, r).has_value());
    EXPECT_EQ(f.store->stats().cache_hits, 0u);  // not inserted yet: served from DRAM
    f.expect_rows(keys, r, 0.0f);
    ASSERT_TRUE(f.store->insert_pending().has_value());
    ASSERT_TRUE(f.store->lookup(keys, r).has_value());
    EXPECT_EQ(f.store->stats().cache_hits, 10u);
    f.expect_rows(keys, r, 0.0f);
  }
}

TEST(ServingStore, HitRateSwitchesModeAsTheCacheWarms) {
  serving_store_config c;
  c.async_insert_hit_rate = 0.5;
  c.hit_rate_window = 64;
  fixture f(c, 64);
  const std::vector<uint64_t> hot(f.rows.keys.begin(), f.rows.keys.begin() + 32);
  lookup_result r;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(f.store->lookup(hot, r).has_value());
    ASSERT_TRUE(f.store->insert_pending().has_value());
  }
  EXPECT_GT(f.store->recent_hit_rate(), 0.5);
  EXPECT_EQ(f.store->stats().sync_inserts, 32u);  // the cold first batch
  const uint64_t async_before = f.store->stats().async_inserts;
  const std::vector<uint64_t> cold(f.rows.keys.begin() + 100, f.rows.keys.begin() + 104);
  ASSERT_TRUE(f.store->lookup(cold, r).has_value());
  EXPECT_EQ(f.store->stats().async_inserts, async_before + 4);  // warm cache: asynchronous
}

TEST(ServingStore, WarmUpFillsTheCacheWithTheMostFrequentKeys) {
  serving_store_config c;
  c.warmup_keys = 6;
  fixture f(c, 64);
  EXPECT_EQ(f.store->stats().warmed_rows, 6u);
  // The most frequent keys: freq = i % 97 is highest (96) at i = 96, 193, 290, ...
  std::vector<uint64_t> top;
  for (uint64_t i = 96; i < 600; i += 97) top.push_back(1000 + 3 * i);
  ASSERT_EQ(top.size(), 6u);
  lookup_result r;
  ASSERT_TRUE(f.store->lookup(top, r).has_value());
  EXPECT_EQ(f.store->stats().cache_hits, 6u);
  f.expect_rows(top, r, 0.0f);
}

TEST(ServingStore, UpdatesNeverGoBackwardsUnderReordering) {
  fixture f;
  const uint64_t key = f.rows.keys[5];
  const uint64_t base = f.rows.versions.at(key);
  // Versions base+1 .. base+20, each carrying its own counter as weights,
  // applied in a shuffled order; the row seen must only ever grow and end
  // at the highest.
  std::vector<uint64_t> order(20);
  for (size_t i = 0; i < order.size(); ++i) order[i] = base + 1 + i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(11));
  uint64_t seen = base;
  lookup_result r;
  const uint64_t keys[] = {key};
  ASSERT_TRUE(f.store->lookup(keys, r).has_value());  // now cached: updates must refresh it
  ASSERT_TRUE(f.store->insert_pending().has_value());
  for (uint64_t v : order) {
    std::vector<float> w(dim, float(v - base));
    const uint64_t versions[] = {v};
    ASSERT_TRUE(f.store->apply_updates(keys, w, versions).has_value());
    ASSERT_TRUE(f.store->lookup(keys, r).has_value());
    ASSERT_GE(r.versions[0], seen);
    seen = r.versions[0];
    EXPECT_EQ(r.weights[0], float(seen - base));
  }
  EXPECT_EQ(seen, base + 20);
  EXPECT_GT(f.store->stats().updates_ignored, 0u);
}

TEST(ServingStore, ANewIncarnationSupersedesTheOld) {
  fixture f;
  const uint64_t key = f.rows.keys[7];
  const uint64_t keys[] = {key};
  std::vector<float> old_w(dim, 1.0f), new_w(dim, 2.0f);
  const uint64_t high_old[] = {make_version(1, 1000000)};
  const uint64_t low_new[] = {make_version(2, 1)};
  ASSERT_TRUE(f.store->apply_updates(keys, old_w, high_old).has_value());
  ASSERT_TRUE(f.store->apply_updates(keys, new_w, low_new).has_value());
  ASSERT_TRUE(f.store->apply_updates(keys, old_w, high_old).has_value());  // late, old incarnation
  lookup_result r;
  ASSERT_TRUE(f.store->lookup(keys, r).has_value());
  EXPECT_EQ(r.versions[0], make_version(2, 1));
  EXPECT_EQ(r.weights[0], 2.0f);
}

TEST(ServingStore, UpdatesOfNewKeysAndDuplicatesInABatch) {
  fixture f;
  const std::vector<uint64_t> keys = {5, 5, 1000};
  std::vector<float> w(3 * dim);
  std::fill_n(w.begin(), dim, 1.0f);
  std::fill_n(w.begin() + dim, dim, 3.0f);
  std::fill_n(w.begin() + 2 * dim, dim, 4.0f);
  const std::vector<uint64_t> versions = {make_version(1, 2), make_version(1, 7),
                                          make_version(1, 999)};
  ASSERT_TRUE(f.store->apply_updates(keys, w, versions).has_value());
  lookup_result r;
  ASSERT_TRUE(f.store->lookup(keys, r).has_value());
  EXPECT_EQ(r.versions[0], make_version(1, 7));  // the batch's highest copy
  EXPECT_EQ(r.weights[0], 3.0f);
  EXPECT_EQ(r.versions[2], make_version(1, 999));
  EXPECT_EQ(r.weights[2 * dim], 4.0f);
  // A malformed update names the table and sizes.
  auto bad = f.store->apply_updates(keys, std::span<const float>(w).first(5), versions);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.err().message().find("'ads'"), std::string::npos);
}

TEST(ServingStore, RefusesACheckpointOfAnotherTableOrDim) {
  testing::temp_dir dir;
  testing::write_test_checkpoint(dir.path() / "ckpt", "clicks", dim, 10, 1);
  serving_store_config c;
  c.table = "ads";
  c.dim = dim;
  c.lmdb_path = dir.path() / "serving";
  auto store = serving_store::open(
      c, std::make_unique<cpu_cache>(row_layout{dim, optimizer_kind::sgd, false},
                                     cache_geometry{4, 1}));
  ASSERT_TRUE(store.has_value());
  auto loaded = (*store)->load_checkpoint(dir.path() / "ckpt");
  ASSERT_FALSE(loaded.has_value());
  EXPECT_NE(loaded.err().message().find("CHECKPOINT: table is 'clicks'"), std::string::npos)
      << loaded.err().message();
}

// Every file under `root` with its size: what must survive a refused open.
std::map<std::string, uintmax_t> tree_of(const std::filesystem::path& root) {
  std::map<std::string, uintmax_t> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root))
    out[std::filesystem::relative(e.path(), root).string()] =
        e.is_regular_file() ? e.file_size() : 0;
  return out;
}

expected<std::unique_ptr<serving_store>> open_at(const std::filesystem::path& lmdb_path) {
  serving_store_config c;
  c.table = "ads";
  c.dim = dim;
  c.partitions = 64;
  c.lmdb_path = lmdb_path;
  return serving_store::open(
      c, std::make_unique<cpu_cache>(row_layout{dim, optimizer_kind::sgd, false},
                                     cache_geometry{4, 1}));
}

// Issue 16 item 5: a serving.lmdb_path naming the shards' ssd_path, a
// shard's environment or the checkpoint root used to be removed whole.
TEST(ServingStore, RefusesADirectoryThatHoldsAnythingButItsOwnFiles) {
  testing::temp_dir dir;
  // The shards' ssd_path: a real shard environment and a stray file.
  const auto ssd = dir.path() / "ssd";
  {
    lmdb_tier_config lc;
    lc.directory = ssd / "shard-0";
    lc.table = "ads";
    lc.partitions = 64;
    lc.map_bytes = size_t{1} << 30;
    auto tier = lmdb_tier::open(row_layout{dim, optimizer_kind::adagrad, true}, lc);
    ASSERT_TRUE(tier.has_value()) << tier.err().to_string();
  }
  { std::ofstream(ssd / "notes.txt") << "keep me\n"; }
  // A checkpoint root with one checkpoint and a stray file.
  const auto root = dir.path() / "checkpoints";
  testing::write_test_checkpoint(root / "ckpt-000000000001", "ads", dim, 50, 2);
  { std::ofstream(root / "README") << "keep me\n"; }

  struct refused_case {
    std::filesystem::path path;
    std::string looks_like;
  };
  for (const auto& [path, looks_like] :
       {refused_case{ssd, "the shards' ssd_path"}, refused_case{ssd / "shard-0", "a shard's"},
        refused_case{root, "a checkpoint root"},
        refused_case{root / "ckpt-000000000001", "a checkpoint"}}) {
    const auto before_ssd = tree_of(ssd);
    const auto before_root = tree_of(root);
    auto store = open_at(path);
    ASSERT_FALSE(store.has_value()) << path;
    const std::string msg = store.err().message();
    EXPECT_NE(msg.find(path.string() + ": serving lmdb_path holds files"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(looks_like), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing was removed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("new or empty directory"), std::string::npos) << msg;
    EXPECT_EQ(tree_of(ssd), before_ssd) << path;
    EXPECT_EQ(tree_of(root), before_root) << path;
  }
  // The checkpoint is still whole: a store elsewhere loads it.
  auto store = open_at(dir.path() / "serving");
  ASSERT_TRUE(store.has_value()) << store.err().to_string();
  auto loaded = (*store)->load_checkpoint(root / "ckpt-000000000001");
  EXPECT_TRUE(loaded.has_value()) << (loaded ? "" : loaded.err().to_string());

  // A plain file is refused too.
  { std::ofstream(dir.path() / "file") << "x"; }
  auto on_file = open_at(dir.path() / "file");
  ASSERT_FALSE(on_file.has_value());
  EXPECT_NE(on_file.err().message().find("is not a directory"), std::string::npos);
}

TEST(ServingStore, ReopensItsOwnDirectoryEmptyAndAcceptsAnEmptyOne) {
  testing::temp_dir dir;
  testing::write_test_checkpoint(dir.path() / "ckpt", "ads", dim, 50, 1);
  {
    auto store = open_at(dir.path() / "serving");
    ASSERT_TRUE(store.has_value()) << store.err().to_string();
    ASSERT_TRUE((*store)->load_checkpoint(dir.path() / "ckpt").has_value());
    EXPECT_EQ((*store)->stats().loaded_rows, 50u);
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "serving" / serving_marker_name));
  {
    // The second start finds only its own files and starts empty again.
    auto store = open_at(dir.path() / "serving");
    ASSERT_TRUE(store.has_value()) << store.err().to_string();
    auto v = (*store)->version_of(1000);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*v, 0u);
  }
  std::filesystem::create_directories(dir.path() / "empty");
  EXPECT_TRUE(open_at(dir.path() / "empty").has_value());
}

// Lookups whose misses go down to LMDB, more at once than the store has
// read handles: the surplus waits for a handle (counted), the store holds
// no more handles than allowed (it never closes one), and every row is
// still the checkpoint's.
TEST(ServingStore, MissesBeyondTheReadHandlesWaitForOne) {
  serving_store_config c;
  c.lmdb_read_handles = 1;
  c.async_insert_hit_rate = 0.0;   // inserts queued: lookups hold the store shared
  fixture f(c, /*cache_sets=*/1);  // 32 cache slots, 100 DRAM rows, 600 in LMDB
  std::vector<uint64_t> stored;
  for (const auto& [k, w] : f.rows.weights) stored.push_back(k);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::atomic<uint64_t> failed{0}, lookups{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint64_t> keys(64);
      lookup_result r;
      // Bounded in time and rounds; the queued cache inserts are drained
      // as they grow.
      for (int round = 0; round < 5000 && std::chrono::steady_clock::now() < give_up; ++round) {
        if (t == 0 && round % 16 == 0) (void)f.store->insert_pending();
        for (auto& k : keys) k = stored[rng() % stored.size()];
        if (!f.store->lookup(keys, r)) ++failed;
        f.expect_rows(keys, r, 0.0f);
        ++lookups;
        if (round >= 20 && f.store->stats().lmdb_read_waits > 0) break;
      }
    });
  for (auto& th : threads) th.join();
  const auto stats = f.store->stats();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_GT(stats.lmdb_read_waits, 0u) << "in " << lookups.load() << " lookups";
  EXPECT_EQ(stats.lmdb_read_handles, 1u);
  EXPECT_GT(stats.lmdb_hits, 0u);
}

// A read handle that cannot be opened (the store's directory was moved
// away and a file put in its place) fails that lookup with an error naming the directory and gives
// its place in the pool back: with one handle allowed, the next lookup (the directory back) opens
// one and answers. Before the place was given back, that lookup would wait for a handle forever.
TEST(ServingStore, AReadHandleThatFailsToOpenIsANamedErrorAndFreesItsPlace) {
  serving_store_config c;
  c.lmdb_read_handles = 1;
  c.async_insert_hit_rate = 0.0;
  fixture f(c);
  std::vector<uint64_t> keys;
  for (const auto& [k, w] : f.rows.weights)
    if (keys.size() < 16) keys.push_back(k);  // never looked up: in LMDB only
  const auto path = f.dir.path() / "serving";
  const auto moved = f.dir.path() / "moved";
  std::filesystem::rename(path, moved);
  std::ofstream(path) << "a file where the store's directory was\n";
  lookup_result r;
  auto failed = f.store->lookup(keys, r);
  ASSERT_FALSE(failed.has_value());
  EXPECT_NE(failed.err().to_string().find(path.string()), std::string::npos)
      << failed.err().to_string();
  ASSERT_EQ(f.store->stats().lmdb_read_handles, 0u) << "the failed handle kept its place";
  std::filesystem::remove(path);
  std::filesystem::rename(moved, path);
  auto ok = f.store->lookup(keys, r);
  ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
  f.expect_rows(keys, r, 0.0f);
  EXPECT_EQ(f.store->stats().lmdb_read_handles, 1u);
}

TEST(ServingStore, ReadHandlesOutsideTheirRangeAreRefusedNamed) {
  for (uint32_t handles : {0u, max_lmdb_read_handles + 1}) {
    testing::temp_dir dir;
    serving_store_config c;
    c.table = "ads";
    c.dim = dim;
    c.lmdb_path = dir.path() / "serving";
    c.lmdb_read_handles = handles;
    const row_layout layout{dim, optimizer_kind::sgd, false};
    auto store = serving_store::open(c, std::make_unique<cpu_cache>(layout, cache_geometry{4, 1}));
    ASSERT_FALSE(store.has_value());
    EXPECT_NE(store.err().to_string().find("lmdb_read_handles is " + std::to_string(handles) +
                                           ", must be 1 to 100"),
              std::string::npos)
        << store.err().to_string();
  }
}

}  // namespace
}  // namespace strata::serving
