// The exact-sum check of real-process tests (crash recovery, multi-node):
// with model.objective: count (SGD, learning rate 1, zeros) every key's
// weights equal the number of its sightings in the batches before each
// worker's recorded position. Reads the checkpoint's shard environments and
// recomputes the sums with a parser and split of its own (below).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "actors/checkpoint.hpp"
#include "deploy/manifest.hpp"
#include "model/features.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata {

// The expected sums, computed independently of the product's readers and
// data split, so that a reader or split bug that drops or repeats lines
// shows (the product's own code would drop them consistently on both
// sides). The rules, written out here a second time from docs/model.md:
// the training window is the first `train` data lines (data.train_examples,
// else every line less floor(lines x data.heldout_fraction)); worker w reads
// lines w, w + W, w + 2W, ... of it (W workers); its batch b is its next
// batch_size lines, so `positions[w]` batches are its first positions[w] x
// batch_size lines. A Criteo TSV line is a label, 13 integer columns
// (log2-bucketed keys) and 26 categorical ones; an empty column has no key.
// Only the key hashes come from the product (model/features.hpp, pinned by
// golden vectors in features_test).
inline std::vector<std::string> oracle_lines(const std::filesystem::path& data) {
  std::vector<std::string> lines;
  std::ifstream in(data, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << data;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline void oracle_add_line_keys(const std::string& line, std::map<uint64_t, float>& counts) {
  std::vector<std::string> cols;
  size_t from = 0;
  for (;;) {
    const size_t tab = line.find('\t', from);
    cols.push_back(line.substr(from, tab == std::string::npos ? std::string::npos : tab - from));
    if (tab == std::string::npos) break;
    from = tab + 1;
  }
  ASSERT_EQ(cols.size(), 40u) << "not a Criteo TSV line: " << line;
  for (uint32_t i = 0; i < 13; ++i) {
    if (cols[1 + i].empty()) continue;
    counts[model::integer_key(i, std::stoll(cols[1 + i]))] += 1.0f;
  }
  for (uint32_t c = 0; c < 26; ++c) {
    if (cols[14 + c].empty()) continue;
    counts[model::categorical_key(13 + c, cols[14 + c])] += 1.0f;
  }
}

// key -> sightings in the first positions[w] batches of every worker w.
inline std::map<uint64_t, float> expected_counts(const std::filesystem::path& manifest,
                                                 const std::vector<uint64_t>& positions) {
  std::map<uint64_t, float> counts;
  auto m = deploy::load_manifest(manifest);
  EXPECT_TRUE(m) << m.err().to_string();
  if (!m) return counts;
  EXPECT_EQ(m->data.format, model::data_format::criteo_tsv)
      << "the oracle reads Criteo TSV only";
  const auto lines = oracle_lines(m->data.path);
  const uint64_t n = lines.size();
  const uint64_t train =
      m->split.train_examples != 0
          ? m->split.train_examples
          : n - static_cast<uint64_t>(std::floor(static_cast<double>(n) *
                                                 m->split.heldout_fraction));
  const uint64_t workers = m->cluster.workers.size();
  EXPECT_EQ(positions.size(), workers);
  for (uint64_t w = 0; w < workers && w < positions.size(); ++w) {
    const uint64_t take = positions[w] * m->cluster.workers[w].batch_size;
    uint64_t taken = 0;
    for (uint64_t line = w; line < train && taken < take; line += workers, ++taken)
      oracle_add_line_keys(lines[line], counts);
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
