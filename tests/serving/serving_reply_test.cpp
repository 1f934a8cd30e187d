// A serving node's lookup replies as they leave the server: the rows frame
// of a binary lookup is byte for byte the rows the store holds, whichever
// tier (cache, DRAM, LMDB, none: the default row) each key came from, now
// that the store writes each row straight into the reply's payload;
// lookups running while updates are applied, over the service and over
// TCP, only ever see whole rows of one version; and lookups of one table
// that the cache answers run side by side, never beside another call into
// the cache, and never at all with a backend that does not allow it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>

#include "client/client.hpp"
#include "client/frame_socket.hpp"
#include "client/wire.hpp"
#include "serving/binary_server.hpp"
#include "serving/service.hpp"
#include "serving/serving_store.hpp"
#include "tests/serving/serving_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::serving {
namespace {

// The rows frame's payload the wire format says `keys` must get: dim, n,
// the versions, then the weights (the default row, version 0, for a key
// the checkpoint lacks).
std::vector<std::byte> expected_payload(const testing::checkpoint_rows& rows,
                                        std::span<const uint64_t> keys) {
  std::vector<uint64_t> versions;
  std::vector<float> weights;
  for (uint64_t k : keys) {
    auto it = rows.weights.find(k);
    versions.push_back(it == rows.weights.end() ? 0 : rows.versions.at(k));
    if (it == rows.weights.end())
      weights.insert(weights.end(), rows.dim, 0.0f);
    else
      weights.insert(weights.end(), it->second.begin(), it->second.end());
  }
  std::vector<std::byte> out;
  wire::encode_rows(out, rows.dim, versions, weights);
  return out;
}

// Sends one lookup frame and returns the reply frame as it arrived.
wire::frame raw_lookup(wire::frame_socket& socket, uint64_t id, std::span<const uint64_t> keys) {
  std::vector<std::byte> payload;
  wire::encode(payload, wire::key_request{"ads", {keys.begin(), keys.end()}});
  EXPECT_TRUE(socket.send(wire::frame_type::lookup, id, payload).has_value());
  auto reply = socket.receive();
  EXPECT_TRUE(reply.has_value()) << (reply ? "" : reply.err().to_string());
  return reply ? std::move(*reply) : wire::frame{};
}

// dim 33: rows of 132 bytes, so a row written off by a record (148 bytes
// apart in the store's records) or by its 16-byte meta shows in the bytes.
TEST(ServingReply, BinaryLookupIsTheStoredRowsBitForBitAcrossTiers) {
  constexpr uint32_t dim = 33;
  testing::served_test_table t(dim, 2000);  // cache 256 rows, DRAM 500, LMDB all
  auto socket = wire::frame_socket::connect({"127.0.0.1", t.binary->port()});
  ASSERT_TRUE(socket.has_value()) << socket.err().to_string();
  const auto& keys = t.rows.keys;
  // 400 keys pass through DRAM (they all stay: 500 rows) and the cache
  // (256 slots: some are evicted again); the 32 after them sit in the cache.
  std::vector<uint64_t> warm(keys.begin(), keys.begin() + 400);
  std::vector<uint64_t> hot(keys.begin() + 400, keys.begin() + 432);
  (void)raw_lookup(*socket, 1, warm);
  (void)raw_lookup(*socket, 2, hot);
  std::vector<uint64_t> asked(warm.begin(), warm.end());
  asked.insert(asked.end(), hot.begin(), hot.end());
  asked.insert(asked.end(), keys.begin() + 1500, keys.begin() + 1600);  // only in LMDB
  asked.insert(asked.end(), {7, 1001, ~uint64_t{0}});                    // stored nowhere
  asked.insert(asked.end(), {keys[3], keys[1550], keys[3], 7});          // repeated
  std::shuffle(asked.begin(), asked.end(), std::mt19937_64(18));
  const auto before = t.service->stats().at("ads");
  const auto reply = raw_lookup(*socket, 3, asked);
  const auto after = t.service->stats().at("ads");
  EXPECT_GT(after.cache_hits, before.cache_hits);
  EXPECT_GT(after.dram_hits, before.dram_hits);
  EXPECT_GT(after.lmdb_hits, before.lmdb_hits);
  EXPECT_GT(after.defaults, before.defaults);
  EXPECT_EQ(reply.header.type, wire::frame_type::rows);
  EXPECT_EQ(reply.header.request, 3u);
  const auto want = expected_payload(t.rows, asked);
  ASSERT_EQ(reply.payload.size(), want.size());
  EXPECT_EQ(std::memcmp(reply.payload.data(), want.data(), want.size()), 0);
  // An empty lookup is a rows frame of dim and n = 0.
  const auto empty = raw_lookup(*socket, 4, {});
  EXPECT_EQ(empty.payload, expected_payload(t.rows, {}));
}

// Table "ads" of `dim` in `dir`, with a DRAM tier of 64 rows.
serving_store_config small_store_config(const testing::temp_dir& dir, uint32_t dim) {
  serving_store_config c;
  c.table = "ads";
  c.dim = dim;
  c.partitions = 64;
  c.lmdb_path = dir.path() / "serving";
  const row_layout layout{dim, optimizer_kind::sgd, false};
  c.dram_bytes = dram_tier::budget_for_rows(layout, eviction_policy::lru, 64);
  return c;
}

// Every element of key k's row at version v.
float value_of(uint64_t key, uint64_t version) { return float(key * 4096 + version % 4096); }

// A whole row of one version: every weight is value_of(key, version).
// Returns the first element that is not (dim if none).
uint32_t first_torn(const float* weights, uint32_t dim, uint64_t key, uint64_t version) {
  for (uint32_t d = 0; d < dim; ++d)
    if (weights[d] != value_of(key, version)) return d;
  return dim;
}

// Lookups (encoded and split, through the service; and over TCP, where
// the reply is checksummed and sent after the table's lock is released) while an update stream rewrites every row, resident in the
// cache and in DRAM, again and again: each row read is one version's.
// Without the table's lock this reads rows mid-update (or crashes the
// cache's slots).
TEST(ServingConcurrency, LookupsDuringUpdatesNeverSeeATornRow) {
  constexpr uint32_t dim = 256;  // 1 KiB rows: a copy long enough to be overtaken
  constexpr uint64_t key_count = 96;
  testing::temp_dir dir;
  serving_store_config c = small_store_config(dir, dim);
  const row_layout layout{dim, optimizer_kind::sgd, false};
  auto store = serving_store::open(c, std::make_unique<cpu_cache>(layout, cache_geometry{2, 1}));
  ASSERT_TRUE(store.has_value()) << store.err().to_string();
  serving_service service({4096});
  service.add_table(std::move(*store));
  binary_server server(service);
  ASSERT_TRUE(server.start("127.0.0.1", 0).has_value());

  std::vector<uint64_t> keys(key_count);
  for (uint64_t i = 0; i < key_count; ++i) keys[i] = 1 + i;
  auto write_version = [&](uint64_t v) {
    std::vector<float> weights(key_count * dim);
    for (uint64_t i = 0; i < key_count; ++i)
      std::fill_n(weights.begin() + i * dim, dim, value_of(keys[i], v));
    return service.apply_updates("ads", keys, weights, std::vector<uint64_t>(key_count, v));
  };
  ASSERT_TRUE(write_version(1).has_value());

  constexpr uint64_t last_version = 400;
  std::atomic<bool> updates_done{false};
  std::atomic<uint64_t> rows_checked{0}, torn{0};
  auto check = [&](uint64_t key, uint64_t version, const float* weights) {
    ++rows_checked;
    if (version == 0 || first_torn(weights, dim, key, version) != dim) ++torn;
  };
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      lookup_result rows;
      rows.encoded = r == 0;
      for (uint64_t round = 0; !updates_done || round < 50; ++round) {
        std::vector<uint64_t> asked(1 + rng() % 64);
        for (auto& k : asked) k = keys[rng() % key_count];
        ASSERT_TRUE(service.lookup("ads", asked, rows).has_value());
        service.finish_request();
        ASSERT_EQ(rows.size(), asked.size());
        for (size_t i = 0; i < asked.size(); ++i)
          check(asked[i], rows.version(i), rows.row_weights(i));
      }
    });
  readers.emplace_back([&] {
    auto client = client::serving_client::connect({{{"127.0.0.1", server.port()}}});
    ASSERT_TRUE(client.has_value()) << client.err().to_string();
    std::mt19937_64 rng(7);
    client::rows rows;
    for (uint64_t round = 0; !updates_done || round < 50; ++round) {
      std::vector<uint64_t> asked(1 + rng() % 64);
      for (auto& k : asked) k = keys[rng() % key_count];
      ASSERT_TRUE(client->lookup_into("ads", asked, rows).has_value());
      ASSERT_EQ(rows.versions.size(), asked.size());
      for (size_t i = 0; i < asked.size(); ++i)
        check(asked[i], rows.versions[i], rows.weights.data() + i * dim);
    }
  });
  uint64_t applied = 1;
  for (uint64_t v = 2; v <= last_version; ++v) {
    if (auto ok = write_version(v); !ok) {  // fail, but join the readers first
      ADD_FAILURE() << "update to version " << v << ": " << ok.err().to_string();
      break;
    }
    applied = v;
  }
  updates_done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(applied, last_version);
  EXPECT_GT(rows_checked.load(), 0u);
  EXPECT_EQ(torn.load(), 0u) << "of " << rows_checked.load() << " rows read";
  // The last version is what every key now reads.
  lookup_result final_rows;
  ASSERT_TRUE(service.lookup("ads", keys, final_rows).has_value());
  for (size_t i = 0; i < key_count; ++i) {
    EXPECT_EQ(final_rows.versions[i], last_version);
    EXPECT_EQ(first_torn(final_rows.row_weights(i), dim, keys[i], last_version), dim);
  }
  server.stop();
}

// A cpu_cache that watches its callers: how many calls are inside at once
// (queries and the rest apart), and optionally holds a query until a
// second one is inside too (or a deadline passes), so a test sees whether
// two lookups of one table can overlap at all.
class watched_cache final : public cache_backend {
 public:
  watched_cache(const row_layout& layout, cache_geometry geometry, bool concurrent)
      : inner_(layout, geometry), concurrent_(concurrent) {}

  std::atomic<int> queries_inside{0};
  std::atomic<int> most_queries_inside{0};
  std::atomic<int> overlaps_with_others{0};  // a non-query call beside any other call
  std::atomic<bool> hold_queries{false};
  std::atomic<bool> pair_reached{false};
  // Holds the next query to enter until *flag is true or 10 s pass;
  // released_by_flag says which it was.
  std::atomic<std::atomic<bool>*> hold_next_until{nullptr};
  std::atomic<bool> held_one{false};
  std::atomic<bool> released_by_flag{false};

  memory_kind memory() const override { return inner_.memory(); }
  const row_layout& layout() const override { return inner_.layout(); }
  const cache_geometry& geometry() const override { return inner_.geometry(); }
  size_t size() const override { return inner_.size(); }
  bool concurrent_queries() const override { return concurrent_; }

  void query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
             memory_span<uint32_t> miss_indices, cache_counts& counts,
             cache_completion done) override {
    as_query([&] { inner_.query(keys, rows, miss_indices, counts, std::move(done)); });
  }
  void query_weights(memory_span<const uint64_t> keys, memory_span<std::byte> versions,
                     memory_span<std::byte> weights, memory_span<uint32_t> miss_indices,
                     cache_counts& counts, cache_completion done) override {
    as_query([&] {
      inner_.query_weights(keys, versions, weights, miss_indices, counts, std::move(done));
    });
  }
  void insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows, bool dirty,
              memory_span<uint64_t> evicted_keys, memory_span<std::byte> evicted_rows,
              cache_counts& counts, cache_completion done) override {
    alone([&] {
      inner_.insert(keys, rows, dirty, evicted_keys, evicted_rows, counts, std::move(done));
    });
  }
  void update(memory_span<const uint64_t> keys, memory_span<const float> grads,
              const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
              cache_counts& counts, cache_completion done) override {
    alone([&] { inner_.update(keys, grads, optimizer, miss_indices, counts, std::move(done)); });
  }
  void dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out, bool include_clean,
            bool clear_dirty, cache_counts& counts, cache_completion done) override {
    alone([&] {
      inner_.dump(keys_out, rows_out, include_clean, clear_dirty, counts, std::move(done));
    });
  }
  void clear() override {
    alone([&] { inner_.clear(); });
  }

 private:
  template <class Fn>
  void as_query(Fn&& fn) {
    ++calls_inside_;
    if (others_inside_ > 0) ++overlaps_with_others;
    const int now = ++queries_inside;
    int most = most_queries_inside.load();
    while (now > most && !most_queries_inside.compare_exchange_weak(most, now)) {
    }
    if (now >= 2) pair_reached = true;
    if (std::atomic<bool>* flag = hold_next_until.exchange(nullptr)) {
      held_one = true;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!flag->load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      released_by_flag = flag->load();
    }
    if (hold_queries) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!pair_reached && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    }
    fn();
    --queries_inside;
    --calls_inside_;
  }
  template <class Fn>
  void alone(Fn&& fn) {
    ++others_inside_;
    if (++calls_inside_ != 1) ++overlaps_with_others;
    fn();
    --calls_inside_;
    --others_inside_;
  }

  cpu_cache inner_;
  bool concurrent_;
  std::atomic<int> calls_inside_{0};
  std::atomic<int> others_inside_{0};  // calls other than queries
};

struct watched_store {
  testing::temp_dir dir;
  watched_cache* cache = nullptr;
  serving_service service{{4096}};
  std::vector<uint64_t> keys;
  static constexpr uint32_t dim = 16;

  // `rows` keys written by an update; a cache of `cache_sets` sets of 32.
  watched_store(bool concurrent, uint64_t rows, uint32_t cache_sets,
                double async_insert_hit_rate = serving_store_config{}.async_insert_hit_rate) {
    serving_store_config c = small_store_config(dir, dim);
    c.async_insert_hit_rate = async_insert_hit_rate;
    const row_layout layout{dim, optimizer_kind::sgd, false};
    auto owned = std::make_unique<watched_cache>(layout, cache_geometry{cache_sets, 1}, concurrent);
    cache = owned.get();
    auto store = serving_store::open(c, std::move(owned));
    if (!store) throw std::runtime_error(store.err().to_string());
    service.add_table(std::move(*store));
    keys.resize(rows);
    for (uint64_t i = 0; i < rows; ++i) keys[i] = 1 + i;
    std::vector<float> weights(rows * dim);
    for (uint64_t i = 0; i < rows; ++i)
      std::fill_n(weights.begin() + i * dim, dim, value_of(keys[i], 1));
    auto ok = service.apply_updates("ads", keys, weights, std::vector<uint64_t>(rows, 1));
    if (!ok) throw std::runtime_error(ok.err().to_string());
  }
};

// Two lookups that the cache answers in full are inside the cache at the
// same time: each holds its query until the other's is inside too. With
// the store locked around whole lookups (before), the second waited for
// the first, the pair was never reached, and each waited out the 5 s.
TEST(ServingConcurrency, LookupsThatHitRunSideBySide) {
  watched_store t(true, 64, 8);  // 256 slots: every key stays resident
  lookup_result warm;
  ASSERT_TRUE(t.service.lookup("ads", t.keys, warm).has_value());  // fetched and inserted
  t.cache->hold_queries = true;
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&, r] {
      lookup_result rows;
      rows.encoded = r == 0;
      if (!t.service.lookup("ads", t.keys, rows)) ++wrong;
      for (size_t i = 0; i < t.keys.size(); ++i)
        if (rows.version(i) != 1 || first_torn(rows.row_weights(i), t.dim, t.keys[i], 1) != t.dim)
          ++wrong;
    });
  for (auto& th : readers) th.join();
  EXPECT_TRUE(t.cache->pair_reached.load());
  EXPECT_EQ(t.cache->most_queries_inside.load(), 2);
  EXPECT_EQ(wrong.load(), 0);
  const auto stats = t.service.stats().at("ads");
  EXPECT_EQ(stats.lookups, 3u);
  EXPECT_EQ(stats.cache_hits, 2 * t.keys.size());
}

// A lookup whose misses go down to LMDB completes while another lookup of
// the table is inside the cache's query (so holding the store's lock
// shared). Before, a lookup took the store exclusively for its misses: it
// waited for the held query, which waited for it, until the hold ran out.
TEST(ServingConcurrency, ALookupThatMissesRunsBesideALookupInTheCache) {
  // 256 cache slots, DRAM for 64 rows; inserts always queued (a synchronous
  // one takes the store exclusively, by design).
  watched_store t(true, 200, 8, /*async_insert_hit_rate=*/0.0);
  const std::vector<uint64_t> hot(t.keys.begin(), t.keys.begin() + 32);
  lookup_result warm;
  ASSERT_TRUE(t.service.lookup("ads", hot, warm).has_value());
  t.service.finish_request();  // the queued rows go into the cache
  std::atomic<bool> cold_done{false};
  t.cache->hold_next_until = &cold_done;
  std::atomic<int> wrong{0};
  std::thread holder([&] {
    lookup_result rows;
    if (!t.service.lookup("ads", hot, rows)) ++wrong;
    for (size_t i = 0; i < hot.size(); ++i)
      if (rows.version(i) != 1 || first_torn(rows.row_weights(i), t.dim, hot[i], 1) != t.dim)
        ++wrong;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!t.cache->held_one && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(t.cache->held_one.load()) << "the holding lookup never reached the cache";
  const std::vector<uint64_t> cold(t.keys.begin() + 100, t.keys.end());  // never read: LMDB
  lookup_result rows;
  rows.encoded = true;
  const auto before = t.service.stats().at("ads");
  ASSERT_TRUE(t.service.lookup("ads", cold, rows).has_value());
  cold_done = true;
  holder.join();
  EXPECT_TRUE(t.cache->released_by_flag.load())
      << "the lookup with misses waited for the one inside the cache";
  EXPECT_EQ(wrong.load(), 0);
  for (size_t i = 0; i < cold.size(); ++i) {
    EXPECT_EQ(rows.version(i), 1u) << "key " << cold[i];
    EXPECT_EQ(first_torn(rows.row_weights(i), t.dim, cold[i], 1), t.dim) << "key " << cold[i];
  }
  const auto after = t.service.stats().at("ads");
  EXPECT_EQ(after.lmdb_hits - before.lmdb_hits, cold.size());
}

// Lookups with misses (inserting into the cache), updates and queued
// inserts from several threads: no insert, update or dump ever runs beside
// another call into the cache; a backend that does not allow concurrent
// queries (the CUDA one) never sees two calls at once; every row read is
// whole and of a version that was written.
void hammer(bool concurrent) {
  watched_store t(concurrent, 300, 2);  // 64 slots for 300 keys: most lookups miss
  std::atomic<bool> done{false};
  std::atomic<uint64_t> rows_read{0}, bad{0}, went_back{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      std::unordered_map<uint64_t, uint64_t> newest_seen;  // a row never goes back
      lookup_result rows;
      rows.encoded = r % 2 == 0;
      for (int round = 0; !done || round < 100; ++round) {
        std::vector<uint64_t> asked(1 + rng() % 48);
        for (auto& k : asked) k = t.keys[rng() % (round % 3 == 0 ? t.keys.size() : 40)];
        if (!t.service.lookup("ads", asked, rows)) ++bad;
        t.service.finish_request();
        for (size_t i = 0; i < asked.size(); ++i, ++rows_read) {
          if (rows.version(i) == 0 ||
              first_torn(rows.row_weights(i), t.dim, asked[i], rows.version(i)) != t.dim)
            ++bad;
          uint64_t& newest = newest_seen[asked[i]];
          if (rows.version(i) < newest) ++went_back;
          newest = std::max(newest, rows.version(i));
        }
      }
    });
  for (uint64_t v = 2; v <= 60; ++v) {
    std::vector<float> weights(t.keys.size() * t.dim);
    for (size_t i = 0; i < t.keys.size(); ++i)
      std::fill_n(weights.begin() + i * t.dim, t.dim, value_of(t.keys[i], v));
    if (!t.service.apply_updates("ads", t.keys, weights, std::vector<uint64_t>(t.keys.size(), v)))
      ++bad;
  }
  done = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0u) << "of " << rows_read.load() << " rows read";
  EXPECT_EQ(went_back.load(), 0u) << "rows read older than one read before them";
  EXPECT_GT(rows_read.load(), 0u);
  EXPECT_EQ(t.cache->overlaps_with_others.load(), 0);
  if (!concurrent) {
    EXPECT_EQ(t.cache->most_queries_inside.load(), 1);
  }
}

// Updates get in while lookups hold the table's lock shared without a gap:
// four threads whose lookups all miss down to LMDB, their holds
// overlapping. With std::shared_mutex (glibc's rwlock, which lets new
// readers in while a writer waits) the first update waited for a moment
// with no reader, which never came, until the readers gave up.
TEST(ServingConcurrency, UpdatesGetInWhileLookupsOverlap) {
  watched_store t(true, 4000, 2, /*async_insert_hit_rate=*/0.0);  // 64 cache slots
  constexpr uint64_t updates = 10;
  std::atomic<bool> updates_done{false};
  std::atomic<int> running{0};
  std::atomic<uint64_t> lookups_after_done{0};
  // Queued inserts grow while an update is kept out: bound the wait.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r)
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      lookup_result rows;
      std::vector<uint64_t> asked(64);
      ++running;
      while (std::chrono::steady_clock::now() < give_up) {
        for (auto& k : asked) k = t.keys[rng() % t.keys.size()];
        (void)t.service.lookup("ads", asked, rows);
        if (updates_done && ++lookups_after_done > 64) break;
      }
    });
  while (running < 4) std::this_thread::yield();
  uint64_t applied = 0;
  for (uint64_t v = 2; v < 2 + updates; ++v) {
    const std::vector<float> weights(t.dim, value_of(t.keys[0], v));
    if (t.service.apply_updates("ads", std::vector<uint64_t>{t.keys[0]}, weights,
                                std::vector<uint64_t>{v}))
      ++applied;
    if (std::chrono::steady_clock::now() >= give_up) break;
  }
  const bool in_time = std::chrono::steady_clock::now() < give_up;
  updates_done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(applied, updates);
  EXPECT_TRUE(in_time) << "the updates were kept out while the lookups ran";
  const auto stats = t.service.stats().at("ads");
  EXPECT_EQ(stats.updates_applied, t.keys.size() + updates);
}

TEST(ServingConcurrency, ConcurrentQueriesNeverOverlapAnotherCacheCall) { hammer(true); }
TEST(ServingConcurrency, ABackendWithoutConcurrentQueriesIsCalledOneAtATime) { hammer(false); }

}  // namespace
}  // namespace strata::serving
