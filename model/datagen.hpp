// `strata datagen`: synthetic Criteo-layout data (raw TSV: label, 13
// integers, 26 categorical hex) drawn from a planted model, so that a
// trained model can be judged against the best achievable.
//
// Keys per categorical slot follow a power law (Zipf, exponent `zipf`)
// over `distinct_keys` values in all (distinct_keys / 26 per slot, each an
// 8-hex-digit string); categorical slots 20..25 are empty in 10% of rows.
// Integer features are per-example log-normal noise (no signal), each
// column with its own missing rate. The planted model is logistic: each
// categorical value has a hidden weight, normal with stddev
// weight_stddev / sqrt(26), so that the logit -- their sum plus `bias` --
// spreads with a stddev of about weight_stddev; the label is
// Bernoulli(sigmoid(logit)). With the defaults: ~23% positives, planted
// AUC ~0.68, logloss ~0.51. The planted model's own AUC and logloss on the
// generated rows (AUC over the first 20M) are written next to the data
// (PATH.planted: "auc X\nlogloss Y\n"). Deterministic in `seed`.
// Memory: ~12 bytes per distinct key plus 8 per row (up to 20M rows).
// ~0.5M rows/s on one core.
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
  double bias = -1.3;  // about 23% positives with the defaults
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
