// Device discovery and plain memory helpers of the CUDA backend, behind a
// header without CUDA includes (code outside gpu/ — tests, the bench — uses
// them without seeing CUDA types).
//
//  - unavailable_reason(): "" when a CUDA device is usable, else why not
//    ("cudaGetDeviceCount failed: ..."). Any error counts as "no device"
//    (on a machine without a driver cudaGetDeviceCount fails with
//    cudaErrorInsufficientDriver).
//  - device_memory: device allocations freed together on destruction, with
//    blocking uploads and downloads (tests, benchmarks; not the hot path).
//  - pinned_buffer: page-locked host memory for staging rows between the
//    DRAM tier and the device, so copies run asynchronously.
//  - copy_bandwidth(): the device's own cudaMemcpy device-to-device rate,
//    the benchmark's limit.
//
// Errors: CUDA failures become strata::error (errc::unavailable, or
// capacity_exceeded for an allocation) naming the CUDA call. Thread-safety:
// one owner per object.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace strata::gpu {

std::string unavailable_reason();

// A short description of device 0 ("NVIDIA H200, sm_90, 139 GiB"), or the
// error.
expected<std::string> device_description();

class device_memory {
 public:
  device_memory() = default;
  ~device_memory();
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;

  // REQUIRES: a usable device. A failed allocation asserts (test helper).
  std::byte* allocate(size_t bytes);
  void upload(std::byte* dst, const void* src, size_t bytes);
  void download(void* dst, const std::byte* src, size_t bytes);

 private:
  std::vector<void*> blocks_;
};

class pinned_buffer {
 public:
  static expected<pinned_buffer> create(size_t bytes);
  pinned_buffer(pinned_buffer&& other) noexcept;
  pinned_buffer& operator=(pinned_buffer&& other) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  pinned_buffer(std::byte* data, size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Bytes per second copied by cudaMemcpyAsync device-to-device of a `bytes`
// buffer, best of `reps` timed copies (each byte counted once).
expected<double> copy_bandwidth(size_t bytes, int reps);

}  // namespace strata::gpu
