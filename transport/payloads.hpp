// Which value each frame type carries (docs/wire-format.md, "Payloads"),
// as one function: decodes `payload` as the value of `header.type` and
// throws it away. The frame fuzzer (tests/fuzz/frame_fuzz.cpp) and the
// corpus tests run every frame through it; the bridge (hello) and the
// relays and proxies (remote_actors.cpp) decode the same types.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "transport/frame.hpp"

namespace strata::transport {

// What a hello (and hello_ack) carries.
struct hello_payload {
  std::string name;
  uint64_t node_id = 0;
  std::string host_id;
  std::vector<uint8_t> worker_address;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello_payload& x) {
  return f(x.name, x.node_id, x.host_id, x.worker_address);
}

// A reply's value depends on its request, which a lone frame does not say:
// replies are checked against every reply type, and pass if any fits.
status check_payload_value(const frame_header& header, std::span<const std::byte> payload);

}  // namespace strata::transport
