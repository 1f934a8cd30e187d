// The wire format of strata's node-to-node transport (docs/wire-format.md).
//
// A frame is a fixed 48-byte header followed by `payload_bytes` bytes of
// payload. Over UCX the header travels as the active message's user header
// and the payload as its data (eager or rendezvous); on disk (the fuzzing
// corpus) a frame is the header bytes immediately followed by the payload.
// Every multi-byte field is little-endian. The CRC32C covers the header
// (with its crc field zeroed) and the payload, so a flipped bit anywhere is
// caught.
//
// decode_header() checks what the header alone can tell (magic, version,
// type, size limit); check_payload() the length and checksum once the
// payload is in. Neither trusts its input: a malformed, truncated or
// oversized frame is an error naming the field, never a crash.
//
// Thread-safety: pure functions on values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace strata::transport {

inline constexpr uint32_t frame_magic = 0x46525453;  // "STRF" little-endian
// 2: push_request gained its push id (issue 15 item 5; docs/wire-format.md).
// 3: the hello exchange proves the cluster secret (hello_payload's nonce,
// proof, refusal; hello_proof, hello_welcome, hello_refused), shard_checkpoint
// carries the epoch only, credit frames (issue 16 item 1).
inline constexpr uint16_t wire_version = 3;
inline constexpr size_t frame_header_bytes = 48;
// Default upper bound of a payload; a larger length is rejected before
// any buffer is allocated. 4096 rows of dim 128 Adam (~6.4 MiB) fit with room.
inline constexpr uint32_t default_max_payload_bytes = 256u << 20;

// What a frame carries. Control frames (< 16) are not sequenced; requests,
// one-way messages and replies are (per sender, in send order).
enum class frame_type : uint16_t {
  // Connection set-up, a mutual challenge-response over the cluster secret
  // (docs/multi-node.md, "Membership"); every one carries a hello_payload.
  hello = 1,          // connector: name, node id, host id, its nonce
  hello_ack = 2,      // acceptor: the same, its proof over the connector's nonce
  hello_proof = 6,    // connector: its proof over the acceptor's nonce, worker address
  hello_welcome = 7,  // acceptor: admitted; its worker address
  hello_refused = 8,  // either side: why the other was not admitted (then it closes)
  heartbeat = 3,      // empty; proves the sender alive
  goodbye = 4,        // empty; the sender stops (graceful)
  credit = 5,         // u64: the receiver delivered every sequenced frame up to this seq

  // Requests and one-way messages to an exported actor (`target`).
  shard_pull = 16,        // vector<u64> -> pull_reply
  shard_pull_ahead = 23,  // vector<u64> -> pull_reply (a cache's prefetch fill)
  shard_push = 17,        // push_request -> push_reply
  shard_write_back = 18,  // row_batch -> ok
  shard_prefetch = 19,    // vector<u64>, one-way
  shard_tick = 20,        // u32, one-way
  shard_drain = 21,       // () -> ok
  shard_stats = 22,       // () -> tier_stats
  cache_lookup = 24,      // vector<u64> -> lookup_reply
  cache_prefetch = 25,    // vector<u64>, one-way
  cache_push = 26,        // push_request -> push_ack
  cache_pass_start = 27,  // u64 pass -> ok
  cache_pass_end = 28,    // u64 pass -> ok
  cache_drain = 29,       // () -> ok
  cache_stats = 30,       // () -> tier_stats
  dense_push = 32,        // vector<float> -> u64
  dense_pull = 33,        // () -> dense_weights
  dense_stats = 34,       // () -> actor_stats
  shard_checkpoint = 36,  // u64 epoch -> ok (no path: the shard derives its directory)
  shard_copied = 37,      // u64 epoch -> u64 rows
  // Scaling across nodes (docs/scaling.md): actor handles travel as
  // actor_ref (node name, target), payloads.hpp.
  shard_migrate = 38,     // migration_wire -> migration_stats
  shard_fence = 39,       // u64 epoch -> migration_stats
  shard_migrate_in = 42,  // row_batch -> ok
  shard_commit = 43,      // routing_wire -> ok
  shard_resend = 45,      // u32 partition -> row_batch
  cache_map = 31,         // routing_wire -> ok
  // A node's spawner (deploy/node_spawner.hpp): the index only, never a path.
  spawn_shard = 56,      // u32 index -> ok (exported as shard_base + index)
  retire_shard = 57,     // u32 index -> ok (exited, its files removed)
  worker_run = 40,       // u64 batches, u64 epoch -> worker_result
  worker_stats = 41,     // () -> actor_stats
  worker_progress = 44,  // progress_report, one-way (a remote worker's, to its runner)
  worker_rebind = 46,    // vector<actor_ref> (its cache tiers, in order) -> ok
  // A serving node's lookups for clients in the cluster (docs/serving.md):
  // payloads are the binary serving protocol's (client/wire.hpp).
  serve_lookup = 52,    // key_request -> rows payload
  serve_prefetch = 53,  // key_request -> ack payload (u32 n)
  serve_push = 54,      // push payload -> ack payload (a training gateway)
  echo = 48,            // any payload, answered with the same bytes (tests, bench)
  sink = 49,            // any payload, one-way, dropped (bench)

  // Replies (request_id names the request).
  reply = 64,        // the encoded reply value
  reply_error = 65,  // a UTF-8 error text naming what failed and where
};

// True for the frame types above; anything else is rejected.
bool is_known_type(uint16_t type);
bool is_sequenced(frame_type type);
std::string_view to_string(frame_type type);

struct frame_header {
  uint32_t magic = frame_magic;
  uint16_t version = wire_version;
  frame_type type = frame_type::heartbeat;
  uint64_t sender = 0;      // the sending node's id (random per process start)
  uint64_t seq = 0;         // per (sender, receiver): 1, 2, ...; 0 for control frames
  uint64_t request_id = 0;  // requests and their replies; 0 otherwise
  uint32_t target = 0;      // exported actor on the receiving node
  uint32_t payload_bytes = 0;
  uint32_t crc = 0;       // CRC32C of header (crc = 0) + payload
  uint32_t reserved = 0;  // must be 0
};

// Writes the header into exactly frame_header_bytes bytes.
void encode_header(const frame_header& header, std::span<std::byte, frame_header_bytes> out);

// CRC32C of the header with its crc field zeroed: a frame's checksum is
// this extended (crc32c_extend) over the payload, piece by piece if need be.
uint32_t header_crc(const frame_header& header);

// Fills in header.crc for `payload` (and header.payload_bytes).
void seal(frame_header& header, std::span<const std::byte> payload);

// Parses and checks a header: magic, version, known type, reserved zero,
// payload_bytes <= max_payload. Errors are corrupt_data (or format_mismatch
// for another version) and name the field.
expected<frame_header> decode_header(std::span<const std::byte> bytes,
                                     uint32_t max_payload = default_max_payload_bytes);

// What a receiver checks of an arriving frame before its payload is in
// (the UCX bridge, for every active message): decode_header, a header of
// exactly frame_header_bytes, and a payload of the announced length.
// check_payload then checks the payload once it is in.
expected<frame_header> check_arrival(std::span<const std::byte> header, size_t payload_length,
                                     uint32_t max_payload = default_max_payload_bytes);

// Checks a payload checksum computed by the caller (crc32c_extend of
// header_crc over the payload) against the header's.
status check_crc(const frame_header& header, uint32_t crc);

// Checks that `payload` has the header's length and checksum.
status check_payload(const frame_header& header, std::span<const std::byte> payload);

// A whole frame in one buffer (header then payload), as the corpus stores
// it: decode_header + exact length + check_payload. Returns the header; the
// payload is bytes[frame_header_bytes, end).
expected<frame_header> decode_frame(std::span<const std::byte> bytes,
                                    uint32_t max_payload = default_max_payload_bytes);

// Builds a whole frame (header then payload) with its checksum.
std::vector<std::byte> make_frame(frame_header header, std::span<const std::byte> payload);

}  // namespace strata::transport
