// A blocking TCP connection that sends and receives wire frames
// (client/wire.hpp). Used by the C++ client, the serving server's
// connection threads, and the online-update publisher and subscriber.
//
// One thread uses a frame_socket at a time; close() (or the destructor)
// may be called from another thread to unblock a reader. Errors name the
// peer ("127.0.0.1:7000: connection refused").
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
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

// Bytes that the receive buffers (and replies) of a server's connections
// hold, all together, under a cap: try_take fails instead of going over
// (and counts the refusal). Thread-safe.
class byte_budget {
 public:
  explicit byte_budget(uint64_t cap = UINT64_MAX) : cap_(cap) {}
  bool try_take(uint64_t n) {
    uint64_t used = used_.load();
    do {
      if (n > cap_ || used > cap_ - n) {
        ++refusals_;
        return false;
      }
    } while (!used_.compare_exchange_weak(used, used + n));
    return true;
  }
  void give(uint64_t n) { used_ -= n; }
  uint64_t used() const { return used_.load(); }
  uint64_t cap() const { return cap_; }
  uint64_t refusals() const { return refusals_.load(); }

 private:
  const uint64_t cap_;
  std::atomic<uint64_t> used_{0}, refusals_{0};
};

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
  // Uses `socket` (which must outlive it) without owning it: its owner (a
  // connection_registry) closes it, after the frame_socket is gone.
  static frame_socket borrow(boost::asio::ip::tcp::socket& socket, std::string peer_name);
  // The same for a descriptor (a socket of its own is opened on it: it
  // costs the descriptors of another reactor; prefer the one above).
  static frame_socket borrow(int fd, std::string peer_name);
  // Charges the payload buffer received into (one frame per socket) to
  // `budget` as it grows; a frame that would go over the cap fails with
  // capacity_exceeded. Null: no budget.
  void set_budget(byte_budget* budget);
  // Frees `f`'s payload buffer if it holds more than `keep` bytes, and
  // gives them back to the budget.
  void trim(frame& f, size_t keep = 256 * 1024);

 private:
  explicit frame_socket(std::nullptr_t);  // no socket of its own (borrow)
  // Reads `length` payload bytes into `payload`, growing it as they arrive.
  status read_payload(uint32_t length, std::vector<std::byte>& payload);

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::wire
