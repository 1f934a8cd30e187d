// The BLAS under the CTR model's MLP (model/ctr_model.cpp): Debian's
// OpenBLAS (libopenblas-dev, 0.3.21; chosen over BLIS 0.9.0 by measurement,
// docs/performance.md), built with -DSTRATA_BLAS_BLIS against BLIS for that
// comparison. Row-major, single precision, nothing else.
//
// Single-threaded: each worker calls it on its own CAF scheduler thread,
// and the scheduler owns the cores (workers.count scales compute). The
// library's thread count is process-wide and read from the environment
// (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS) when it loads; use_single_thread()
// sets it to 1 after that, so no environment can turn it back on. A
// PyTorch baseline runs in its own process with its own threads.
#pragma once

#include <cstddef>

namespace strata::model::blas {

// Makes the library run every call on the calling thread. Idempotent and
// thread-safe; ctr_model's constructor calls it.
void use_single_thread();
// The library's current thread count (1 after use_single_thread()).
int threads();
// "openblas 0.3.21 ..." / "blis 0.9.0": what was linked, for reports.
const char* name();

// C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; op(X) is X or,
// with trans_x, its transpose. lda/ldb/ldc are the row strides of A, B, C
// as stored.
void sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, const float* a,
           size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc);
// y[m or n] = alpha * op(A) * x + beta * y, A row-major m x n (stride lda).
void sgemv(bool trans_a, size_t m, size_t n, float alpha, const float* a, size_t lda,
           const float* x, float beta, float* y);

}  // namespace strata::model::blas
