// `strata datagen`: synthetic Criteo-layout data (raw TSV: label, 13
// integers, 26 categorical hex) drawn from a planted model, so that a
// trained model can be judged against the best achievable.
//
// Keys per categorical slot follow a power law (Zipf, exponent `zipf`)
// over `distinct_keys` values in all; integer features are drawn from
// per-example log-normal noise. The planted model is logistic: each
// categorical value has a hidden weight (normal, stddev `weight_stddev`),
// the logit is their sum plus a bias, and the label is Bernoulli(sigmoid).
// The planted model's own AUC and logloss on the generated rows are
// written next to the data (PATH.planted: "auc X\nlogloss Y\n").
// Deterministic in `seed`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

#include "common/error.hpp"

namespace strata::model {

struct datagen_config {
  std::filesystem::path output;
  uint64_t rows = 1000000;
  uint64_t distinct_keys = 1000000;  // across all 26 categorical slots
  double zipf = 1.1;
  double weight_stddev = 0.7;
  double bias = -1.3;  // about 25% positives
  uint64_t seed = 42;
};

struct planted_quality {
  double auc = 0;
  double logloss = 0;
};

// Writes the data and PATH.planted; `progress(rows_done)` is called now and
// then. Errors name the path (full disk, unwritable).
expected<planted_quality> generate(const datagen_config& config,
                                   const std::function<void(uint64_t)>& progress = {});
// Reads PATH.planted.
expected<planted_quality> read_planted(const std::filesystem::path& data);

}  // namespace strata::model
