// Helpers of the checkpoint tests (checkpoint_test.cpp,
// checkpoint_durability_test.cpp): generated CTR data, a small cluster
// whose rows cycle through LMDB, and a checkpoint's rows read back.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "actors/checkpoint.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/worker_actor.hpp"
#include "model/datagen.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {

namespace fs = std::filesystem;

inline constexpr uint64_t train_rows = 12000;
inline constexpr uint64_t heldout_rows = 3000;

inline fs::path generate_data(const fs::path& dir) {
  model::datagen_config gen;
  gen.output = dir / "data.tsv";
  gen.rows = train_rows + heldout_rows;
  gen.distinct_keys = 3000;
  gen.weight_stddev = 1.5;
  gen.seed = 21;
  auto planted = model::generate(gen);
  EXPECT_TRUE(planted) << planted.err().to_string();
  return gen.output;
}

// A small CTR cluster over `data`; shards' LMDB under `state`, checkpoints
// under `checkpoints`. DRAM is small so rows cycle through LMDB.
inline cluster_config small_cluster(const fs::path& data, const fs::path& state,
                             const fs::path& checkpoints, uint32_t shards, uint32_t workers,
                             uint32_t in_flight) {
  cluster_config c;
  c.name = "ckpt";
  c.partitions = 64;
  c.threads = 2;
  c.model.slots = 39;
  c.model.embedding_dim = 4;
  c.model.hidden = {16};
  c.table.name = "ctr";
  c.table.layout = row_layout{c.model.row_dim(), optimizer_kind::adagrad, true};
  c.table.optimizer.kind = optimizer_kind::adagrad;
  c.table.optimizer.learning_rate = 0.05f;
  c.table.optimizer.initial_accumulator = 1e-6f;
  c.table.initializer.kind = initializer_kind::normal;
  c.table.initializer.normal_stddev = 0.01f;
  c.table.initializer.seed = 3;
  c.dense.learning_rate = 0.002f;
  shard_config shard;
  shard.dram.capacity_bytes = 96 << 10;
  shard.lmdb.map_bytes = size_t{256} << 20;
  shard.flush_batch_rows = 256;
  add_shards(c, shards, state, shard, "shard-");
  cache_config cache;
  cache.geometry.sets = 16;
  add_caches(c, 1, cache);
  for (uint32_t w = 0; w < workers; ++w) {
    worker_config wc;
    wc.index = w;
    wc.data.path = data;
    wc.data.limit = train_rows / workers;
    wc.data.shard_index = w;
    wc.data.shard_count = workers;
    wc.batch_size = 64;
    wc.max_in_flight = in_flight;
    c.workers.push_back(wc);
  }
  c.heldout.path = data;
  c.heldout.skip = train_rows;
  c.heldout_examples = heldout_rows;
  c.checkpoint.directory = checkpoints;
  c.checkpoint.interval_batches = 25;
  c.checkpoint.keep = 2;
  return c;
}

// Every row of a checkpoint: key -> record (weights, state, meta).
inline std::map<uint64_t, std::vector<std::byte>> checkpoint_rows(
    const fs::path& dir, std::vector<uint32_t>* shard_of = nullptr) {
  std::map<uint64_t, std::vector<std::byte>> rows;
  auto meta = read_checkpoint_meta(dir);
  EXPECT_TRUE(meta) << meta.err().to_string();
  if (!meta) return rows;
  const row_layout layout{meta->dim, meta->optimizer, meta->with_state};
  for (uint32_t s = 0; s < meta->shard_rows.size(); ++s) {
    lmdb_tier_config lc;
    lc.directory = shard_checkpoint_dir(dir, s);
    lc.table = meta->table;
    lc.partitions = meta->partitions;
    lc.read_only = true;
    auto tier = lmdb_tier::open(layout, lc);
    EXPECT_TRUE(tier) << tier.err().to_string();
    if (!tier) continue;
    auto st = (*tier)->dump(
        [&](uint64_t key, const std::byte* r) { rows[key].assign(r, r + layout.record_bytes()); });
    EXPECT_TRUE(st) << st.err().to_string();
  }
  (void)shard_of;
  return rows;
}

inline std::vector<uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// key -> sightings in the batches before each worker's position, replayed
// with the workers' own reader.
inline std::map<uint64_t, float> sightings(const cluster_config& c,
                                    const std::vector<uint64_t>& positions) {
  std::map<uint64_t, float> counts;
  for (size_t w = 0; w < c.workers.size(); ++w) {
    auto source = open_reader_source(c.workers[w]);
    EXPECT_TRUE(source) << source.err().to_string();
    if (!source) continue;
    for (uint64_t b = 0; b < positions.at(w); ++b) {
      auto batch = (*source)->next(c.workers[w].batch_size);
      if (!batch || batch->examples.empty()) break;
      for (uint64_t k : batch->keys()) counts[k] += 1.0f;
    }
  }
  return counts;
}

// The count objective in one process: every weight is its key's sightings.
inline cluster_config count_cluster(const fs::path& data, const fs::path& dir,
                                    training_mode mode) {
  auto c = small_cluster(data, dir / "state", dir / "ckpt", 2, 2, 2);
  c.mode = mode;
  c.pass_batches = 10;
  c.gradients = gradient_kind::count;
  c.table.optimizer = optimizer_config{};
  c.table.optimizer.kind = optimizer_kind::sgd;
  c.table.optimizer.learning_rate = 1.0f;
  c.table.initializer.kind = initializer_kind::zeros;
  c.table.layout = row_layout{c.model.row_dim(), optimizer_kind::sgd, true};
  for (auto& s : c.shards) s.table = c.table;
  for (auto& cc : c.caches) cc.table = c.table;
  c.checkpoint.interval_batches = 10;
  c.checkpoint.keep = 1000;
  c.heldout = model::reader_config{};
  return c;
}

}  // namespace strata::actors
