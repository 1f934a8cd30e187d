// Memory-typed spans: host and device memory are different types, so a
// device pointer can never be passed where host memory is expected.
//
// The HBM cache interface (cache_backend.hpp) takes memory_span<T>, which
// carries its memory kind; each backend states which kind it accepts and
// refuses the other with errc::invalid_argument. No CUDA header is needed.
#pragma once

#include <cstddef>
#include <span>

namespace strata {

enum class memory_kind : unsigned char { host, device };

template <class T>
class memory_span {
 public:
  constexpr memory_span() = default;
  constexpr memory_span(T* data, size_t size, memory_kind kind)
      : data_(data), size_(size), kind_(kind) {}
  constexpr T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr memory_kind kind() const { return kind_; }
  // Only host memory may be viewed as a std::span.
  std::span<T> host() const { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  memory_kind kind_ = memory_kind::host;
};

template <class T>
memory_span<T> host_span(std::span<T> s) {
  return {s.data(), s.size(), memory_kind::host};
}
template <class T>
memory_span<T> device_span(T* data, size_t size) {
  return {data, size, memory_kind::device};
}

}  // namespace strata
