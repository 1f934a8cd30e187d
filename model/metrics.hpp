// Exact AUC (ties counted half, by sorting) and mean logloss.
#pragma once

#include <span>

namespace strata::model {

// Area under the ROC curve; 0.5 when only one class is present.
double auc(std::span<const float> predictions, std::span<const float> labels);
// Mean binary cross-entropy, predictions clamped to [1e-7, 1 - 1e-7].
double logloss(std::span<const float> predictions, std::span<const float> labels);

}  // namespace strata::model
