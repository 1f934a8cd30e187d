// The CTR model: per-slot sum-pooled embeddings plus a first-order term,
// concatenated into an MLP with a sigmoid output, trained on logloss.
//
// Sparse parameters come from the parameter server as rows of dim =
// embedding_dim + 1 (or, with model_config::slot_dims, slot_dim(slot) + 1
// for a key of that slot: one table per group of slots, each its own
// width): element 0 is the key's first-order (linear) weight, the others
// its embedding. For an example:
//   pooled[s] = sum over its features f in slot s of value_f * emb(key_f)
//   linear    = sum over features of value_f * w0(key_f)
//   logit     = mlp(concat(pooled[0..slots))) + linear
//   p         = sigmoid(logit)
// The MLP has hidden layers of `hidden` sizes with ReLU, then one output.
// Its weights are one flat vector (dense_layout() gives the offsets) that
// the dense actor owns; workers hold a copy. Layer l stores its weights
// input-major (W[i][o] at weights + i * out + o), then its out biases.
// Weights are He-uniform (U(+-sqrt(6 / in))) from splitmix64 over
// (seed, index); biases start at 0.
//
// forward_backward() computes predictions, the batch's mean logloss, the
// gradient of every key occurrence's row (per position in batch.keys()
// order, dim floats each) and the dense gradient, all of the *mean* loss
// over the batch: an occurrence's row gradient is value * dL/dpooled[slot]
// (elements 1..) and value * dL/dlogit (element 0); a key seen twice gets
// two gradients, which the caller sums. Every feature's slot must be below
// config.slots (asserted).
//
// The MLP's layers are GEMMs on a single-threaded BLAS (model/mlp_blas.hpp);
// pooling, the first-order term and the loss are loops. Activations are
// row-major [example][unit] matrices in scratch buffers the model owns,
// grown when a batch is larger than any before and otherwise reused: with
// the batch_result& overload, a steady-state batch allocates nothing.
// So forward_backward is non-const and a model serves one thread at a time
// (each worker owns one); predict() is const and thread-compatible.
// model/mlp_reference.hpp keeps the loop implementation it replaced.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/example.hpp"

namespace strata::model {

struct model_config {
  uint32_t slots = 39;  // feature slots (Criteo: 13 integer + 26 categorical)
  uint32_t embedding_dim = 8;
  std::vector<uint32_t> hidden{64, 32};
  uint64_t seed = 1;  // dense weight initialization
  // Embedding width per slot (several tables: a slot's table's dim - 1);
  // empty: every slot embedding_dim. A key occurrence's row then has
  // slot_dim(its slot) + 1 floats, and the MLP's input is the slots'
  // pooled embeddings side by side (input_width() floats).
  std::vector<uint32_t> slot_dims;
  uint32_t row_dim() const { return embedding_dim + 1; }
  uint32_t slot_dim(uint32_t slot) const {
    return slot_dims.empty() ? embedding_dim : slot_dims[slot];
  }
  uint32_t input_width() const {
    if (slot_dims.empty()) return slots * embedding_dim;
    uint32_t sum = 0;
    for (uint32_t d : slot_dims) sum += d;
    return sum;
  }
};

struct batch_result {
  std::vector<float> predictions;  // per example
  double loss = 0;                 // mean logloss
  std::vector<float> row_grads;    // per key occurrence, row_dim() floats each
  std::vector<float> dense_grads;  // dense_size() floats
};

// Where one MLP layer lives in the flat dense vector.
struct dense_layer {
  size_t weights = 0;  // offset of W (in * out floats, input-major)
  size_t bias = 0;     // offset of the out biases
  uint32_t in = 0, out = 0;
};

class ctr_model {
 public:
  explicit ctr_model(model_config config);
  const model_config& config() const { return config_; }
  size_t dense_size() const;
  std::vector<dense_layer> dense_layout() const { return layout_; }
  // Initial dense weights (He-uniform from the seed; deterministic).
  std::vector<float> initial_dense() const;

  // rows: one row per key occurrence (batch.keys() order), slot_dim(its
  // slot) + 1 floats (row_dim() without slot_dims); dense: dense_size()
  // floats. Fills `out` (row_grads laid out like rows), reusing its vectors.
  void forward_backward(const batch& b, std::span<const float> rows, std::span<const float> dense,
                        batch_result& out);
  batch_result forward_backward(const batch& b, std::span<const float> rows,
                                std::span<const float> dense);
  // Predictions only (its own scratch: evaluation, not the training path).
  std::vector<float> predict(const batch& b, std::span<const float> rows,
                             std::span<const float> dense) const;

  // Buffers of one pass: acts[0] is the pooled input (batch x input_width()),
  // acts[l + 1] the (post-ReLU) output of layer l (batch x out); grad and
  // input_grad dL/d(a layer's output / input) during the backward pass.
  struct scratch {
    std::vector<std::vector<float>> acts;
    std::vector<float> linear, logits;  // per example
    std::vector<float> grad, input_grad, logit_grad;
  };

 private:
  model_config config_;
  std::vector<dense_layer> layout_;
  std::vector<uint32_t> slot_offset_;  // where each slot's pooled embedding starts in the input
  size_t dense_size_ = 0;
  scratch scratch_;
};

}  // namespace strata::model
