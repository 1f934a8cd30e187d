// One training example as the model sees it: a label and its sparse
// features, each a (slot, key, value) triple. Keys are uint64 feature ids
// (features.hpp hashes raw values with their slot); value weights the
// feature's embedding (1 for categorical features, the libffm value
// otherwise). Plain data, copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::model {

struct feature {
  uint32_t slot = 0;
  uint64_t key = 0;
  float value = 1.0f;
};

struct example {
  float label = 0;  // 0 or 1
  std::vector<feature> features;
};

// A mini-batch: examples plus the flat list of their keys (with
// duplicates, in example order), which is what lookups and pushes carry.
struct batch {
  std::vector<example> examples;
  std::vector<uint64_t> keys() const;
};

}  // namespace strata::model
