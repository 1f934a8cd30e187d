#include "client/wire.hpp"

#include <cstring>

#include "common/crc32c.hpp"

namespace strata::wire {

namespace {
template <class T>
void put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
bool known_type(uint16_t t) { return t >= 1 && t <= 14; }
}  // namespace

void append_frame(std::vector<std::byte>& out, frame_type type, uint64_t request,
                  std::span<const std::byte> payload) {
  const size_t at = out.size();
  out.resize(at + header_bytes + payload.size());
  std::byte* h = out.data() + at;
  put<uint32_t>(h, magic);
  put<uint16_t>(h + 4, wire_version);
  put<uint16_t>(h + 6, static_cast<uint16_t>(type));
  put<uint32_t>(h + 8, static_cast<uint32_t>(payload.size()));
  put<uint32_t>(h + 12, crc32c(payload.data(), payload.size()));
  put<uint64_t>(h + 16, request);
  if (!payload.empty()) std::memcpy(h + header_bytes, payload.data(), payload.size());
}

expected<frame_header> parse_header(std::span<const std::byte, header_bytes> bytes,
                                    uint32_t max_payload) {
  const std::byte* h = bytes.data();
  if (get<uint32_t>(h) != magic)
    return error(errc::corrupt_data, "frame header: bad magic (not a strata serving peer)");
  if (const uint16_t v = get<uint16_t>(h + 4); v != wire_version)
    return error(errc::format_mismatch, "frame header: wire version " + std::to_string(v) +
                                            ", expected " + std::to_string(wire_version));
  const uint16_t type = get<uint16_t>(h + 6);
  if (!known_type(type))
    return error(errc::corrupt_data, "frame header: unknown frame type " + std::to_string(type));
  frame_header out;
  out.type = static_cast<frame_type>(type);
  out.length = get<uint32_t>(h + 8);
  out.crc = get<uint32_t>(h + 12);
  out.request = get<uint64_t>(h + 16);
  if (out.length > max_payload)
    return error(errc::capacity_exceeded, "frame header: payload of " + std::to_string(out.length) +
                                              " bytes exceeds the limit of " +
                                              std::to_string(max_payload));
  return out;
}

status check_payload(const frame_header& header, std::span<const std::byte> payload) {
  if (payload.size() != header.length)
    return error(errc::corrupt_data, "frame payload: " + std::to_string(payload.size()) +
                                         " bytes, header says " + std::to_string(header.length));
  if (crc32c(payload.data(), payload.size()) != header.crc)
    return error(errc::corrupt_data, "frame payload: CRC32C mismatch");
  return {};
}

void writer::raw(const void* data, size_t size) {
  const size_t at = out_.size();
  out_.resize(at + size);
  if (size) std::memcpy(out_.data() + at, data, size);
}
void writer::text16(const std::string& s) {
  u16(static_cast<uint16_t>(s.size()));
  raw(s.data(), s.size());
}
void writer::text32(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  raw(s.data(), s.size());
}

bool reader::raw(void* data, size_t size) {
  if (in_.size() - offset_ < size) return false;
  if (size) std::memcpy(data, in_.data() + offset_, size);
  offset_ += size;
  return true;
}
bool reader::view(std::span<const std::byte>& out, size_t size) {
  if (in_.size() - offset_ < size) return false;
  out = in_.subspan(offset_, size);
  offset_ += size;
  return true;
}
bool reader::text16(std::string& s) {
  uint16_t n = 0;
  if (!u16(n) || in_.size() - offset_ < n) return false;
  s.assign(reinterpret_cast<const char*>(in_.data() + offset_), n);
  offset_ += n;
  return true;
}
bool reader::text32(std::string& s) {
  uint32_t n = 0;
  if (!u32(n) || in_.size() - offset_ < n) return false;
  s.assign(reinterpret_cast<const char*>(in_.data() + offset_), n);
  offset_ += n;
  return true;
}
error reader::fail(const char* field) const {
  return error(errc::corrupt_data, std::string(what_) + " payload: bad or truncated field '" +
                                       field + "' at byte " + std::to_string(offset_));
}

namespace {
// Reads n items of T into `out`, guarding n against the bytes left.
template <class T>
bool read_array(reader& r, std::vector<T>& out, size_t n) {
  std::span<const std::byte> bytes;
  if (n > (size_t{1} << 40) / sizeof(T) || !r.view(bytes, n * sizeof(T))) return false;
  out.resize(n);
  if (n) std::memcpy(out.data(), bytes.data(), bytes.size());
  return true;
}
template <class T>
void write_array(writer& w, std::span<const T> a) {
  w.raw(a.data(), a.size_bytes());
}
}  // namespace

void encode(std::vector<std::byte>& out, const key_request& r) {
  writer w(out);
  w.text16(r.table);
  w.u32(static_cast<uint32_t>(r.keys.size()));
  write_array<uint64_t>(w, r.keys);
}
void encode_rows(std::vector<std::byte>& out, uint32_t dim, std::span<const uint64_t> versions,
                 std::span<const float> weights) {
  writer w(out);
  w.u32(dim);
  w.u32(static_cast<uint32_t>(versions.size()));
  write_array<uint64_t>(w, versions);
  write_array<float>(w, weights);
}
void encode(std::vector<std::byte>& out, const rows_reply& r) {
  encode_rows(out, r.dim, r.versions, r.weights);
}
void encode(std::vector<std::byte>& out, const error_reply& r) {
  writer w(out);
  w.u16(r.code);
  w.text32(r.message);
}
void encode(std::vector<std::byte>& out, const subscribe_request& r) {
  writer w(out);
  w.text16(r.table);
  w.u64(r.stream);
  w.u64(r.after_seq);
  w.raw(r.nonce.data(), r.nonce.size());
}
void encode(std::vector<std::byte>& out, const challenge_frame& r) {
  writer w(out);
  w.raw(r.nonce.data(), r.nonce.size());
  w.raw(r.proof.data(), r.proof.size());
}
void encode(std::vector<std::byte>& out, const proof_frame& r) {
  writer w(out);
  w.raw(r.proof.data(), r.proof.size());
}
void encode(std::vector<std::byte>& out, const update_batch& r) {
  writer w(out);
  w.text16(r.table);
  w.u64(r.stream);
  w.u64(r.seq);
  w.u32(r.dim);
  w.u32(static_cast<uint32_t>(r.keys.size()));
  write_array<uint64_t>(w, r.keys);
  write_array<uint64_t>(w, r.versions);
  write_array<float>(w, r.weights);
}

void encode_push(std::vector<std::byte>& out, const std::string& table, uint32_t dim,
                 std::span<const uint64_t> keys, std::span<const float> grads, uint64_t id) {
  writer w(out);
  w.text16(table);
  w.u32(dim);
  w.u32(static_cast<uint32_t>(keys.size()));
  write_array<uint64_t>(w, keys);
  write_array<float>(w, grads);
  if (id != 0) w.u64(id);
}

void encode(std::vector<std::byte>& out, const std::vector<table_info>& tables) {
  writer w(out);
  w.u32(static_cast<uint32_t>(tables.size()));
  for (const auto& t : tables) {
    w.text16(t.name);
    w.u32(t.dim);
  }
}
void encode(std::vector<std::byte>& out, const list_keys_request& r) {
  writer w(out);
  w.text16(r.table);
  w.u32(r.limit);
}
void encode_key_list(std::vector<std::byte>& out, std::span<const uint64_t> keys) {
  writer w(out);
  w.u32(static_cast<uint32_t>(keys.size()));
  write_array<uint64_t>(w, keys);
}

expected<key_request> decode_key_request(std::span<const std::byte> payload) {
  reader r(payload, "lookup");
  key_request out;
  uint32_t n = 0;
  if (!r.text16(out.table)) return r.fail("table");
  if (!r.u32(n)) return r.fail("n");
  if (!read_array(r, out.keys, n)) return r.fail("keys");
  if (!r.at_end()) return r.fail("end");
  return out;
}
expected<rows_reply> decode_rows(std::span<const std::byte> payload) {
  rows_reply out;
  auto ok = decode_rows_into(payload, out);
  if (!ok) return ok.err();
  return out;
}

status decode_rows_into(std::span<const std::byte> payload, rows_reply& out) {
  reader r(payload, "rows");
  uint32_t n = 0;
  if (!r.u32(out.dim)) return r.fail("dim");
  if (!r.u32(n)) return r.fail("n");
  if (!read_array(r, out.versions, n)) return r.fail("versions");
  if (!read_array(r, out.weights, size_t{n} * out.dim)) return r.fail("weights");
  if (!r.at_end()) return r.fail("end");
  return {};
}
expected<error_reply> decode_error(std::span<const std::byte> payload) {
  reader r(payload, "error");
  error_reply out;
  if (!r.u16(out.code)) return r.fail("code");
  if (!r.text32(out.message)) return r.fail("message");
  if (!r.at_end()) return r.fail("end");
  return out;
}
expected<subscribe_request> decode_subscribe(std::span<const std::byte> payload) {
  reader r(payload, "subscribe");
  subscribe_request out;
  if (!r.text16(out.table)) return r.fail("table");
  if (!r.u64(out.stream)) return r.fail("stream");
  if (!r.u64(out.after_seq)) return r.fail("after_seq");
  // No nonce: a subscriber from before authentication (it cannot prove
  // the cluster secret either).
  if (!r.raw(out.nonce.data(), out.nonce.size())) return r.fail("nonce");
  if (!r.at_end()) return r.fail("end");
  return out;
}
expected<challenge_frame> decode_challenge(std::span<const std::byte> payload) {
  reader r(payload, "challenge");
  challenge_frame out;
  if (!r.raw(out.nonce.data(), out.nonce.size())) return r.fail("nonce");
  if (!r.raw(out.proof.data(), out.proof.size())) return r.fail("proof");
  if (!r.at_end()) return r.fail("end");
  return out;
}
expected<proof_frame> decode_proof(std::span<const std::byte> payload) {
  reader r(payload, "proof");
  proof_frame out;
  if (!r.raw(out.proof.data(), out.proof.size())) return r.fail("proof");
  if (!r.at_end()) return r.fail("end");
  return out;
}
expected<update_batch> decode_updates(std::span<const std::byte> payload) {
  reader r(payload, "updates");
  update_batch out;
  uint32_t n = 0;
  if (!r.text16(out.table)) return r.fail("table");
  if (!r.u64(out.stream)) return r.fail("stream");
  if (!r.u64(out.seq)) return r.fail("seq");
  if (!r.u32(out.dim)) return r.fail("dim");
  if (!r.u32(n)) return r.fail("n");
  if (!read_array(r, out.keys, n)) return r.fail("keys");
  if (!read_array(r, out.versions, n)) return r.fail("versions");
  if (!read_array(r, out.weights, size_t{n} * out.dim)) return r.fail("weights");
  if (!r.at_end()) return r.fail("end");
  return out;
}

expected<push_request> decode_push(std::span<const std::byte> payload) {
  reader r(payload, "push");
  push_request out;
  uint32_t n = 0;
  if (!r.text16(out.table)) return r.fail("table");
  if (!r.u32(out.dim)) return r.fail("dim");
  if (!r.u32(n)) return r.fail("n");
  if (!read_array(r, out.keys, n)) return r.fail("keys");
  if (!read_array(r, out.grads, size_t{n} * out.dim)) return r.fail("grads");
  // The optional push id: exactly 8 more bytes, non-zero.
  if (!r.at_end()) {
    if (!r.u64(out.id)) return r.fail("id");
    if (out.id == 0) return r.fail("id (0 is sent as no id)");
    if (!r.at_end()) return r.fail("end");
  }
  return out;
}

expected<std::vector<table_info>> decode_table_list(std::span<const std::byte> payload) {
  reader r(payload, "table_list");
  std::vector<table_info> out;
  uint32_t n = 0;
  if (!r.u32(n)) return r.fail("n");
  // No reserve from n: each entry must be read (6 bytes at least) first.
  for (uint32_t i = 0; i < n; ++i) {
    table_info t;
    if (!r.text16(t.name)) return r.fail("name");
    if (!r.u32(t.dim)) return r.fail("dim");
    out.push_back(std::move(t));
  }
  if (!r.at_end()) return r.fail("end");
  return out;
}

expected<list_keys_request> decode_list_keys(std::span<const std::byte> payload) {
  reader r(payload, "list_keys");
  list_keys_request out;
  if (!r.text16(out.table)) return r.fail("table");
  if (!r.u32(out.limit)) return r.fail("limit");
  if (!r.at_end()) return r.fail("end");
  if (out.limit == 0 || out.limit > max_list_keys)
    return error(errc::invalid_argument, "list_keys payload: limit " + std::to_string(out.limit) +
                                             " is outside 1.." + std::to_string(max_list_keys));
  return out;
}

expected<std::vector<uint64_t>> decode_key_list(std::span<const std::byte> payload) {
  reader r(payload, "key_list");
  std::vector<uint64_t> out;
  uint32_t n = 0;
  if (!r.u32(n)) return r.fail("n");
  if (n > max_list_keys)
    return error(errc::corrupt_data, "key_list payload: " + std::to_string(n) +
                                         " keys, more than the limit of " +
                                         std::to_string(max_list_keys));
  if (!read_array(r, out, n)) return r.fail("keys");
  if (!r.at_end()) return r.fail("end");
  return out;
}

}  // namespace strata::wire
