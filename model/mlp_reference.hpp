// The CTR model's forward and backward passes as plain loops: the
// implementation ctr_model had before its MLP went through BLAS, kept as
// the reference that tests/model/ctr_model_blas_test.cpp compares the BLAS
// path with (same weights and inputs, float tolerance) and that
// bench/mlp_bench.cpp times it against. Not used by training.
#pragma once

#include <span>
#include <vector>

#include "model/ctr_model.hpp"

namespace strata::model {

// Same contract as ctr_model::forward_backward (model/ctr_model.hpp).
batch_result reference_forward_backward(const model_config& config,
                                        const std::vector<dense_layer>& layout, const batch& b,
                                        std::span<const float> rows, std::span<const float> dense);

}  // namespace strata::model
