// Payload encoding of message values for the wire (docs/wire-format.md).
//
// The encoder and decoder are CAF 0.17 inspectors, so every message struct
// of actors/protocol.hpp is encoded through the same inspect() that CAF
// uses: no second field list to keep in sync. Encoding rules (little-endian):
// an arithmetic value is its bytes; bool is one byte (0/1); a string or a
// vector is a u64 count followed by its elements, and a vector of
// arithmetic values is one memcpy (no per-key work or allocation). Atoms
// are not encoded (the frame type says the operation).
//
// The decoder never trusts its input: a count larger than the bytes left
// can hold (at each element's smallest encoding, so a crafted count never
// allocates more than the payload could fill), a bool other than 0/1 or
// trailing bytes are errors naming the offset.
//
// Thread-safety: the writer and reader are single-use values.
#pragma once

#include <caf/meta/annotation.hpp>
#include <caf/meta/type_name.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.hpp"

namespace strata::transport {

// caf::atom_constant<V>: an empty type with a static value; not encoded.
template <class T>
inline constexpr bool is_atom = std::is_empty_v<T>&& requires {
  T::uint_value();
};

// Where a writer's bytes go. raw() takes small fields; array() a vector
// of arithmetic values (keys, rows, gradients), which a sink may keep by
// reference instead of copying (frame_payload.hpp). counting_sink only adds
// up the encoded size (encode_payload reserves it first, so a payload is
// written into one allocation, each byte once).
struct counting_sink {
  size_t size = 0;
  void raw(const void*, size_t n) { size += n; }
  void array(const void* data, size_t n) { raw(data, n); }
};
struct vector_sink {
  std::vector<std::byte>* out;
  size_t size = 0;
  void raw(const void* data, size_t n) {
    size += n;
    const auto* bytes = static_cast<const std::byte*>(data);
    out->insert(out->end(), bytes, bytes + n);
  }
  void array(const void* data, size_t n) { raw(data, n); }
};

template <class Sink>
class basic_wire_writer {
 public:
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;

  explicit basic_wire_writer(Sink sink) : sink_(std::move(sink)) {}
  size_t size() const { return sink_.size; }
  Sink& sink() { return sink_; }

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (apply(xs), ...);
  }

 private:
  void raw(const void* data, size_t size) { sink_.raw(data, size); }
  template <class T>
  void apply(const T& x) {
    if constexpr (std::is_base_of_v<caf::meta::annotation, T> || is_atom<T>) {
      // type names, other annotations and atoms are not encoded
    } else if constexpr (std::is_same_v<T, bool>) {
      const uint8_t b = x ? 1 : 0;
      raw(&b, 1);
    } else if constexpr (std::is_arithmetic_v<T>) {
      raw(&x, sizeof(T));
    } else if constexpr (std::is_same_v<T, std::string>) {
      const uint64_t n = x.size();
      raw(&n, sizeof n);
      raw(x.data(), x.size());
    } else if constexpr (requires {
                           typename T::value_type;
                           x.size();
                           x.data();
                         }) {
      using V = typename T::value_type;
      const uint64_t n = x.size();
      raw(&n, sizeof n);
      if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>) {
        sink_.array(x.data(), x.size() * sizeof(V));
      } else {
        for (const auto& e : x) apply(e);
      }
    } else {
      inspect(*this, const_cast<T&>(x));
    }
  }

  Sink sink_;
};
using wire_writer = basic_wire_writer<vector_sink>;

class wire_reader {
 public:
  using result_type = void;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;

  explicit wire_reader(std::span<const std::byte> in) : in_(in) {}

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (apply(xs), ...);
  }

  // Ok when every field decoded and no byte is left over.
  status finish() const {
    if (!error_.empty()) return error(errc::corrupt_data, error_);
    if (pos_ != in_.size()) {
      return error(errc::corrupt_data, "payload has " + std::to_string(in_.size() - pos_) +
                                           " trailing bytes at offset " + std::to_string(pos_));
    }
    return {};
  }

 private:
  bool take(void* out, size_t size) {
    if (!error_.empty()) return false;
    if (size > in_.size() - pos_) {
      fail("truncated payload: need " + std::to_string(size) + " bytes at offset " +
           std::to_string(pos_) + ", " + std::to_string(in_.size() - pos_) + " left");
      return false;
    }
    if (size != 0) std::memcpy(out, in_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  void fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
  }
  // The fewest bytes a V encodes to: a default V (its strings and vectors
  // empty, each then its 8-byte count), at least 1.
  template <class V>
  static size_t min_encoded_bytes() {
    static const size_t bytes = [] {
      basic_wire_writer<counting_sink> sizer({});
      const V empty{};
      sizer(empty);
      return sizer.size() == 0 ? size_t{1} : sizer.size();
    }();
    return bytes;
  }
  // A count whose elements take at least `min_bytes` each must fit.
  bool take_count(uint64_t& n, size_t min_bytes) {
    if (!take(&n, sizeof n)) return false;
    if (n > (in_.size() - pos_) / min_bytes) {
      fail("count " + std::to_string(n) + " at offset " + std::to_string(pos_ - sizeof n) +
           " exceeds the " + std::to_string(in_.size() - pos_) + " bytes left");
      return false;
    }
    return true;
  }
  template <class T>
  void apply(T& x) {
    if constexpr (std::is_base_of_v<caf::meta::annotation, std::remove_const_t<T>> || is_atom<T>) {
    } else if constexpr (std::is_same_v<T, bool>) {
      uint8_t b = 0;
      if (!take(&b, 1)) return;
      if (b > 1) fail("bool byte " + std::to_string(b) + " at offset " + std::to_string(pos_ - 1));
      x = b == 1;
    } else if constexpr (std::is_arithmetic_v<T>) {
      take(&x, sizeof(T));
    } else if constexpr (std::is_same_v<T, std::string>) {
      uint64_t n = 0;
      if (!take_count(n, 1)) return;
      x.resize(n);
      take(x.data(), n);
    } else if constexpr (requires {
                           typename T::value_type;
                           x.resize(0);
                           x.data();
                         }) {
      using V = typename T::value_type;
      uint64_t n = 0;
      if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>) {
        if (!take_count(n, sizeof(V))) return;
        x.resize(n);
        take(x.data(), n * sizeof(V));
      } else {
        // Bound the count by what the bytes left can hold at the element's
        // smallest encoding, before resize allocates n * sizeof(V): a
        // crafted count must not reserve many times the payload.
        if (!take_count(n, min_encoded_bytes<V>())) return;
        x.resize(n);
        for (auto& e : x) apply(e);
      }
    } else {
      inspect(*this, x);
    }
  }

  std::span<const std::byte> in_;
  size_t pos_ = 0;
  std::string error_;
};

// Encodes values (in order) into a payload.
template <class... Ts>
std::vector<std::byte> encode_payload(const Ts&... xs) {
  basic_wire_writer<counting_sink> sizer({});
  sizer(xs...);
  std::vector<std::byte> out;
  out.reserve(sizer.size());
  wire_writer w(vector_sink{&out});
  w(xs...);
  return out;
}

// Decodes a payload into values (in order); errors name the offset.
template <class... Ts>
status decode_payload(std::span<const std::byte> payload, Ts&... xs) {
  wire_reader r(payload);
  r(xs...);
  return r.finish();
}

}  // namespace strata::transport
