// The optimizers' row updates (apply_optimizer) as strata builds them, with
// their loops vectorized, against the same source built without
// vectorization (tiers/CMakeLists.txt: strata_optimizer_scalar, its
// functions renamed scalar_*): rows updated per second over 4096 rows,
// per optimizer and width. The results are bit-identical
// (tests/tiers/optimizer_test.cpp); this measures what vectorizing buys.
// build/tiers/optimizer_bench.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tiers/optimizer.hpp"
#include "tiers/row.hpp"

namespace strata {
// The baseline's entry points (tiers/optimizer.cpp built as scalar_*).
void scalar_apply_optimizer(const optimizer_config& config, const row_layout& layout,
                            std::byte* record, const float* grad);
namespace {

constexpr size_t rows = 4096;

template <bool Vectorized>
void update_rows(benchmark::State& state) {
  const auto kind = static_cast<optimizer_kind>(state.range(0));
  const auto dim = static_cast<uint32_t>(state.range(1));
  optimizer_config c;
  c.kind = kind;
  const row_layout layout{dim, kind, true};
  const size_t rb = layout.record_bytes();
  std::vector<std::byte> records(rows * rb);
  for (size_t r = 0; r < rows; ++r) {
    std::byte* rec = records.data() + r * rb;
    meta_of(rec) = row_meta{};
    for (uint32_t i = 0; i < dim; ++i) weights_of(rec)[i] = 0.01f * float(i + r % 7);
    init_optimizer_state(c, layout, rec);
  }
  std::vector<float> grad(dim);
  for (uint32_t i = 0; i < dim; ++i) grad[i] = 0.001f * float(int(i % 5) - 2);
  for (auto _ : state) {
    for (size_t r = 0; r < rows; ++r) {
      if constexpr (Vectorized)
        apply_optimizer(c, layout, records.data() + r * rb, grad.data());
      else
        scalar_apply_optimizer(c, layout, records.data() + r * rb, grad.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(rows));
  state.SetLabel(std::string(to_string(kind)) + (Vectorized ? " vectorized" : " scalar"));
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int kind : {0, 1, 2, 3})
    for (int dim : {8, 16, 64, 128}) b->Args({kind, dim});
}

BENCHMARK_TEMPLATE(update_rows, false)->Apply(shapes);
BENCHMARK_TEMPLATE(update_rows, true)->Apply(shapes);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
