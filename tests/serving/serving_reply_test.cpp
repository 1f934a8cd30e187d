// A serving node's lookup replies as they leave the server: the rows frame
// of a binary lookup is byte for byte the rows the store holds, whichever
// tier (cache, DRAM, LMDB, none: the default row) each key came from, now
// that the store writes each row straight into the reply's payload; and
// lookups running while updates are applied, over the service and over
// TCP, only ever see whole rows of one version.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

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
  serving_store_config c;
  c.table = "ads";
  c.dim = dim;
  c.partitions = 64;
  c.lmdb_path = dir.path() / "serving";
  const row_layout layout{dim, optimizer_kind::sgd, false};
  c.dram_bytes = dram_tier::budget_for_rows(layout, eviction_policy::lru, 64);
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

}  // namespace
}  // namespace strata::serving
