#include "model/ctr_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace strata::model {
namespace {

// A small deterministic generator for test data.
struct lcg {
  uint64_t state;
  double uniform() {  // [0, 1)
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  }
};

// The model in double precision, written independently of ctr_model.cpp
// from the header's definition: mean logloss of the batch.
double reference_loss(const model_config& config, const std::vector<dense_layer>& layout,
                      const batch& b, const std::vector<double>& rows,
                      const std::vector<double>& dense) {
  // Slot s's pooled embedding starts after those of the slots before it.
  std::vector<size_t> start(config.slots + 1, 0);
  for (uint32_t slot = 0; slot < config.slots; ++slot)
    start[slot + 1] = start[slot] + config.slot_dim(slot);
  double total = 0;
  size_t at = 0;  // where the next occurrence's row starts in `rows`
  for (const auto& e : b.examples) {
    std::vector<double> x(start[config.slots], 0.0);
    double linear = 0;
    for (const auto& f : e.features) {
      const size_t dim = config.slot_dim(f.slot);
      const double* row = rows.data() + at;
      at += dim + 1;
      linear += f.value * row[0];
      for (size_t k = 0; k < dim; ++k) x[start[f.slot] + k] += f.value * row[1 + k];
    }
    for (size_t l = 0; l < layout.size(); ++l) {
      const dense_layer& layer = layout[l];
      std::vector<double> y(layer.out);
      for (size_t o = 0; o < layer.out; ++o) {
        double z = dense[layer.bias + o];
        for (size_t i = 0; i < layer.in; ++i) z += x[i] * dense[layer.weights + i * layer.out + o];
        y[o] = l + 1 < layout.size() ? std::max(z, 0.0) : z;
      }
      x = std::move(y);
    }
    const double logit = x[0] + linear;
    const double p = 1 / (1 + std::exp(-logit));
    total -= e.label * std::log(p) + (1 - e.label) * std::log(1 - p);
  }
  return total / static_cast<double>(b.examples.size());
}

batch small_batch() {
  batch b;
  // Slot 2 is missing in the second example; key 7 appears twice in one slot.
  b.examples.push_back({1, {{0, 7, 1.0f}, {0, 7, 1.0f}, {1, 3, 0.5f}, {2, 9, 1.0f}}});
  b.examples.push_back({0, {{0, 4, 1.0f}, {1, 3, 2.0f}}});
  b.examples.push_back({1, {{2, 11, 1.0f}, {1, 5, 1.0f}, {0, 7, 1.5f}}});
  b.examples.push_back({0, {{1, 6, 1.0f}, {2, 9, -0.5f}, {0, 2, 1.0f}}});
  return b;
}

TEST(CtrModel, DenseLayoutAndSize) {
  ctr_model model(model_config{});
  const auto layout = model.dense_layout();
  ASSERT_EQ(layout.size(), 3u);
  EXPECT_EQ(layout[0].in, 39u * 8u);
  EXPECT_EQ(layout[0].out, 64u);
  EXPECT_EQ(layout[1].in, 64u);
  EXPECT_EQ(layout[2].out, 1u);
  EXPECT_EQ(layout[1].weights, 312u * 64u + 64u);
  EXPECT_EQ(model.dense_size(), 312u * 64u + 64u + 64u * 32u + 32u + 32u + 1u);
  EXPECT_EQ(model.config().row_dim(), 9u);
}

TEST(CtrModel, InitialDenseIsDeterministicHeUniform) {
  model_config config;
  ctr_model a(config), b(config);
  config.seed = 2;
  ctr_model c(config);
  const auto wa = a.initial_dense(), wb = b.initial_dense(), wc = c.initial_dense();
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
  for (const auto& layer : a.dense_layout()) {
    const double limit = std::sqrt(6.0 / layer.in);
    double sum_sq = 0;
    for (size_t i = 0; i < size_t{layer.in} * layer.out; ++i) {
      const float w = wa[layer.weights + i];
      EXPECT_LE(std::fabs(w), limit);
      sum_sq += double{w} * w;
    }
    // Uniform(-limit, limit) has variance limit^2 / 3 = 2 / in.
    const double count = static_cast<double>(layer.in) * layer.out;
    if (count > 1000) {
      EXPECT_NEAR(sum_sq / count, 2.0 / layer.in, 0.1 * 2.0 / layer.in);
    }
    for (size_t o = 0; o < layer.out; ++o) EXPECT_EQ(wa[layer.bias + o], 0.0f);
  }
}

// Row floats of a batch's key occurrences under `config`.
size_t row_floats(const model_config& config, const batch& b) {
  size_t n = 0;
  for (const auto& e : b.examples)
    for (const auto& f : e.features) n += config.slot_dim(f.slot) + 1;
  return n;
}

void expect_gradients_match_finite_differences(const model_config& config) {
  ctr_model model(config);
  const batch b = small_batch();
  lcg rng{99};
  std::vector<float> rows(row_floats(config, b));
  for (float& r : rows) r = static_cast<float>(rng.uniform() - 0.5);
  std::vector<float> dense = model.initial_dense();
  for (const auto& layer : model.dense_layout())  // non-zero biases too
    for (size_t o = 0; o < layer.out; ++o)
      dense[layer.bias + o] = static_cast<float>(0.2 * (rng.uniform() - 0.5));

  const batch_result result = model.forward_backward(b, rows, dense);
  ASSERT_EQ(result.row_grads.size(), rows.size());
  ASSERT_EQ(result.dense_grads.size(), dense.size());
  ASSERT_EQ(result.predictions.size(), b.examples.size());

  std::vector<double> rows_d(rows.begin(), rows.end()), dense_d(dense.begin(), dense.end());
  const auto layout = model.dense_layout();
  EXPECT_NEAR(result.loss, reference_loss(config, layout, b, rows_d, dense_d), 1e-5);

  const double h = 1e-5;
  auto numeric = [&](std::vector<double>& params, size_t i) {
    const double saved = params[i];
    params[i] = saved + h;
    const double up = reference_loss(config, layout, b, rows_d, dense_d);
    params[i] = saved - h;
    const double down = reference_loss(config, layout, b, rows_d, dense_d);
    params[i] = saved;
    return (up - down) / (2 * h);
  };
  for (size_t i = 0; i < rows_d.size(); ++i) {
    SCOPED_TRACE("row element " + std::to_string(i));
    EXPECT_NEAR(result.row_grads[i], numeric(rows_d, i), 2e-4);
  }
  double largest = 0;
  for (size_t i = 0; i < dense_d.size(); ++i) {
    SCOPED_TRACE("dense element " + std::to_string(i));
    const double expected = numeric(dense_d, i);
    largest = std::max(largest, std::fabs(expected));
    EXPECT_NEAR(result.dense_grads[i], expected, 2e-4);
  }
  EXPECT_GT(largest, 1e-2);  // the check is not vacuous
}

TEST(CtrModel, GradientsMatchFiniteDifferences) {
  model_config config;
  config.slots = 3;
  config.embedding_dim = 4;
  config.hidden = {6, 5};
  expect_gradients_match_finite_differences(config);
}

// Several tables: each slot's rows have their table's width (issue 20).
TEST(CtrModel, GradientsMatchFiniteDifferencesWithAWidthPerSlot) {
  model_config config;
  config.slots = 3;
  config.embedding_dim = 4;  // not used: every slot has its own width
  config.slot_dims = {2, 7, 3};
  config.hidden = {6, 5};
  ctr_model model(config);
  EXPECT_EQ(model.dense_layout()[0].in, 12u);
  EXPECT_EQ(config.input_width(), 12u);
  expect_gradients_match_finite_differences(config);
}

// Widths given per slot, all equal to embedding_dim, are today's model bit
// for bit (the single-table manifests train exactly as before).
TEST(CtrModel, EqualWidthsPerSlotAreTheSingleWidthModelBitForBit) {
  model_config one;
  one.slots = 3;
  one.embedding_dim = 4;
  one.hidden = {6, 5};
  model_config per_slot = one;
  per_slot.slot_dims = {4, 4, 4};
  ctr_model a(one), b(per_slot);
  const batch data = small_batch();
  lcg rng{7};
  std::vector<float> rows(row_floats(one, data));
  for (float& r : rows) r = static_cast<float>(rng.uniform() - 0.5);
  ASSERT_EQ(a.initial_dense(), b.initial_dense());
  const auto dense = a.initial_dense();
  const batch_result ra = a.forward_backward(data, rows, dense);
  const batch_result rb = b.forward_backward(data, rows, dense);
  EXPECT_EQ(ra.predictions, rb.predictions);
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_EQ(ra.row_grads, rb.row_grads);
  EXPECT_EQ(ra.dense_grads, rb.dense_grads);
}

TEST(CtrModel, PredictMatchesForwardBackward) {
  model_config config;
  config.slots = 3;
  config.embedding_dim = 4;
  ctr_model model(config);
  const batch b = small_batch();
  lcg rng{5};
  std::vector<float> rows(b.keys().size() * config.row_dim());
  for (float& r : rows) r = static_cast<float>(rng.uniform() - 0.5);
  const auto dense = model.initial_dense();
  const auto p = model.predict(b, rows, dense);
  const auto result = model.forward_backward(b, rows, dense);
  ASSERT_EQ(p.size(), 4u);
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_FLOAT_EQ(p[i], result.predictions[i]);
    EXPECT_GT(p[i], 0.0f);
    EXPECT_LT(p[i], 1.0f);
  }
}

TEST(CtrModel, EmptyBatch) {
  ctr_model model(model_config{});
  const auto result = model.forward_backward(batch{}, {}, model.initial_dense());
  EXPECT_TRUE(result.predictions.empty());
  EXPECT_TRUE(result.row_grads.empty());
  EXPECT_EQ(result.dense_grads.size(), model.dense_size());
  EXPECT_EQ(result.loss, 0);
}

TEST(CtrModel, SgdLearnsASeparableProblem) {
  // Slot 0 decides the label (keys 0..4 click, 5..9 don't); slot 1 is noise.
  model_config config;
  config.slots = 2;
  config.embedding_dim = 4;
  config.hidden = {8};
  ctr_model model(config);
  batch b;
  for (uint64_t k = 0; k < 10; ++k)
    for (uint64_t noise = 100; noise < 103; ++noise)
      b.examples.push_back({k < 5 ? 1.0f : 0.0f, {{0, k, 1.0f}, {1, noise, 1.0f}}});
  const auto keys = b.keys();
  std::map<uint64_t, std::vector<float>> table;
  lcg rng{3};
  for (uint64_t k : keys)
    if (!table.count(k)) {
      std::vector<float> row(config.row_dim());
      for (float& r : row) r = static_cast<float>(0.2 * (rng.uniform() - 0.5));
      table[k] = row;
    }
  std::vector<float> dense = model.initial_dense();
  const float lr = 0.5f;
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<float> rows;
    for (uint64_t k : keys) rows.insert(rows.end(), table[k].begin(), table[k].end());
    const auto result = model.forward_backward(b, rows, dense);
    if (step == 0) first_loss = result.loss;
    last_loss = result.loss;
    for (size_t o = 0; o < keys.size(); ++o)  // occurrences of a key add up
      for (size_t d = 0; d < config.row_dim(); ++d)
        table[keys[o]][d] -= lr * result.row_grads[o * config.row_dim() + d];
    for (size_t i = 0; i < dense.size(); ++i) dense[i] -= lr * result.dense_grads[i];
  }
  EXPECT_GT(first_loss, 0.5);
  EXPECT_LT(last_loss, 0.05);
}

}  // namespace
}  // namespace strata::model
