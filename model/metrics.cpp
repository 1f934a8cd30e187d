#include "model/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/error.hpp"

namespace strata::model {

double auc(std::span<const float> predictions, std::span<const float> labels) {
  STRATA_ASSERT(predictions.size() == labels.size(), "auc: predictions and labels differ in size");
  const size_t n = predictions.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return predictions[a] < predictions[b]; });
  // Mann-Whitney: sum of the positives' ranks, tied predictions sharing
  // their average rank (so a positive-negative tie counts one half).
  double positive_rank_sum = 0;
  uint64_t positives = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    uint64_t group_positives = 0;
    while (j < n && predictions[order[j]] == predictions[order[i]]) {
      group_positives += labels[order[j]] > 0.5f;
      ++j;
    }
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    positive_rank_sum += average_rank * static_cast<double>(group_positives);
    positives += group_positives;
    i = j;
  }
  const uint64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

double logloss(std::span<const float> predictions, std::span<const float> labels) {
  STRATA_ASSERT(predictions.size() == labels.size(),
                "logloss: predictions and labels differ in size");
  if (predictions.empty()) return 0;
  constexpr double lo = 1e-7, hi = 1 - 1e-7;
  double sum = 0;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const double p = std::clamp(static_cast<double>(predictions[i]), lo, hi);
    const double y = labels[i];
    sum -= y * std::log(p) + (1 - y) * std::log(1 - p);
  }
  return sum / static_cast<double>(predictions.size());
}

}  // namespace strata::model
