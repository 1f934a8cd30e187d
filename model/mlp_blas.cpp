#include "model/mlp_blas.hpp"

#include <mutex>
#include <string>

#if STRATA_BLAS_BLIS
#include <blis.h>  // with -I .../blis-openmp, whose cblas.h follows
#include <cblas.h>
#else
#include <cblas.h>
#endif

namespace strata::model::blas {
namespace {

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }
int i(size_t n) { return static_cast<int>(n); }

}  // namespace

void use_single_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
#if STRATA_BLAS_BLIS
    bli_thread_set_num_threads(1);
#else
    openblas_set_num_threads(1);
#endif
  });
}

int threads() {
#if STRATA_BLAS_BLIS
  return static_cast<int>(bli_thread_get_num_threads());
#else
  return openblas_get_num_threads();
#endif
}

const char* name() {
#if STRATA_BLAS_BLIS
  static const std::string n = std::string("blis ") + bli_info_get_version_str();
  return n.c_str();
#else
  return openblas_get_config();
#endif
}

void sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, const float* a,
           size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), i(m), i(n), i(k), alpha, a, i(lda), b,
              i(ldb), beta, c, i(ldc));
}

void sgemv(bool trans_a, size_t m, size_t n, float alpha, const float* a, size_t lda,
           const float* x, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, op(trans_a), i(m), i(n), alpha, a, i(lda), x, 1, beta, y, 1);
}

}  // namespace strata::model::blas
