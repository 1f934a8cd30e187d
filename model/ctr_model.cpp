// The CTR model's forward and backward passes: the MLP's layers as GEMMs
// on row-major [example][unit] matrices (model/mlp_blas.hpp), pooling,
// the first-order term, the loss and the spread of pooled gradients over
// key occurrences as loops (too little arithmetic per byte for BLAS).
#include "model/ctr_model.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "model/mlp_blas.hpp"

namespace strata::model {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// y[0..n) += a * x[0..n)
inline void axpy(float* __restrict y, const float* __restrict x, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

}  // namespace

ctr_model::ctr_model(model_config config) : config_(std::move(config)) {
  STRATA_ASSERT(config_.slots > 0 && config_.embedding_dim > 0, "ctr_model: empty model_config");
  STRATA_ASSERT(config_.slot_dims.empty() || config_.slot_dims.size() == config_.slots,
                "ctr_model: slot_dims must give every slot a width (or none)");
  for (uint32_t slot = 0; slot < config_.slots; ++slot) {
    STRATA_ASSERT(config_.slot_dim(slot) > 0, "ctr_model: a slot of embedding width 0");
    slot_offset_.push_back(slot == 0 ? 0 : slot_offset_.back() + config_.slot_dim(slot - 1));
  }
  uint32_t in = config_.input_width();
  auto add_layer = [&](uint32_t out) {
    STRATA_ASSERT(out > 0, "ctr_model: hidden layer of width 0");
    dense_layer layer;
    layer.in = in;
    layer.out = out;
    layer.weights = dense_size_;
    layer.bias = dense_size_ + size_t{in} * out;
    dense_size_ = layer.bias + out;
    layout_.push_back(layer);
    in = out;
  };
  for (uint32_t width : config_.hidden) add_layer(width);
  add_layer(1);
  blas::use_single_thread();
}

size_t ctr_model::dense_size() const { return dense_size_; }

std::vector<float> ctr_model::initial_dense() const {
  std::vector<float> dense(dense_size_, 0.0f);
  const uint64_t stream = splitmix64(config_.seed);
  for (const auto& layer : layout_) {
    const double limit = std::sqrt(6.0 / layer.in);
    for (size_t i = 0; i < size_t{layer.in} * layer.out; ++i) {
      const size_t index = layer.weights + i;
      const double u = static_cast<double>(splitmix64(stream + index) >> 11) * 0x1.0p-53;
      dense[index] = static_cast<float>((2 * u - 1) * limit);
    }
  }
  return dense;
}

namespace {

// Forward pass shared by predict() and forward_backward(); fills s.acts,
// s.linear and s.logits.
void forward(const model_config& config, const std::vector<dense_layer>& layout,
             const std::vector<uint32_t>& offset, const batch& b, std::span<const float> rows,
             std::span<const float> dense, ctr_model::scratch& s) {
  const size_t batch_size = b.examples.size();
  const size_t width = config.input_width();
  size_t floats = 0;
  for (const auto& e : b.examples)
    for (const auto& f : e.features) {
      STRATA_ASSERT(f.slot < config.slots, "ctr_model: feature slot >= model_config.slots");
      floats += size_t{config.slot_dim(f.slot)} + 1;
    }
  STRATA_ASSERT(rows.size() == floats,
                "ctr_model: rows must hold slot_dim(slot) + 1 floats per key occurrence");

  s.acts.resize(layout.size() + 1);
  s.acts[0].assign(batch_size * width, 0.0f);
  s.linear.resize(batch_size);
  const float* row = rows.data();
  for (size_t e = 0; e < batch_size; ++e) {
    float* pooled = s.acts[0].data() + e * width;
    float linear = 0;
    for (const auto& f : b.examples[e].features) {
      const size_t dim = config.slot_dim(f.slot);
      linear += f.value * row[0];
      axpy(pooled + offset[f.slot], row + 1, f.value, dim);
      row += dim + 1;
    }
    s.linear[e] = linear;
  }
  if (batch_size == 0) {
    s.logits.clear();
    return;
  }

  // Y = X W + bias (Y starts as the bias in every row), then ReLU.
  for (size_t l = 0; l < layout.size(); ++l) {
    const dense_layer& layer = layout[l];
    const float* w = dense.data() + layer.weights;
    const float* bias = dense.data() + layer.bias;
    const float* x = s.acts[l].data();
    std::vector<float>& y = s.acts[l + 1];
    y.resize(batch_size * layer.out);
    for (size_t e = 0; e < batch_size; ++e)
      std::copy(bias, bias + layer.out, y.data() + e * layer.out);
    if (layer.out == 1)
      blas::sgemv(false, batch_size, layer.in, 1.0f, x, layer.in, w, 1.0f, y.data());
    else
      blas::sgemm(false, false, batch_size, layer.out, layer.in, 1.0f, x, layer.in, w, layer.out,
                  1.0f, y.data(), layer.out);
    if (l + 1 < layout.size())
      for (float& v : y) v = std::max(v, 0.0f);
  }

  s.logits.resize(batch_size);
  const std::vector<float>& out = s.acts.back();
  for (size_t e = 0; e < batch_size; ++e) s.logits[e] = out[e] + s.linear[e];
}

}  // namespace

std::vector<float> ctr_model::predict(const batch& b, std::span<const float> rows,
                                      std::span<const float> dense) const {
  STRATA_ASSERT(dense.size() == dense_size_, "ctr_model: dense must hold dense_size() floats");
  scratch s;
  forward(config_, layout_, slot_offset_, b, rows, dense, s);
  std::vector<float> p(s.logits.size());
  for (size_t e = 0; e < p.size(); ++e) p[e] = sigmoid(s.logits[e]);
  return p;
}

batch_result ctr_model::forward_backward(const batch& b, std::span<const float> rows,
                                         std::span<const float> dense) {
  batch_result result;
  forward_backward(b, rows, dense, result);
  return result;
}

void ctr_model::forward_backward(const batch& b, std::span<const float> rows,
                                 std::span<const float> dense, batch_result& result) {
  STRATA_ASSERT(dense.size() == dense_size_, "ctr_model: dense must hold dense_size() floats");
  scratch& s = scratch_;
  forward(config_, layout_, slot_offset_, b, rows, dense, s);
  const size_t batch_size = b.examples.size();
  const size_t width = config_.input_width();

  result.predictions.resize(batch_size);
  result.dense_grads.assign(dense_size_, 0.0f);
  result.row_grads.resize(rows.size());
  result.loss = 0;
  if (batch_size == 0) return;

  // Loss and dL/dlogit of the mean logloss.
  s.grad.resize(batch_size);
  double loss = 0;
  const float scale = 1.0f / static_cast<float>(batch_size);
  for (size_t e = 0; e < batch_size; ++e) {
    const float z = s.logits[e], y = b.examples[e].label;
    const float p = sigmoid(z);
    result.predictions[e] = p;
    loss += std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::fabs(z)));
    s.grad[e] = (p - y) * scale;
  }
  result.loss = loss / static_cast<double>(batch_size);
  s.logit_grad.assign(s.grad.begin(), s.grad.end());

  // Back through the MLP; s.grad holds dL/d(output of layer l), G below.
  // grad and input_grad swap per layer: both get room for the widest.
  size_t widest = 0;
  for (const auto& layer : layout_) widest = std::max<size_t>(widest, layer.in);
  s.grad.reserve(batch_size * widest);
  s.input_grad.reserve(batch_size * widest);
  for (size_t l = layout_.size(); l-- > 0;) {
    const dense_layer& layer = layout_[l];
    const float* w = dense.data() + layer.weights;
    float* dw = result.dense_grads.data() + layer.weights;
    float* db = result.dense_grads.data() + layer.bias;
    const float* x = s.acts[l].data();
    const float* g = s.grad.data();
    s.input_grad.resize(batch_size * layer.in);
    float* dx = s.input_grad.data();
    for (size_t e = 0; e < batch_size; ++e) axpy(db, g + e * layer.out, 1.0f, layer.out);
    if (layer.out == 1) {
      // dW = X^T g; dX = g w^T (an outer product: a loop).
      blas::sgemv(true, batch_size, layer.in, 1.0f, x, layer.in, g, 0.0f, dw);
      for (size_t e = 0; e < batch_size; ++e)
        for (size_t i = 0; i < layer.in; ++i) dx[e * layer.in + i] = g[e] * w[i];
    } else {
      // dW = X^T G, dX = G W^T.
      blas::sgemm(true, false, layer.in, layer.out, batch_size, 1.0f, x, layer.in, g, layer.out,
                  0.0f, dw, layer.out);
      blas::sgemm(false, true, batch_size, layer.in, layer.out, 1.0f, g, layer.out, w, layer.out,
                  0.0f, dx, layer.in);
    }
    // Through the previous layer's ReLU (the pooled input has none).
    if (l > 0)
      for (size_t j = 0; j < batch_size * layer.in; ++j)
        if (!(x[j] > 0)) dx[j] = 0.0f;
    s.grad.swap(s.input_grad);
  }

  // s.grad is now dL/dpooled; spread it over the key occurrences.
  float* out = result.row_grads.data();
  for (size_t e = 0; e < batch_size; ++e) {
    const float* pooled_grad = s.grad.data() + e * width;
    for (const auto& f : b.examples[e].features) {
      const size_t dim = config_.slot_dim(f.slot);
      out[0] = f.value * s.logit_grad[e];
      const float* g = pooled_grad + slot_offset_[f.slot];
      for (size_t k = 0; k < dim; ++k) out[1 + k] = f.value * g[k];
      out += dim + 1;
    }
  }
}

}  // namespace strata::model
