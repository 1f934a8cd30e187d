// Hot-path cost of metrics (target: <= 20 ns per update, no lock).
// Components count in plain members they own and the monitoring layer
// reads them at scrape time, so an update is what these measure:
//   BM_LatencyHistogramObserve  strata::latency_histogram::observe (a search
//                               over 22 bounds, two adds);
//   BM_PlainCounterIncrement    ++ on an actor-owned uint64_t (a tier_stats
//                               field);
//   BM_PrometheusCounterIncrement  prometheus::Counter::Increment, the
//                               atomic counter prometheus-cpp would use if
//                               components instrumented directly (baseline).
// Run: build/bench/metrics_bench
#include <benchmark/benchmark.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/latency_histogram.hpp"

namespace {

void BM_LatencyHistogramObserve(benchmark::State& state) {
  // Latencies spread over the whole bucket range, so the search is not
  // always the same path.
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> seconds(-9.0, 2.5);
  std::vector<double> samples(4096);
  for (auto& s : samples) s = seconds(rng);
  strata::latency_histogram h;
  size_t i = 0;
  for (auto _ : state) {
    h.observe(samples[i++ & 4095]);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(h.count());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LatencyHistogramObserve);

void BM_PlainCounterIncrement(benchmark::State& state) {
  uint64_t counter = 0;
  for (auto _ : state) {
    ++counter;
    benchmark::DoNotOptimize(counter);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlainCounterIncrement);

void BM_PrometheusCounterIncrement(benchmark::State& state) {
  prometheus::Registry registry;
  auto& counter =
      prometheus::BuildCounter().Name("bench_total").Help("bench").Register(registry).Add({});
  for (auto _ : state) counter.Increment();
  benchmark::DoNotOptimize(counter.Value());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PrometheusCounterIncrement);

}  // namespace

BENCHMARK_MAIN();
