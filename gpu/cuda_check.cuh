// CUDA errors -> strata::error, at the gpu/ boundary (internal to gpu/).
//
// STRATA_CUDA(call) evaluates a CUDA runtime call and gives a status naming
// the call, the CUDA error and the source line: "cudaMalloc(&p, bytes)
// failed: out of memory (cudaErrorMemoryAllocation) at gpu/cuda_cache.cu:80".
// An allocation failure is errc::capacity_exceeded, anything else
// errc::unavailable (a missing, lost or faulted device).
#pragma once

#include <cuda_runtime.h>

#include "common/error.hpp"

namespace strata::gpu {

error cuda_failure(cudaError_t code, const char* call, const char* file, int line);

inline status cuda_status(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return {};
  return cuda_failure(code, call, file, line);
}

}  // namespace strata::gpu

#define STRATA_CUDA(call) ::strata::gpu::cuda_status((call), #call, __FILE__, __LINE__)
// Returns the error of a failed CUDA call from a function returning status
// or expected<T>.
#define STRATA_CUDA_TRY(call)                             \
  do {                                                    \
    ::strata::status strata_cuda_st_ = STRATA_CUDA(call); \
    if (!strata_cuda_st_) return strata_cuda_st_.err();   \
  } while (false)
