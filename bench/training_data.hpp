// Points a benchmark cluster's workers at a Criteo TSV file: worker w of n
// reads every n-th line of the first `train_rows` lines, once, from the
// start. The held-out window is the caller's.
#pragma once

#include <cstdint>
#include <filesystem>

#include "actors/config.hpp"

namespace strata::bench {

inline void split_training_data(actors::cluster_config& config, const std::filesystem::path& data,
                                uint64_t train_rows) {
  const auto workers = static_cast<uint32_t>(config.workers.size());
  for (auto& w : config.workers) {
    w.data.path = data;
    w.data.format = model::data_format::criteo_tsv;
    w.data.shard_index = w.index;
    w.data.shard_count = workers;
    w.data.skip = 0;
    w.data.limit = train_rows / workers;
    w.max_batches = 0;
    w.epochs = 1;
  }
}

}  // namespace strata::bench
