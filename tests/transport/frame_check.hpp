// What the fuzzer and the corpus test do with one input: decode it as a
// whole frame (header, length, checksum), then its payload by the type's
// rule. Ok only for a well-formed frame; never crashes.
#pragma once

#include <span>

#include "transport/frame.hpp"
#include "transport/payloads.hpp"

namespace strata::transport {

inline status check_whole_frame(std::span<const std::byte> bytes) {
  auto header = decode_frame(bytes);
  if (!header) return header.err();
  return check_payload_value(*header, bytes.subspan(frame_header_bytes));
}

}  // namespace strata::transport
