// Transport frames, through the checks the UCX bridge runs on an arriving
// active message (node_bridge.cpp, received/complete): check_arrival on
// the 48-byte user header and the data's length, check_payload once the
// data is in, then the payload rule of the frame's type (the values the
// bridge and the relays decode). Input: header bytes then payload bytes,
// as the corpus stores a frame.
//
// Mutations rarely keep the CRC32C right, so a frame whose only fault is
// its checksum is sealed again and its payload decoded anyway: the
// payload decoders see fuzzed bytes, not only the checksum check.
#include <algorithm>
#include <span>

#include "tests/fuzz/fuzz_entries.hpp"
#include "transport/frame.hpp"
#include "transport/payloads.hpp"

int strata_fuzz_frame(const uint8_t* data, size_t size) {
  using namespace strata::transport;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const auto header = bytes.first(std::min(size, frame_header_bytes));
  const auto payload = bytes.subspan(header.size());
  auto h = check_arrival(header, payload.size());
  if (!h) return 0;
  if (!check_payload(*h, payload)) seal(*h, payload);
  (void)check_payload_value(*h, payload);
  return 0;
}
