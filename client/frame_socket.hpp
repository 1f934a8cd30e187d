// A blocking TCP connection that sends and receives wire frames
// (client/wire.hpp). Used by the C++ client, the serving server's
// connection threads, and the online-update publisher and subscriber.
//
// One thread uses a frame_socket at a time; close() (or the destructor)
// may be called from another thread to unblock a reader. Errors name the
// peer ("127.0.0.1:7000: connection refused").
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/wire.hpp"
#include "common/error.hpp"

namespace strata::wire {

struct frame {
  frame_header header;
  std::vector<std::byte> payload;
};

struct endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};
// "host:port" -> endpoint; errors name the text.
expected<endpoint> parse_endpoint(const std::string& text);

class frame_socket {
 public:
  frame_socket();
  ~frame_socket();
  frame_socket(frame_socket&&) noexcept;
  frame_socket& operator=(frame_socket&&) noexcept;

  // Connects (TCP_NODELAY). `timeout` bounds every later receive (0: none).
  static expected<frame_socket> connect(const endpoint& peer,
                                        std::chrono::milliseconds timeout = {});
  // Takes over an accepted socket's file descriptor.
  static frame_socket adopt(int fd, std::string peer_name);

  bool is_open() const;
  const std::string& peer() const;
  status send(frame_type type, uint64_t request, std::span<const std::byte> payload);
  // Sends one frame whose payload is the concatenation of `parts` (no copy).
  status send_parts(frame_type type, uint64_t request,
                    std::initializer_list<std::span<const std::byte>> parts);
  // Sends bytes that already hold whole frames.
  status send_raw(std::span<const std::byte> frames);
  // Reads one frame, checks header and checksum.
  expected<frame> receive(uint32_t max_payload = max_payload_bytes);
  // The same into `out`, reusing its payload buffer.
  status receive_into(frame& out, uint32_t max_payload = max_payload_bytes);
  // The same, but a rows frame's versions and weights are read straight
  // into `rows` (no payload buffer, no decode copy; the checksum runs over
  // the parts); any other frame type lands in `out` as receive_into does.
  status receive_rows_into(frame& out, rows_reply& rows,
                           uint32_t max_payload = max_payload_bytes);
  // Shuts the connection down; a blocked receive returns an error.
  void close();

 private:
  // Reads `length` payload bytes into `payload`, growing it as they arrive.
  status read_payload(uint32_t length, std::vector<std::byte>& payload);

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::wire
