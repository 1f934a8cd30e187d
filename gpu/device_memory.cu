#include <string>

#include "gpu/cuda_check.cuh"
#include "gpu/device_memory.hpp"

namespace strata::gpu {

error cuda_failure(cudaError_t code, const char* call, const char* file, int line) {
  std::string where(file);
  if (const auto cut = where.rfind("gpu/"); cut != std::string::npos) where = where.substr(cut);
  std::string msg = std::string(call) + " failed: " + cudaGetErrorString(code) + " (" +
                    cudaGetErrorName(code) + ") at " + where + ":" + std::to_string(line);
  return error(code == cudaErrorMemoryAllocation ? errc::capacity_exceeded : errc::unavailable,
               std::move(msg));
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but keep the next call clean
    return "no usable CUDA device: cudaGetDeviceCount failed: " +
           std::string(cudaGetErrorString(code)) + " (" + cudaGetErrorName(code) + ")";
  }
  if (count <= 0) return "no CUDA device: cudaGetDeviceCount found 0";
  return {};
}

expected<std::string> device_description() {
  cudaDeviceProp prop{};
  STRATA_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  return std::string(prop.name) + ", sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB";
}

device_memory::~device_memory() {
  for (void* p : blocks_) (void)cudaFree(p);
}

std::byte* device_memory::allocate(size_t bytes) {
  void* p = nullptr;
  const status st = STRATA_CUDA(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  STRATA_ASSERT(st, st ? "" : st.err().message().c_str());
  blocks_.push_back(p);
  return static_cast<std::byte*>(p);
}

void device_memory::upload(std::byte* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const status st = STRATA_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  STRATA_ASSERT(st, st ? "" : st.err().message().c_str());
}

void device_memory::download(void* dst, const std::byte* src, size_t bytes) {
  if (bytes == 0) return;
  const status st = STRATA_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  STRATA_ASSERT(st, st ? "" : st.err().message().c_str());
}

expected<pinned_buffer> pinned_buffer::create(size_t bytes) {
  void* p = nullptr;
  STRATA_CUDA_TRY(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
  return pinned_buffer(static_cast<std::byte*>(p), bytes);
}

pinned_buffer::pinned_buffer(pinned_buffer&& other) noexcept
    : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& other) noexcept {
  if (this != &other) {
    if (data_) (void)cudaFreeHost(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

pinned_buffer::~pinned_buffer() {
  if (data_) (void)cudaFreeHost(data_);
}

expected<double> copy_bandwidth(size_t bytes, int reps) {
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto cleanup = [&] {
    if (a) (void)cudaFree(a);
    if (b) (void)cudaFree(b);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
  };
  auto run = [&]() -> expected<double> {
    STRATA_CUDA_TRY(cudaMalloc(&a, bytes));
    STRATA_CUDA_TRY(cudaMalloc(&b, bytes));
    STRATA_CUDA_TRY(cudaMemset(a, 1, bytes));
    STRATA_CUDA_TRY(cudaEventCreate(&start));
    STRATA_CUDA_TRY(cudaEventCreate(&stop));
    STRATA_CUDA_TRY(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
    float best_ms = 0;
    for (int r = 0; r < reps; ++r) {
      STRATA_CUDA_TRY(cudaEventRecord(start));
      STRATA_CUDA_TRY(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
      STRATA_CUDA_TRY(cudaEventRecord(stop));
      STRATA_CUDA_TRY(cudaEventSynchronize(stop));
      float ms = 0;
      STRATA_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
      if (r == 0 || ms < best_ms) best_ms = ms;
    }
    return best_ms > 0 ? double(bytes) / (double(best_ms) * 1e-3) : 0.0;
  };
  auto result = run();
  cleanup();
  return result;
}

}  // namespace strata::gpu
