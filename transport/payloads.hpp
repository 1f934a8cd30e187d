// Which value each frame type carries (docs/wire-format.md, "Payloads"),
// as one function: decodes `payload` as the value of `header.type` and
// throws it away. The fuzzer and the corpus test run every decoded frame
// through it; the relays and proxies decode the same types.
#pragma once

#include <span>

#include "common/error.hpp"
#include "transport/frame.hpp"

namespace strata::transport {

// A reply's value depends on its request, which a lone frame does not say:
// replies are checked against every reply type, and pass if any fits.
status check_payload_value(const frame_header& header, std::span<const std::byte> payload);

}  // namespace strata::transport
