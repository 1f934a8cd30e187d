// The binary serving protocol: versioned, checksummed frames over a byte
// stream (TCP). docs/serving.md is the long form.
//
// Every frame is a 24-byte header followed by `length` payload bytes:
//
//   off size field
//   0   4    magic   "STRV" (0x56525453 little-endian)
//   4   2    version (= wire_version; a peer refuses any other)
//   6   2    type    (frame_type)
//   8   4    length  payload bytes (<= max_payload_bytes)
//   12  4    crc32c  of the payload
//   16  8    request id (echoed in the reply; 0 for stream frames)
//
// All integers little-endian; floats IEEE-754 binary32. Payloads by type:
//   lookup, prefetch   table (u16 length + bytes), n (u32), n x key (u64)
//   rows               dim (u32), n (u32), n x version (u64), n x dim x f32
//   ack                n (u32)
//   error              code (u16, errc), message (u32 length + bytes)
//   subscribe          table, stream (u64), after_seq (u64), nonce (32 bytes:
//                      the subscriber's challenge to the publisher)
//   challenge          nonce (32), proof (32): the publisher's challenge and
//                      its answer to the subscriber's (auth::prove)
//   proof              proof (32): the subscriber's answer to the challenge
//                      (then the publisher streams updates; docs/serving.md,
//                      "Online updates")
//   updates            table, stream (u64), seq (u64), dim (u32), n (u32),
//                      n x key (u64), n x version (u64), n x dim x f32
//   push               table, dim (u32), n (u32), n x key (u64),
//                      n x dim x f32 gradients, then optionally a push
//                      id (u64, non-zero: a retry of it applies once;
//                      absent in older clients) (a training gateway; ack n)
//   tables             (empty): the served tables' names and dims
//   table_list         n (u32), n x (name (u16 length + bytes), dim (u32))
//   list_keys          table, limit (u32, 1..max_list_keys): some stored keys
//   key_list           n (u32, <= the limit), n x key (u64)
// A frame with a bad magic, version, type, length or checksum, or a payload
// that does not parse exactly, is rejected with an error naming the field:
// nothing in it is trusted.
//
// Plain functions and values; thread-compatible.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace strata::wire {

inline constexpr uint32_t magic = 0x56525453;  // "STRV"
inline constexpr uint16_t wire_version = 1;
inline constexpr size_t header_bytes = 24;
inline constexpr uint32_t max_payload_bytes = 256u << 20;

enum class frame_type : uint16_t {
  lookup = 1,
  rows = 2,
  prefetch = 3,
  ack = 4,
  error = 5,
  subscribe = 6,
  updates = 7,
  push = 8,
  challenge = 9,
  proof = 10,
  tables = 11,
  table_list = 12,
  list_keys = 13,
  key_list = 14,
};

// A list_keys request asks for at most this many keys (a bounded reply).
inline constexpr uint32_t max_list_keys = 1000;

struct frame_header {
  frame_type type = frame_type::error;
  uint32_t length = 0;
  uint32_t crc = 0;
  uint64_t request = 0;
};

// Appends a whole frame (header + payload) to `out`.
void append_frame(std::vector<std::byte>& out, frame_type type, uint64_t request,
                  std::span<const std::byte> payload);
// Checks magic, version, type and length (not the checksum: that needs the payload).
expected<frame_header> parse_header(std::span<const std::byte, header_bytes> bytes,
                                    uint32_t max_payload = max_payload_bytes);
status check_payload(const frame_header& header, std::span<const std::byte> payload);

// Payload writer and reader (little-endian).
class writer {
 public:
  explicit writer(std::vector<std::byte>& out) : out_(out) {}
  void u16(uint16_t v) { raw(&v, 2); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void text16(const std::string& s);
  void text32(const std::string& s);
  void raw(const void* data, size_t size);

 private:
  std::vector<std::byte>& out_;
};

class reader {
 public:
  reader(std::span<const std::byte> in, const char* what) : in_(in), what_(what) {}
  bool u16(uint16_t& v) { return raw(&v, 2); }
  bool u32(uint32_t& v) { return raw(&v, 4); }
  bool u64(uint64_t& v) { return raw(&v, 8); }
  bool text16(std::string& s);
  bool text32(std::string& s);
  bool raw(void* data, size_t size);
  // A view of the next `size` bytes (advances).
  bool view(std::span<const std::byte>& out, size_t size);
  bool at_end() const { return offset_ == in_.size(); }
  // "lookup payload: truncated at byte 12 (field keys)"
  error fail(const char* field) const;

 private:
  std::span<const std::byte> in_;
  size_t offset_ = 0;
  const char* what_;
};

// --- typed payloads ---------------------------------------------------------
struct key_request {  // lookup, prefetch
  std::string table;
  std::vector<uint64_t> keys;
};
struct rows_reply {
  uint32_t dim = 0;
  std::vector<uint64_t> versions;
  std::vector<float> weights;  // n x dim
};
struct error_reply {
  uint16_t code = 0;
  std::string message;
};
// Challenge-response bytes (auth::nonce and auth::mac are the same arrays;
// the codec does not link the crypto).
using auth_bytes = std::array<uint8_t, 32>;
struct subscribe_request {
  std::string table;
  uint64_t stream = 0;     // the publisher's stream id the subscriber saw last (0: none)
  uint64_t after_seq = 0;  // resend updates after this sequence number
  auth_bytes nonce{};      // the subscriber's challenge (fresh per connection)
};
struct challenge_frame {  // publisher -> subscriber
  auth_bytes nonce{};     // the publisher's challenge
  auth_bytes proof{};     // its answer to the subscriber's nonce
};
struct proof_frame {  // subscriber -> publisher
  auth_bytes proof{};
};
struct push_request {  // gradients for a training cluster (async mode)
  std::string table;
  uint32_t dim = 0;
  std::vector<uint64_t> keys;
  std::vector<float> grads;  // n x dim
  uint64_t id = 0;           // push id (0: none; the optional trailing u64)
};
struct table_info {  // one entry of a table_list reply
  std::string name;
  uint32_t dim = 0;
};
struct list_keys_request {
  std::string table;
  uint32_t limit = 0;  // 1..max_list_keys
};
struct update_batch {
  std::string table;
  uint64_t stream = 0;
  uint64_t seq = 0;
  uint32_t dim = 0;
  std::vector<uint64_t> keys;
  std::vector<uint64_t> versions;
  std::vector<float> weights;  // n x dim
};

void encode(std::vector<std::byte>& out, const key_request& r);
void encode(std::vector<std::byte>& out, const rows_reply& r);
void encode(std::vector<std::byte>& out, const error_reply& r);
void encode(std::vector<std::byte>& out, const subscribe_request& r);
void encode(std::vector<std::byte>& out, const update_batch& r);
void encode(std::vector<std::byte>& out, const challenge_frame& r);
void encode(std::vector<std::byte>& out, const proof_frame& r);
void encode(std::vector<std::byte>& out, const std::vector<table_info>& tables);
void encode(std::vector<std::byte>& out, const list_keys_request& r);
void encode_key_list(std::vector<std::byte>& out, std::span<const uint64_t> keys);
// A push straight from the caller's arrays (no copy into a request struct).
// `id` 0 writes no id (the payload older clients send).
void encode_push(std::vector<std::byte>& out, const std::string& table, uint32_t dim,
                 std::span<const uint64_t> keys, std::span<const float> grads, uint64_t id = 0);
// Reply payload: only the header fields; the rows follow from arrays given.
void encode_rows(std::vector<std::byte>& out, uint32_t dim, std::span<const uint64_t> versions,
                 std::span<const float> weights);

expected<key_request> decode_key_request(std::span<const std::byte> payload);
expected<rows_reply> decode_rows(std::span<const std::byte> payload);
// The same into `out`, reusing its vectors' capacity.
status decode_rows_into(std::span<const std::byte> payload, rows_reply& out);
expected<error_reply> decode_error(std::span<const std::byte> payload);
expected<subscribe_request> decode_subscribe(std::span<const std::byte> payload);
expected<update_batch> decode_updates(std::span<const std::byte> payload);
expected<challenge_frame> decode_challenge(std::span<const std::byte> payload);
expected<proof_frame> decode_proof(std::span<const std::byte> payload);
expected<push_request> decode_push(std::span<const std::byte> payload);
expected<std::vector<table_info>> decode_table_list(std::span<const std::byte> payload);
// Refuses a limit of 0 or over max_list_keys (invalid_argument naming it).
expected<list_keys_request> decode_list_keys(std::span<const std::byte> payload);
expected<std::vector<uint64_t>> decode_key_list(std::span<const std::byte> payload);

}  // namespace strata::wire
