// The serving wire format (client/wire.hpp) as its readers meet it on a
// TCP stream: the input is a byte stream of frames.
// - Over a socket pair, as the servers read requests (frame_socket::
//   receive_into, then the decoder of the frame's type: binary_server,
//   update_stream) and as the client reads replies (receive_rows_into: the
//   rows land straight in the caller's buffers).
// - In memory, frame by frame, every payload decoded whatever its
//   checksum says (mutations rarely keep a CRC32C right; the decoders must
//   not trust their input either way).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <span>

#include "client/frame_socket.hpp"
#include "client/wire.hpp"
#include "tests/fuzz/fuzz_entries.hpp"

namespace {

using namespace strata::wire;

// Larger inputs would fill the socket buffer before anyone reads.
constexpr size_t max_socket_input = 64 * 1024;

void decode(frame_type type, std::span<const std::byte> payload) {
  switch (type) {
    case frame_type::lookup:
    case frame_type::prefetch:
      (void)decode_key_request(payload);
      break;
    case frame_type::rows:
      (void)decode_rows(payload);
      break;
    case frame_type::error:
      (void)decode_error(payload);
      break;
    case frame_type::subscribe:
      (void)decode_subscribe(payload);
      break;
    case frame_type::updates:
      (void)decode_updates(payload);
      break;
    case frame_type::push:
      (void)decode_push(payload);
      break;
    case frame_type::challenge:
      (void)decode_challenge(payload);
      break;
    case frame_type::proof:
      (void)decode_proof(payload);
      break;
    case frame_type::list_keys:
      (void)decode_list_keys(payload);
      break;
    case frame_type::table_list:
      (void)decode_table_list(payload);
      break;
    case frame_type::key_list:
      (void)decode_key_list(payload);
      break;
    case frame_type::ack:
    case frame_type::tables:
      break;  // the client checks only its type; tables carries nothing
  }
}

void decode_in_memory(std::span<const std::byte> bytes) {
  while (bytes.size() >= header_bytes) {
    auto header = parse_header(bytes.first<header_bytes>());
    if (!header) return;
    bytes = bytes.subspan(header_bytes);
    const auto payload = bytes.first(std::min<size_t>(header->length, bytes.size()));
    bytes = bytes.subspan(payload.size());
    (void)check_payload(*header, payload);
    decode(header->type, payload);
  }
}

// A socket whose peer sent `bytes` and closed its side.
frame_socket socket_with(std::span<const std::byte> bytes) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return {};
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::write(fds[1], bytes.data() + sent, bytes.size() - sent);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::close(fds[1]);
  return frame_socket::adopt(fds[0], "fuzz");
}

}  // namespace

int strata_fuzz_wire(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  decode_in_memory(bytes);
  if (size > max_socket_input) return 0;
  {
    auto server = socket_with(bytes);
    frame received;
    while (server.is_open() && server.receive_into(received)) {
      decode(received.header.type, received.payload);
    }
  }
  {
    auto client = socket_with(bytes);
    frame other;
    rows_reply rows;
    while (client.is_open() && client.receive_rows_into(other, rows)) {
    }
  }
  return 0;
}
