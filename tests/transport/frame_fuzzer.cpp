// libFuzzer harness for the frame decoder and the payload rules:
//   cmake --build build --target frame_fuzzer   (needs clang++)
//   build/tests/transport/frame_fuzzer tests/transport/corpus -max_total_time=60
// A crash, sanitizer report or leak is a bug; save the input into
// tests/transport/corpus/ so corpus_test replays it in CI.
#include <cstddef>
#include <cstdint>

#include "tests/transport/frame_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::transport;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  (void)check_whole_frame(bytes);
  // The checksum stops most mutations before the payload rules; feed them
  // directly too: first byte picks a frame type, the rest is the payload.
  if (size >= 1) {
    frame_header h;
    h.type = static_cast<frame_type>(data[0] < 16   ? data[0] % 5
                                     : data[0] < 64 ? data[0] % 50
                                                    : 64 + data[0] % 2);
    if (is_known_type(static_cast<uint16_t>(h.type)))
      (void)check_payload_value(h, bytes.subspan(1));
  }
  return 0;
}
