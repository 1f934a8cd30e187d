// The pre-BLAS loops of ctr_model (see mlp_reference.hpp), unchanged:
// written so that GCC vectorizes them at -O2 (fixed 8-wide inner blocks
// that SLP turns into SIMD; dot products keep 8 partial sums).
#include "model/mlp_reference.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace strata::model {
namespace {

// y[0..n) += a * x[0..n)
inline void axpy(float* __restrict y, const float* __restrict x, float a, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) y[i + k] += a * x[i + k];
  for (; i < n; ++i) y[i] += a * x[i];
}

inline float dot(const float* __restrict a, const float* __restrict b, size_t n) {
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Examples processed together in the MLP, so that each weight row is
// loaded from L2 once per block instead of once per example.
constexpr size_t example_block = 8;

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Activations of one forward pass: acts[0] is the pooled input, acts[l + 1]
// the (post-ReLU) output of layer l; the last holds the MLP's logits.
struct activations {
  std::vector<std::vector<float>> acts;
  std::vector<float> linear;  // per example
  std::vector<float> logits;  // MLP output + linear, per example
};

// Forward pass shared by predict() and forward_backward().
void forward(const model_config& config, const std::vector<dense_layer>& layout, const batch& b,
             std::span<const float> rows, std::span<const float> dense, activations& a) {
  STRATA_ASSERT(config.slot_dims.empty(),
                "mlp_reference: one embedding width for every slot (no slot_dims)");
  const size_t batch_size = b.examples.size();
  const size_t dim = config.embedding_dim, row_dim = config.row_dim();
  const size_t width = size_t{config.slots} * dim;
  size_t occurrences = 0;
  for (const auto& e : b.examples) occurrences += e.features.size();
  STRATA_ASSERT(rows.size() == occurrences * row_dim,
                "ctr_model: rows must hold row_dim() floats per key occurrence");

  a.acts.resize(layout.size() + 1);
  a.acts[0].assign(batch_size * width, 0.0f);
  a.linear.assign(batch_size, 0.0f);
  const float* row = rows.data();
  for (size_t e = 0; e < batch_size; ++e) {
    float* pooled = a.acts[0].data() + e * width;
    float linear = 0;
    for (const auto& f : b.examples[e].features) {
      STRATA_ASSERT(f.slot < config.slots, "ctr_model: feature slot >= model_config.slots");
      linear += f.value * row[0];
      axpy(pooled + size_t{f.slot} * dim, row + 1, f.value, dim);
      row += row_dim;
    }
    a.linear[e] = linear;
  }

  for (size_t l = 0; l < layout.size(); ++l) {
    const dense_layer& layer = layout[l];
    const bool hidden = l + 1 < layout.size();
    const float* w = dense.data() + layer.weights;
    const float* bias = dense.data() + layer.bias;
    const std::vector<float>& x = a.acts[l];
    std::vector<float>& y = a.acts[l + 1];
    y.resize(batch_size * layer.out);
    if (layer.out == 1) {
      for (size_t e = 0; e < batch_size; ++e)
        y[e] = bias[0] + dot(x.data() + e * layer.in, w, layer.in);
      continue;
    }
    // Blocks of examples share each weight row while it is in L1.
    for (size_t e0 = 0; e0 < batch_size; e0 += example_block) {
      const size_t n = std::min(example_block, batch_size - e0);
      for (size_t k = 0; k < n; ++k)
        std::copy(bias, bias + layer.out, y.data() + (e0 + k) * layer.out);
      for (size_t i = 0; i < layer.in; ++i) {
        const float* wi = w + i * layer.out;
        for (size_t k = 0; k < n; ++k) {
          const float xi = x[(e0 + k) * layer.in + i];
          if (xi != 0) axpy(y.data() + (e0 + k) * layer.out, wi, xi, layer.out);
        }
      }
      if (hidden)
        for (size_t o = 0; o < n * layer.out; ++o)
          y[e0 * layer.out + o] = std::max(y[e0 * layer.out + o], 0.0f);
    }
  }

  a.logits.resize(batch_size);
  const std::vector<float>& out = a.acts.back();
  for (size_t e = 0; e < batch_size; ++e) a.logits[e] = out[e] + a.linear[e];
}

}  // namespace

batch_result reference_forward_backward(const model_config& config,
                                        const std::vector<dense_layer>& layout, const batch& b,
                                        std::span<const float> rows, std::span<const float> dense) {
  size_t dense_size = 0;
  for (const auto& layer : layout) dense_size = std::max(dense_size, layer.bias + layer.out);
  STRATA_ASSERT(dense.size() == dense_size, "ctr_model: dense must hold dense_size() floats");
  activations a;
  forward(config, layout, b, rows, dense, a);
  const size_t batch_size = b.examples.size();
  const size_t dim = config.embedding_dim, row_dim = config.row_dim();
  const size_t width = size_t{config.slots} * dim;

  batch_result result;
  result.predictions.resize(batch_size);
  result.dense_grads.assign(dense_size, 0.0f);
  result.row_grads.resize(rows.size());
  if (batch_size == 0) return result;

  // Loss and dL/dlogit of the mean logloss.
  std::vector<float> grad(batch_size);
  double loss = 0;
  const float scale = 1.0f / static_cast<float>(batch_size);
  for (size_t e = 0; e < batch_size; ++e) {
    const float z = a.logits[e], y = b.examples[e].label;
    const float p = sigmoid(z);
    result.predictions[e] = p;
    loss += std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::fabs(z)));
    grad[e] = (p - y) * scale;
  }
  result.loss = loss / static_cast<double>(batch_size);
  const std::vector<float> logit_grad = grad;

  // Back through the MLP; `grad` holds dL/d(output of layer l) per example.
  std::vector<float> input_grad;
  for (size_t l = layout.size(); l-- > 0;) {
    const dense_layer& layer = layout[l];
    const float* w = dense.data() + layer.weights;
    float* dw = result.dense_grads.data() + layer.weights;
    float* db = result.dense_grads.data() + layer.bias;
    const std::vector<float>& x = a.acts[l];
    input_grad.assign(batch_size * layer.in, 0.0f);
    for (size_t e = 0; e < batch_size; ++e) axpy(db, grad.data() + e * layer.out, 1.0f, layer.out);
    for (size_t e0 = 0; e0 < batch_size; e0 += example_block) {
      const size_t n = std::min(example_block, batch_size - e0);
      for (size_t i = 0; i < layer.in; ++i) {
        const float* wi = w + i * layer.out;
        float* dwi = dw + i * layer.out;
        for (size_t k = 0; k < n; ++k) {
          const size_t e = e0 + k;
          const float* ge = grad.data() + e * layer.out;
          const float xi = x[e * layer.in + i];
          if (xi != 0) axpy(dwi, ge, xi, layer.out);
          // dL/dx, through the previous layer's ReLU (the pooled input has none).
          input_grad[e * layer.in + i] = l == 0 || xi > 0 ? dot(wi, ge, layer.out) : 0.0f;
        }
      }
    }
    grad.swap(input_grad);
  }

  // grad is now dL/dpooled; spread it over the key occurrences.
  float* out = result.row_grads.data();
  for (size_t e = 0; e < batch_size; ++e) {
    const float* pooled_grad = grad.data() + e * width;
    for (const auto& f : b.examples[e].features) {
      out[0] = f.value * logit_grad[e];
      const float* g = pooled_grad + size_t{f.slot} * dim;
      for (size_t k = 0; k < dim; ++k) out[1 + k] = f.value * g[k];
      out += row_dim;
    }
  }
  return result;
}

}  // namespace strata::model
