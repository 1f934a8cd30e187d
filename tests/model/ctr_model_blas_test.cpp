// The BLAS path of ctr_model against the loops it replaced
// (model/mlp_reference.hpp), on fixed weights and inputs at the two
// benchmark shapes; its scratch reuse (no allocation per batch in steady
// state, correct results when the batch shrinks and grows) and the BLAS
// staying single-threaded whatever the environment says.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/alloc_count.hpp"
#include "common/child_process.hpp"
#include "model/ctr_model.hpp"
#include "model/mlp_blas.hpp"
#include "model/mlp_reference.hpp"

namespace strata::model {
namespace {

struct lcg {
  uint64_t state;
  uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
  int between(int lo, int hi) { return lo + static_cast<int>(next() % uint64_t(hi - lo + 1)); }
};

// Inputs and weights are small multiples of 2^-7 (feature values 0.5, 1
// or 2), so every sum up to the last hidden layer is exact in float in any
// order: both implementations see the same pre-activations, hence the same
// ReLU masks (a unit within rounding of 0 would otherwise flip between
// them and move a whole example's gradient). The output layer, the loss
// and every backward product are ordinary floats: those are what the
// tolerance covers.
struct problem {
  model_config config;
  batch b;
  std::vector<float> rows, dense;
};

problem make_problem(uint32_t dim, std::vector<uint32_t> hidden, size_t batch_size, uint64_t seed) {
  problem p;
  p.config.slots = 39;
  p.config.embedding_dim = dim;
  p.config.hidden = std::move(hidden);
  lcg rng{seed};
  const float values[] = {1.0f, 1.0f, 1.0f, 0.5f, 2.0f};
  for (size_t e = 0; e < batch_size; ++e) {
    example ex;
    ex.label = static_cast<float>(rng.next() % 2);
    for (uint32_t s = 0; s < p.config.slots; ++s) {
      const int n =
          rng.between(0, 9) == 0 ? 0 : (rng.between(0, 7) == 0 ? 2 : 1);  // missing, repeated
      for (int k = 0; k < n; ++k) ex.features.push_back({s, rng.next(), values[rng.next() % 5]});
    }
    p.b.examples.push_back(std::move(ex));
  }
  p.rows.resize(p.b.keys().size() * p.config.row_dim());
  for (float& r : p.rows) r = static_cast<float>(rng.between(-16, 16)) / 128;
  ctr_model model(p.config);
  p.dense.assign(model.dense_size(), 0.0f);
  const auto layout = model.dense_layout();
  for (size_t l = 0; l < layout.size(); ++l) {
    const int w = l == 0 ? 8 : 4;
    for (size_t i = 0; i < size_t{layout[l].in} * layout[l].out; ++i)
      p.dense[layout[l].weights + i] = static_cast<float>(rng.between(-w, w)) / 128;
    for (size_t o = 0; o < layout[l].out; ++o)
      p.dense[layout[l].bias + o] = static_cast<float>(rng.between(-4, 4)) / 128;
  }
  return p;
}

// max |got - want| <= rel * max |want| (+ a floor for all-zero vectors).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, size_t first,
                  size_t count, const std::string& what, double rel = 1e-4) {
  double scale = 0, worst = 0;
  size_t worst_at = first;
  for (size_t i = first; i < first + count; ++i) {
    scale = std::max(scale, double(std::fabs(want[i])));
    const double d = std::fabs(double(got[i]) - want[i]);
    if (d > worst) worst = d, worst_at = i;
  }
  EXPECT_LE(worst, rel * scale + 1e-9)
      << what << ": largest difference " << worst << " at " << worst_at << " (BLAS "
      << got[worst_at] << ", loops " << want[worst_at] << "), largest value " << scale;
  EXPECT_GT(scale, 0) << what << " is all zero: the comparison would be vacuous";
}

void expect_same_as_loops(ctr_model& model, const problem& p) {
  const batch_result want =
      reference_forward_backward(p.config, model.dense_layout(), p.b, p.rows, p.dense);
  batch_result got;
  model.forward_backward(p.b, p.rows, p.dense, got);
  ASSERT_EQ(got.predictions.size(), want.predictions.size());
  ASSERT_EQ(got.row_grads.size(), want.row_grads.size());
  ASSERT_EQ(got.dense_grads.size(), want.dense_grads.size());
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::max(1.0, std::fabs(want.loss)));
  expect_close(got.predictions, want.predictions, 0, want.predictions.size(), "predictions");
  expect_close(got.row_grads, want.row_grads, 0, want.row_grads.size(), "row gradients");
  const auto layout = model.dense_layout();
  for (size_t l = 0; l < layout.size(); ++l) {
    const auto& layer = layout[l];
    expect_close(got.dense_grads, want.dense_grads, layer.weights, size_t{layer.in} * layer.out,
                 "layer " + std::to_string(l) + " weight gradients");
    expect_close(got.dense_grads, want.dense_grads, layer.bias, layer.out,
                 "layer " + std::to_string(l) + " bias gradients");
  }
  const auto predicted = model.predict(p.b, p.rows, p.dense);
  expect_close(predicted, want.predictions, 0, want.predictions.size(), "predict()");
}

TEST(CtrModelBlas, MatchesTheLoopsAtTheDemoShape) {
  const problem p = make_problem(8, {64, 32}, 128, 1);
  ctr_model model(p.config);
  expect_same_as_loops(model, p);
}

TEST(CtrModelBlas, MatchesTheLoopsAtTheWideShape) {
  const problem p = make_problem(16, {256, 128}, 1024, 2);
  ctr_model model(p.config);
  expect_same_as_loops(model, p);
}

TEST(CtrModelBlas, ReusedScratchGivesTheSameResultsWhenBatchesShrinkAndGrow) {
  const problem big = make_problem(8, {64, 32}, 300, 3);
  const problem small = make_problem(8, {64, 32}, 17, 4);
  ctr_model model(big.config);
  expect_same_as_loops(model, big);
  expect_same_as_loops(model, small);
  expect_same_as_loops(model, big);
  batch_result out;
  model.forward_backward(big.b, big.rows, big.dense, out);
  model.forward_backward(small.b, small.rows, small.dense, out);  // a reused, larger result
  const batch_result want = reference_forward_backward(small.config, model.dense_layout(), small.b,
                                                       small.rows, small.dense);
  ASSERT_EQ(out.predictions.size(), small.b.examples.size());
  ASSERT_EQ(out.row_grads.size(), small.rows.size());
  expect_close(out.dense_grads, want.dense_grads, 0, want.dense_grads.size(), "dense gradients");
}

TEST(CtrModelBlas, ASteadyStateBatchAllocatesNothing) {
  const problem p = make_problem(16, {256, 128}, 256, 5);
  ctr_model model(p.config);
  batch_result out;
  model.forward_backward(p.b, p.rows, p.dense, out);  // grows the buffers
  const uint64_t before = alloc_count::thread_total();
  for (int i = 0; i < 5; ++i) model.forward_backward(p.b, p.rows, p.dense, out);
  EXPECT_EQ(alloc_count::thread_total() - before, 0u) << "allocations in 5 batches after the first";
}

// The worker's BLAS runs on the caller's thread even when the environment
// asks the library for more: checked in a child whose environment does.
TEST(CtrModelBlas, SingleThreadedWhateverTheEnvironmentSays) {
  if (const char* child = std::getenv("STRATA_BLAS_TEST_CHILD"); child != nullptr) {
    ctr_model model(model_config{});
    std::printf("blas threads: %d\n", blas::threads());
    std::fflush(stdout);
    EXPECT_EQ(blas::threads(), 1);
    return;
  }
  child_process c("/proc/self/exe",
                  {"--gtest_filter=CtrModelBlas.SingleThreadedWhateverTheEnvironmentSays"},
                  {"STRATA_BLAS_TEST_CHILD=1", "OPENBLAS_NUM_THREADS=4", "OMP_NUM_THREADS=4",
                   "GOTO_NUM_THREADS=4", "BLIS_NUM_THREADS=4"});
  const auto line = c.wait_line("blas threads:", std::chrono::seconds(60));
  ASSERT_TRUE(line) << "the child printed no thread count: " << c.output();
  EXPECT_EQ(*line, "blas threads: 1");
  EXPECT_EQ(c.wait_exit(std::chrono::seconds(60)), 0) << c.output();
}

// The serial OpenBLAS, not the pthread build the libopenblas.so.0 alternative
// points at: that one starts a thread pool when it loads (a signal can land on
// it) and takes 60 KiB of static TLS from every thread's stack. The process of
// this test has started no thread of its own, so it must have exactly one.
TEST(CtrModelBlas, TheLoadedLibraryIsTheSerialBuild) {
  const std::string config = blas::name();
  EXPECT_NE(config.find("SINGLE_THREADED"), std::string::npos) << "loaded: " << config;
  std::ifstream status("/proc/self/status");
  std::string line;
  int threads = 0;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) threads = std::stoi(line.substr(8));
  EXPECT_EQ(threads, 1) << "threads in a process that started none (OpenBLAS's pool?)";
}

}  // namespace
}  // namespace strata::model
