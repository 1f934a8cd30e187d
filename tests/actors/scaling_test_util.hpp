// The cluster of the scaling and relocation tests (scaling_test,
// relocate_test): the exact-sum test's synthetic batches and integer
// increments on real LMDB environments under eviction pressure, the exact
// sums it must end with, and the rows read back through the current map.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "actors/local_cluster.hpp"
#include "actors/partition_map.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors::scaling_test {

constexpr uint32_t dim = 4;
constexpr uint64_t key_space = 1500;
constexpr uint32_t examples = 6, features = 5;

inline cluster_config scaling_cluster(training_mode mode, const std::filesystem::path& dir,
                                      uint32_t workers, uint32_t max_in_flight,
                                      optimizer_kind opt) {
  cluster_config c;
  c.name = "scaling";
  c.mode = mode;
  c.partitions = 64;
  c.pass_batches = 3;
  c.checkpoint.round_batches = 4;  // cuts often: scales commit during training
  c.table.name = "exact";
  c.table.layout = row_layout{dim, opt, true};
  c.table.optimizer.kind = opt;
  c.table.optimizer.learning_rate = opt == optimizer_kind::sgd ? 1.0f : 0.05f;
  c.table.initializer.kind = initializer_kind::zeros;
  shard_config shard;
  shard.dram.capacity_bytes = 20 << 10;  // a few hundred rows: most rows cycle through LMDB
  shard.lmdb.map_bytes = size_t{64} << 20;
  shard.flush_batch_rows = 16;
  shard.max_flushes_in_flight = 2;
  shard.flush_on_own_thread = false;  // deterministic on the test_coordinator
  add_shards(c, 2, dir, shard);
  cache_config cache;
  cache.geometry.sets = 2;  // 64 rows per cache tier
  cache.staleness = 4;
  add_caches(c, 2, cache);
  for (uint32_t w = 0; w < workers; ++w) {
    worker_config wc;
    wc.index = w;
    wc.batch_size = examples;
    wc.prefetch_depth = 1;
    wc.max_in_flight = max_in_flight;
    c.workers.push_back(wc);
  }
  return c;
}

inline worker_seams seams_for(uint64_t batches, std::shared_ptr<uint64_t> bad_rows) {
  worker_seams seams;
  seams.batches = [batches](const worker_config& wc) -> expected<std::shared_ptr<batch_source>> {
    return std::shared_ptr<batch_source>(
        std::make_shared<synthetic_batches>(wc.index, batches, examples, features, key_space));
  };
  seams.gradients = [bad_rows](const worker_config&) -> std::shared_ptr<gradient_source> {
    return std::make_shared<increment_gradients>(dim, bad_rows);
  };
  seams.initial_dense = std::vector<float>{};
  return seams;
}

inline std::map<uint64_t, std::vector<float>> exact_sums(uint32_t workers, uint64_t batches) {
  std::map<uint64_t, std::vector<float>> sums;
  for (uint32_t w = 0; w < workers; ++w) {
    synthetic_batches source(w, batches, examples, features, key_space);
    for (auto b = source.next(0); !b->examples.empty(); b = source.next(0))
      for (const auto& ex : b->examples)
        for (const auto& f : ex.features) {
          auto& row = sums[f.key];
          row.resize(dim, 0.0f);
          for (uint32_t e = 0; e < dim; ++e) row[e] += increment(f.key, e, f.slot);
        }
  }
  return sums;
}

// Every key's record, read through the shards of the coordinator's current
// map (authoritative after the drain).
inline std::map<uint64_t, std::vector<std::byte>> read_rows(deterministic_system& ds,
                                                            const training_cluster& cluster,
                                                            const std::vector<uint64_t>& keys,
                                                            const row_layout& layout) {
  auto status = ds.call<cluster_status>(cluster.coordinator, map_atom::value);
  const partition_map map(status.routing.epoch, status.routing.owners,
                          static_cast<uint32_t>(status.routing.shards.size()));
  std::map<uint64_t, std::vector<std::byte>> out;
  const auto groups = map.group(keys);
  const size_t rb = layout.record_bytes();
  for (size_t s = 0; s < groups.size(); ++s) {
    std::vector<uint64_t> part;
    for (uint32_t pos : groups[s]) part.push_back(keys[pos]);
    if (part.empty()) continue;
    auto reply = ds.call<pull_reply>(caf::actor_cast<shard_actor>(status.routing.shards[s]),
                                     pull_atom::value, part);
    EXPECT_EQ(reply.rows.records.size(), part.size() * rb);
    if (reply.rows.records.size() != part.size() * rb) continue;
    for (size_t j = 0; j < part.size(); ++j) {
      const auto* rec = reinterpret_cast<const std::byte*>(reply.rows.records.data()) + j * rb;
      out[part[j]].assign(rec, rec + rb);
    }
  }
  return out;
}

// Rows in the LMDB environment of each listed shard directory.
inline uint64_t lmdb_rows(const cluster_config& config, uint32_t shards) {
  uint64_t rows = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    lmdb_tier_config lc = config.shards.front().lmdb;
    lc.directory = lc.directory.parent_path() / ("shard" + std::to_string(s));
    auto tier = lmdb_tier::open(config.table.layout, lc);
    EXPECT_TRUE(tier) << tier.err().to_string();
    if (tier) rows += (*tier)->size();
  }
  return rows;
}

// A one-worker run (max in-flight 1, Adagrad: the order of updates is
// deterministic) of `batches` batches in `mode`; `train(ds, cluster,
// reported, summary)` runs it to the end, scaling or relocating on the way.
// Returns the records of `keys`, read after the run.
template <class Train>
std::map<uint64_t, std::vector<std::byte>> one_worker_rows(training_mode mode, uint64_t batches,
                                                           const std::vector<uint64_t>& keys,
                                                           Train train) {
  strata::testing::temp_dir dir;
  const auto config = scaling_cluster(mode, dir.path(), 1, 1, optimizer_kind::adagrad);
  deterministic_system ds;
  uint64_t reported = 0;
  auto bad_rows = std::make_shared<uint64_t>(0);
  auto cluster =
      spawn_training_cluster(ds.system(), config, seams_for(batches, bad_rows),
                             [&reported](const training_progress& p) { reported = p.batches; });
  EXPECT_TRUE(cluster) << cluster.err().to_string();
  if (!cluster) return {};
  training_summary summary;
  train(ds, *cluster, reported, summary);
  EXPECT_EQ(summary.batches, batches);
  auto rows = read_rows(ds, *cluster, keys, config.table.layout);
  cluster->stop();
  ds.drain_jobs();
  return rows;
}

}  // namespace strata::actors::scaling_test
