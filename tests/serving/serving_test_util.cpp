#include "tests/serving/serving_test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "actors/checkpoint.hpp"
#include "common/file_manifest.hpp"
#include "common/hash.hpp"
#include "tiers/cpu_cache.hpp"
#include "tiers/dram_tier.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::testing {

namespace fs = std::filesystem;

checkpoint_rows write_test_checkpoint(const fs::path& dir, const std::string& table, uint32_t dim,
                                      uint32_t rows, uint32_t shards, uint16_t incarnation,
                                      uint32_t partitions) {
  checkpoint_rows out;
  out.dim = dim;
  const row_layout layout{dim, optimizer_kind::adagrad, true};
  std::vector<row_buffer> per_shard(shards, row_buffer(layout));
  for (uint32_t i = 0; i < rows; ++i) {
    const uint64_t key = 1000 + uint64_t{3} * i;
    std::byte* r = per_shard[partition_of(key, partitions) % shards].append(key);
    meta_of(r) = row_meta{make_version(incarnation, 1 + i % 50), i % 97, 0};
    std::vector<float> w(dim);
    for (uint32_t d = 0; d < dim; ++d) {
      // Awkward bit patterns (negative zero, subnormal) must survive too.
      w[d] = d == 0 ? -0.0f : (d == 1 ? 1e-40f : float(key) * 0.001f - float(d) * 0.37f);
      weights_of(r)[d] = w[d];
      state_of(layout, r)[d] = 0.5f + float(d);  // Adagrad accumulator: not served
    }
    out.weights[key] = w;
    out.versions[key] = meta_of(r).version;
    out.freqs[key] = i % 97;
    out.keys.push_back(key);
  }
  actors::checkpoint_meta meta;
  meta.cluster = "serving-test";
  meta.epoch = 1;
  meta.incarnation = incarnation;
  meta.table = table;
  meta.dim = dim;
  meta.optimizer = optimizer_kind::adagrad;
  meta.with_state = true;
  meta.partitions = partitions;
  meta.map_epoch = 1;
  for (uint32_t p = 0; p < partitions; ++p) meta.owners.push_back(p % shards);
  fs::create_directories(dir);
  for (uint32_t s = 0; s < shards; ++s) {
    lmdb_tier_config c;
    c.directory = actors::shard_checkpoint_dir(dir, s);
    c.table = table;
    c.partitions = partitions;
    c.map_bytes = size_t{1} << 30;
    c.sync = true;
    auto tier = lmdb_tier::open(layout, c);
    EXPECT_TRUE(tier.has_value()) << (tier ? "" : tier.err().to_string());
    row_buffer spilled(layout);
    auto ok = (*tier)->store(per_shard[s].keys(), per_shard[s].rows(), true, spilled);
    EXPECT_TRUE(ok.has_value());
    meta.shard_rows.push_back(per_shard[s].size());
    // A checkpoint copy has no lock file.
    tier->reset();
    fs::remove(actors::shard_checkpoint_dir(dir, s) / "lock.mdb");
  }
  EXPECT_TRUE(actors::write_checkpoint_meta(dir, meta).has_value());
  EXPECT_TRUE(write_file_manifest(dir).has_value());
  return out;
}

std::string serving_manifest(const std::string& table, uint32_t dim, const fs::path& checkpoint,
                             const fs::path& state_dir, uint32_t partitions,
                             const std::string& serving_extra) {
  std::string m;
  m += "name: serving-test\n";
  m += "partitions: " + std::to_string(partitions) + "\n";
  m += "table:\n  name: " + table + "\n";
  m += "model:\n  embedding_dim: " + std::to_string(dim - 1) + "\n";
  m += "shards:\n  count: 1\n  ssd_path: " + (state_dir / "ssd").string() + "\n";
  m += "data:\n  format: criteo_tsv\n  path: " + (state_dir / "unused.tsv").string() + "\n";
  m += "serving:\n  checkpoint: " + checkpoint.string() + "\n";
  m += "  lmdb_path: " + (state_dir / "serving-lmdb").string() + "\n";
  m += serving_extra;
  return m;
}

std::unique_ptr<serving::serving_store> open_test_store(const fs::path& dir, uint32_t dim) {
  serving::serving_store_config c;
  c.table = "ads";
  c.dim = dim;
  c.partitions = 64;
  c.lmdb_path = dir / "serving";
  c.dram_bytes =
      dram_tier::budget_for_rows({dim, optimizer_kind::sgd, false}, eviction_policy::lru, 500);
  auto store = serving::serving_store::open(
      c, std::make_unique<cpu_cache>(row_layout{dim, optimizer_kind::sgd, false},
                                     cache_geometry{8, 1}));
  EXPECT_TRUE(store.has_value()) << (store ? "" : store.err().to_string());
  if (!store) return nullptr;
  auto loaded = (*store)->load_checkpoint(dir / "ckpt");
  EXPECT_TRUE(loaded.has_value()) << (loaded ? "" : loaded.err().to_string());
  return std::move(*store);
}

served_test_table::served_test_table(uint32_t dim, uint32_t row_count) {
  rows = write_test_checkpoint(dir.path() / "ckpt", "ads", dim, row_count, 2);
  auto store = open_test_store(dir.path(), dim);
  if (!store) throw std::runtime_error("the test store did not open (see above)");
  service = std::make_unique<serving::serving_service>(serving::service_limits{4096});
  service->add_table(std::move(store));
  binary = std::make_unique<serving::binary_server>(*service);
  if (auto ok = binary->start("127.0.0.1", 0); !ok)
    throw std::runtime_error("the binary server did not start: " + ok.err().to_string());
}

}  // namespace strata::testing
