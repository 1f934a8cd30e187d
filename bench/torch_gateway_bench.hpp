// The row e2e_torch_gateway_examples_per_s of `strata bench e2e`: a
// PyTorch training loop whose embedding table lives in strata, through the
// strata_torch module (client/python/strata_torch.py), against the same loop
// with an in-memory nn.EmbeddingBag (pytorch_cpu), both measured here.
//
// The loop is bench/torch_baseline.py's (the demo model: dim 8, MLP 64-32;
// batch 1024, one thread, the first min(rows, 100000) generated rows). The
// strata side is a `strata node` (this binary) with a gateway and no
// workers, its table with the baseline's optimizer and initializer (Adagrad
// lr 0.01, initial accumulator 0.1, N(0, 0.01^2)), every row in DRAM:
//   - e2e_torch_gateway_examples_per_s: prefetch of the next batch's rows
//     and background pushes (max staleness 2);
//   - e2e_torch_gateway_sync_examples_per_s: neither (a lookup and a push
//     per batch, nothing overlapped).
// Skipped, with a message, where the Python module was not built.
#pragma once

#include <filesystem>

#include "bench/e2e_bench.hpp"
#include "bench/report.hpp"

namespace strata::bench {

// `data`: the Criteo-layout TSV run_e2e_bench generated.
void run_torch_gateway_bench(const e2e_bench_options& options, const std::filesystem::path& data,
                             bench_report& report);

}  // namespace strata::bench
