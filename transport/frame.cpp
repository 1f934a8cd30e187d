#include "transport/frame.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <string>

#include "common/crc32c.hpp"

namespace strata::transport {
namespace {

// Field offsets inside the 48-byte header (docs/wire-format.md).
constexpr size_t off_magic = 0, off_version = 4, off_type = 6, off_sender = 8, off_seq = 16,
                 off_request = 24, off_target = 32, off_length = 36, off_crc = 40,
                 off_reserved = 44;

template <class T>
void put(std::byte* out, size_t offset, T value) {
  static_assert(std::endian::native == std::endian::little, "the wire is little-endian");
  std::memcpy(out + offset, &value, sizeof(T));
}

template <class T>
T get(const std::byte* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

uint32_t frame_crc(const frame_header& header, std::span<const std::byte> payload) {
  return crc32c_extend(header_crc(header), payload.data(), payload.size());
}

}  // namespace

uint32_t header_crc(const frame_header& header) {
  frame_header h = header;
  h.crc = 0;
  std::array<std::byte, frame_header_bytes> bytes;
  encode_header(h, bytes);
  return crc32c(bytes.data(), bytes.size());
}

bool is_known_type(uint16_t type) {
  switch (static_cast<frame_type>(type)) {
    case frame_type::hello:
    case frame_type::hello_ack:
    case frame_type::hello_proof:
    case frame_type::hello_welcome:
    case frame_type::hello_refused:
    case frame_type::heartbeat:
    case frame_type::goodbye:
    case frame_type::credit:
    case frame_type::shard_pull:
    case frame_type::shard_pull_ahead:
    case frame_type::shard_push:
    case frame_type::shard_write_back:
    case frame_type::shard_prefetch:
    case frame_type::shard_tick:
    case frame_type::shard_drain:
    case frame_type::shard_stats:
    case frame_type::cache_lookup:
    case frame_type::cache_prefetch:
    case frame_type::cache_push:
    case frame_type::cache_pass_start:
    case frame_type::cache_pass_end:
    case frame_type::cache_drain:
    case frame_type::cache_stats:
    case frame_type::dense_push:
    case frame_type::dense_pull:
    case frame_type::dense_stats:
    case frame_type::shard_checkpoint:
    case frame_type::shard_copied:
    case frame_type::shard_migrate:
    case frame_type::shard_fence:
    case frame_type::shard_migrate_in:
    case frame_type::shard_commit:
    case frame_type::shard_resend:
    case frame_type::cache_map:
    case frame_type::spawn_shard:
    case frame_type::retire_shard:
    case frame_type::worker_run:
    case frame_type::worker_stats:
    case frame_type::worker_progress:
    case frame_type::worker_rebind:
    case frame_type::serve_lookup:
    case frame_type::serve_prefetch:
    case frame_type::serve_push:
    case frame_type::echo:
    case frame_type::sink:
    case frame_type::reply:
    case frame_type::reply_error:
      return true;
  }
  return false;
}

bool is_sequenced(frame_type type) { return static_cast<uint16_t>(type) >= 16; }

std::string_view to_string(frame_type type) {
  switch (type) {
    case frame_type::hello:
      return "hello";
    case frame_type::hello_ack:
      return "hello_ack";
    case frame_type::hello_proof:
      return "hello_proof";
    case frame_type::hello_welcome:
      return "hello_welcome";
    case frame_type::hello_refused:
      return "hello_refused";
    case frame_type::heartbeat:
      return "heartbeat";
    case frame_type::goodbye:
      return "goodbye";
    case frame_type::credit:
      return "credit";
    case frame_type::shard_pull:
      return "shard_pull";
    case frame_type::shard_pull_ahead:
      return "shard_pull_ahead";
    case frame_type::shard_push:
      return "shard_push";
    case frame_type::shard_write_back:
      return "shard_write_back";
    case frame_type::shard_prefetch:
      return "shard_prefetch";
    case frame_type::shard_tick:
      return "shard_tick";
    case frame_type::shard_drain:
      return "shard_drain";
    case frame_type::shard_stats:
      return "shard_stats";
    case frame_type::cache_lookup:
      return "cache_lookup";
    case frame_type::cache_prefetch:
      return "cache_prefetch";
    case frame_type::cache_push:
      return "cache_push";
    case frame_type::cache_pass_start:
      return "cache_pass_start";
    case frame_type::cache_pass_end:
      return "cache_pass_end";
    case frame_type::cache_drain:
      return "cache_drain";
    case frame_type::cache_stats:
      return "cache_stats";
    case frame_type::dense_push:
      return "dense_push";
    case frame_type::dense_pull:
      return "dense_pull";
    case frame_type::dense_stats:
      return "dense_stats";
    case frame_type::shard_checkpoint:
      return "shard_checkpoint";
    case frame_type::shard_copied:
      return "shard_copied";
    case frame_type::shard_migrate:
      return "shard_migrate";
    case frame_type::shard_fence:
      return "shard_fence";
    case frame_type::shard_migrate_in:
      return "shard_migrate_in";
    case frame_type::shard_commit:
      return "shard_commit";
    case frame_type::shard_resend:
      return "shard_resend";
    case frame_type::cache_map:
      return "cache_map";
    case frame_type::spawn_shard:
      return "spawn_shard";
    case frame_type::retire_shard:
      return "retire_shard";
    case frame_type::worker_run:
      return "worker_run";
    case frame_type::worker_stats:
      return "worker_stats";
    case frame_type::worker_rebind:
      return "worker_rebind";
    case frame_type::worker_progress:
      return "worker_progress";
    case frame_type::serve_lookup:
      return "serve_lookup";
    case frame_type::serve_prefetch:
      return "serve_prefetch";
    case frame_type::serve_push:
      return "serve_push";
    case frame_type::echo:
      return "echo";
    case frame_type::sink:
      return "sink";
    case frame_type::reply:
      return "reply";
    case frame_type::reply_error:
      return "reply_error";
  }
  return "unknown";
}

void encode_header(const frame_header& h, std::span<std::byte, frame_header_bytes> out) {
  std::byte* p = out.data();
  put(p, off_magic, h.magic);
  put(p, off_version, h.version);
  put(p, off_type, static_cast<uint16_t>(h.type));
  put(p, off_sender, h.sender);
  put(p, off_seq, h.seq);
  put(p, off_request, h.request_id);
  put(p, off_target, h.target);
  put(p, off_length, h.payload_bytes);
  put(p, off_crc, h.crc);
  put(p, off_reserved, h.reserved);
}

void seal(frame_header& header, std::span<const std::byte> payload) {
  header.payload_bytes = static_cast<uint32_t>(payload.size());
  header.crc = frame_crc(header, payload);
}

expected<frame_header> decode_header(std::span<const std::byte> bytes, uint32_t max_payload) {
  if (bytes.size() < frame_header_bytes) {
    return error(errc::corrupt_data, "truncated frame header: " + std::to_string(bytes.size()) +
                                         " of " + std::to_string(frame_header_bytes) + " bytes");
  }
  const std::byte* p = bytes.data();
  frame_header h;
  h.magic = get<uint32_t>(p, off_magic);
  if (h.magic != frame_magic) {
    return error(errc::corrupt_data, "bad frame magic " + std::to_string(h.magic));
  }
  h.version = get<uint16_t>(p, off_version);
  if (h.version != wire_version) {
    return error(errc::format_mismatch, "frame version " + std::to_string(h.version) +
                                            " (this build speaks " + std::to_string(wire_version) +
                                            ")");
  }
  const auto type = get<uint16_t>(p, off_type);
  if (!is_known_type(type)) {
    return error(errc::corrupt_data, "unknown frame type " + std::to_string(type));
  }
  h.type = static_cast<frame_type>(type);
  h.sender = get<uint64_t>(p, off_sender);
  h.seq = get<uint64_t>(p, off_seq);
  h.request_id = get<uint64_t>(p, off_request);
  h.target = get<uint32_t>(p, off_target);
  h.payload_bytes = get<uint32_t>(p, off_length);
  h.crc = get<uint32_t>(p, off_crc);
  h.reserved = get<uint32_t>(p, off_reserved);
  if (h.reserved != 0) {
    return error(errc::corrupt_data, "frame reserved field is " + std::to_string(h.reserved));
  }
  if (h.payload_bytes > max_payload) {
    return error(errc::corrupt_data, "oversized frame: payload_bytes " +
                                         std::to_string(h.payload_bytes) + " > limit " +
                                         std::to_string(max_payload));
  }
  if (is_sequenced(h.type) != (h.seq != 0)) {
    return error(errc::corrupt_data, std::string("frame seq ") + std::to_string(h.seq) +
                                         " invalid for type " + std::string(to_string(h.type)));
  }
  return h;
}

expected<frame_header> check_arrival(std::span<const std::byte> header, size_t payload_length,
                                     uint32_t max_payload) {
  auto h = decode_header(header, max_payload);
  if (!h) return h;
  if (header.size() != frame_header_bytes) {
    return error(errc::corrupt_data, "frame header is " + std::to_string(header.size()) + " bytes");
  }
  if (payload_length != h->payload_bytes) {
    return error(errc::corrupt_data, "frame payload is " + std::to_string(payload_length) +
                                         " bytes, header says " + std::to_string(h->payload_bytes));
  }
  return h;
}

status check_payload(const frame_header& header, std::span<const std::byte> payload) {
  if (payload.size() != header.payload_bytes) {
    return error(errc::corrupt_data, "frame payload is " + std::to_string(payload.size()) +
                                         " bytes, header says " +
                                         std::to_string(header.payload_bytes));
  }
  return check_crc(header, frame_crc(header, payload));
}

status check_crc(const frame_header& header, uint32_t crc) {
  if (crc != header.crc) {
    return error(errc::corrupt_data, "frame checksum mismatch (type " +
                                         std::string(to_string(header.type)) + ", seq " +
                                         std::to_string(header.seq) + ")");
  }
  return {};
}

expected<frame_header> decode_frame(std::span<const std::byte> bytes, uint32_t max_payload) {
  auto header = decode_header(bytes, max_payload);
  if (!header) return header;
  const auto payload = bytes.subspan(frame_header_bytes);
  STRATA_TRY(check_payload(*header, payload));
  return header;
}

std::vector<std::byte> make_frame(frame_header header, std::span<const std::byte> payload) {
  seal(header, payload);
  std::vector<std::byte> out(frame_header_bytes + payload.size());
  encode_header(header, std::span<std::byte, frame_header_bytes>(out.data(), frame_header_bytes));
  if (!payload.empty())
    std::memcpy(out.data() + frame_header_bytes, payload.data(), payload.size());
  return out;
}

}  // namespace strata::transport
