// STRATA_HD marks functions compiled for both host and device: nvcc sees
// __host__ __device__, a plain C++ compiler sees nothing. Headers using it
// (xxh3.hpp, device_optimizer.hpp) stay includable from host-only tests,
// which check the device arithmetic against the CPU code on machines
// without a GPU. No CUDA header is included.
#pragma once

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif
