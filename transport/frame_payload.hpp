// A frame's payload as it goes out (docs/transport.md, "Zero-copy frames").
//
// The payload bytes are exactly encode_payload's (the wire format does not
// change), but held in pieces: the small fields (counts, scalars) in one
// inline buffer, and each large array of arithmetic values (keys, rows,
// gradients) by reference, where the message that owns it keeps it. The
// bridge sends the pieces as a UCX iov behind the header, so a pull
// reply's rows or a push's gradients go out without an encode copy, and the
// sender's CRC32C is one pass over the pieces (seal below).
//
// gather_payload() moves its values into a shared holder that the payload
// keeps alive until the send completed (the bridge's send_op owns the
// payload); moving a vector keeps its buffer, so nothing is copied.
//
// Thread-safety: a value; the referenced arrays are immutable once built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/crc32c.hpp"
#include "transport/codec.hpp"
#include "transport/frame.hpp"

namespace strata::transport {

class frame_payload {
 public:
  // Arrays smaller than this are copied into the inline buffer: an iov
  // piece costs more than copying a few hundred bytes.
  static constexpr size_t min_referenced_bytes = 1024;

  frame_payload() = default;
  // One inline piece (encode_payload's bytes; control frames, tests).
  frame_payload(std::vector<std::byte> bytes)  // NOLINT: implicit on purpose
      : inline_(std::move(bytes)), size_(inline_.size()) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // True when every byte is in the inline buffer (sent as one contiguous piece).
  bool contiguous() const { return referenced_.empty(); }
  const std::vector<std::byte>& inline_bytes() const { return inline_; }

  // Calls f(const std::byte*, size_t) for each non-empty piece, in wire order.
  template <class F>
  void for_each_piece(F&& f) const {
    size_t pos = 0;
    for (const auto& r : referenced_) {
      if (r.inline_end > pos) f(inline_.data() + pos, r.inline_end - pos);
      if (r.size > 0) f(r.data, r.size);
      pos = r.inline_end;
    }
    if (inline_.size() > pos) f(inline_.data() + pos, inline_.size() - pos);
  }

  // The payload in one buffer (test seams that rewrite a frame).
  std::vector<std::byte> flatten() const {
    std::vector<std::byte> out;
    out.reserve(size_);
    for_each_piece([&](const std::byte* p, size_t n) { out.insert(out.end(), p, p + n); });
    return out;
  }

 private:
  template <class... Ts>
  friend frame_payload gather_payload(Ts&&... xs);
  friend struct gather_sink;

  // A referenced array, after the inline bytes up to inline_end.
  struct referenced {
    size_t inline_end = 0;
    const std::byte* data = nullptr;
    size_t size = 0;
  };
  std::vector<std::byte> inline_;
  std::vector<referenced> referenced_;
  std::shared_ptr<const void> keep_alive_;
  size_t size_ = 0;
};

// The sink of gather_payload's writer: small fields inline, large arrays
// by reference.
struct gather_sink {
  frame_payload* out;
  size_t size = 0;
  void raw(const void* data, size_t n) {
    size += n;
    const auto* bytes = static_cast<const std::byte*>(data);
    out->inline_.insert(out->inline_.end(), bytes, bytes + n);
  }
  void array(const void* data, size_t n) {
    if (n < frame_payload::min_referenced_bytes) return raw(data, n);
    size += n;
    out->referenced_.push_back({out->inline_.size(), static_cast<const std::byte*>(data), n});
  }
};

// The payload of values `xs` (encode_payload's bytes), their arrays sent
// from where they are: the values are moved into a holder the payload
// keeps alive (pass rvalues; an lvalue is copied into it).
template <class... Ts>
frame_payload gather_payload(Ts&&... xs) {
  auto holder = std::make_shared<std::tuple<std::decay_t<Ts>...>>(std::forward<Ts>(xs)...);
  frame_payload out;
  out.inline_.reserve(64);
  basic_wire_writer<gather_sink> w(gather_sink{&out});
  std::apply([&](const auto&... vs) { w(vs...); }, *holder);
  out.size_ = w.size();
  out.keep_alive_ = std::move(holder);
  return out;
}

// Fills in header.crc (and payload_bytes) for `payload`: one CRC32C pass
// over its pieces.
inline void seal_pieces(frame_header& header, const frame_payload& payload) {
  header.payload_bytes = static_cast<uint32_t>(payload.size());
  uint32_t crc = header_crc(header);
  payload.for_each_piece([&](const std::byte* p, size_t n) { crc = crc32c_extend(crc, p, n); });
  header.crc = crc;
}

}  // namespace strata::transport
