// The exact-sum check of real-process tests (crash recovery, multi-node):
// with model.objective: count (SGD, learning rate 1, zeros) every key's
// weights equal the number of its sightings in the batches before each
// worker's recorded position. Reads the checkpoint's shard environments and
// recomputes the sums with the workers' own readers.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <vector>

#include "actors/checkpoint.hpp"
#include "actors/worker_actor.hpp"
#include "deploy/manifest.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata {

// key -> sightings in the batches before each worker's position, read with
// the workers' own reader over their windows of the data.
inline std::map<uint64_t, float> expected_counts(const std::filesystem::path& manifest,
                                          const std::vector<uint64_t>& positions) {
  std::map<uint64_t, float> counts;
  auto m = deploy::load_manifest(manifest);
  EXPECT_TRUE(m) << m.err().to_string();
  if (!m) return counts;
  auto split = deploy::resolve_data_split(*m);
  EXPECT_TRUE(split) << split.err().to_string();
  EXPECT_EQ(positions.size(), m->cluster.workers.size());
  for (size_t w = 0; w < m->cluster.workers.size() && w < positions.size(); ++w) {
    const auto& wc = m->cluster.workers[w];
    auto source = actors::open_reader_source(wc);
    EXPECT_TRUE(source) << source.err().to_string();
    if (!source) continue;
    for (uint64_t b = 0; b < positions[w]; ++b) {
      auto batch = (*source)->next(wc.batch_size);
      EXPECT_TRUE(batch);
      if (!batch || batch->examples.empty()) break;
      for (uint64_t k : batch->keys()) counts[k] += 1.0f;
    }
  }
  return counts;
}

// Checks a checkpoint against the exact sums at its recorded positions;
// returns its positions.
inline std::vector<uint64_t> check_exact_sums(const std::filesystem::path& manifest, const std::filesystem::path& checkpoint) {
  auto verified = actors::verify_checkpoint(checkpoint);
  EXPECT_TRUE(verified) << verified.err().to_string();
  if (!verified) return {};
  const auto& meta = verified->meta;
  const auto want = expected_counts(manifest, meta.positions);
  std::map<uint64_t, std::vector<float>> have;
  const row_layout layout{meta.dim, meta.optimizer, meta.with_state};
  for (uint32_t s = 0; s < meta.shard_rows.size(); ++s) {
    lmdb_tier_config lc;
    lc.directory = actors::shard_checkpoint_dir(checkpoint, s);
    lc.table = meta.table;
    lc.partitions = meta.partitions;
    lc.read_only = true;
    auto tier = lmdb_tier::open(layout, lc);
    EXPECT_TRUE(tier) << tier.err().to_string();
    if (!tier) return {};
    auto st = (*tier)->dump([&](uint64_t key, const std::byte* r) {
      have[key].assign(weights_of(r), weights_of(r) + layout.dim);
    });
    EXPECT_TRUE(st);
  }
  size_t wrong = 0, missing = 0, extra = 0;
  for (const auto& [key, n] : want) {
    auto it = have.find(key);
    if (it == have.end()) {
      ++missing;
      continue;
    }
    for (float v : it->second)
      if (v != n) ++wrong;
  }
  for (const auto& [key, w] : have)
    if (!want.count(key)) ++extra;
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(wrong, 0u) << checkpoint;
  EXPECT_EQ(missing, 0u) << checkpoint;
  EXPECT_EQ(extra, 0u) << checkpoint;
  return meta.positions;
}

}  // namespace strata
