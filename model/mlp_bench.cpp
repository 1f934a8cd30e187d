// The CTR model's forward + backward on one thread: the BLAS path
// (ctr_model) against the loops it replaced (mlp_reference), at the two
// shapes of `strata bench e2e` (demo: dim 8, MLP 64-32, batch 128; wide:
// dim 16, MLP 256-128, batch 1024; 39 slots). build/model/mlp_bench.
// Built once per BLAS to choose one (docs/performance.md).
#include <benchmark/benchmark.h>

#include <cstdio>

#include "model/ctr_model.hpp"
#include "model/mlp_blas.hpp"
#include "model/mlp_reference.hpp"

namespace strata::model {
namespace {

struct setup {
  model_config config;
  batch b;
  std::vector<float> rows, dense;
  setup(uint32_t dim, std::vector<uint32_t> hidden, size_t batch_size) {
    config.embedding_dim = dim;
    config.hidden = std::move(hidden);
    uint64_t state = 42;
    auto next = [&] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 11) * 0x1.0p-53;
    };
    for (size_t e = 0; e < batch_size; ++e) {
      example ex;
      ex.label = next() < 0.25 ? 1.0f : 0.0f;
      for (uint32_t s = 0; s < config.slots; ++s)
        if (next() < 0.9) ex.features.push_back({s, state, 1.0f});
      b.examples.push_back(std::move(ex));
    }
    rows.resize(b.keys().size() * config.row_dim());
    for (float& r : rows) r = static_cast<float>(0.1 * (next() - 0.5));
    dense = ctr_model(config).initial_dense();
  }
};

void run(benchmark::State& state, uint32_t dim, std::vector<uint32_t> hidden, size_t batch_size,
         bool reference) {
  setup s(dim, std::move(hidden), batch_size);
  ctr_model model(s.config);
  const auto layout = model.dense_layout();
  batch_result out;
  for (auto _ : state) {
    if (reference)
      out = reference_forward_backward(s.config, layout, s.b, s.rows, s.dense);
    else
      model.forward_backward(s.b, s.rows, s.dense, out);
    benchmark::DoNotOptimize(out.dense_grads.data());
  }
  state.counters["examples_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * batch_size), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(run, demo_blas, 8, {64, 32}, 128, false);
BENCHMARK_CAPTURE(run, demo_loops, 8, {64, 32}, 128, true);
BENCHMARK_CAPTURE(run, wide_blas, 16, {256, 128}, 1024, false);
BENCHMARK_CAPTURE(run, wide_loops, 16, {256, 128}, 1024, true);

}  // namespace
}  // namespace strata::model

int main(int argc, char** argv) {
  strata::model::blas::use_single_thread();
  std::printf("BLAS: %s, %d thread(s)\n", strata::model::blas::name(),
              strata::model::blas::threads());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
