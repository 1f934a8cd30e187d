// A process-wide allocation counter for benchmarks and allocation tests.
//
// alloc_count.cpp replaces the global operator new/delete (every form) of
// the binary it is linked into with malloc/free plus a counter: the strata
// binary (through strata_bench) and the tests that list it as a source.
// It counts C++ allocations (operator new), not C ones (LMDB's malloc).
//
// Allocations per trained batch in steady state: read total() after the
// warm-up batches and again after n more, and divide the difference by n
// (per_batch below). Other threads count too, so read the counter while
// the work being measured is the only work running.
#pragma once

#include <cstdint>

namespace strata::alloc_count {

// operator new calls since the process started, all threads.
uint64_t total();

// operator new calls made by the calling thread since it started.
uint64_t thread_total();

// Allocations per batch between two readings of total(): (after - before)
// / batches, 0 when no batch ran.
inline double per_batch(uint64_t before, uint64_t after, uint64_t batches) {
  return batches == 0 ? 0.0 : static_cast<double>(after - before) / static_cast<double>(batches);
}

}  // namespace strata::alloc_count
