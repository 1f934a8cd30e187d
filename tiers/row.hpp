// Row format: the value of one key, in memory and on disk.
//
// In memory (every tier, every batch API) a row is a *record*:
//
//   [row_meta: 16 B][weights: dim x f32][optimizer state: state_words x 32 bit]
//
// row_layout says how many state words a table's optimizer needs; a serving
// layout (with_state = false) has none. Records in a batch sit `stride` bytes
// apart (stride >= record_bytes(), a multiple of 4).
//
// Persisted (LMDB value, checkpoints, wire) a row is *encoded*:
//
//   off size field
//   0   2    format_version (= row_format_version)
//   2   1    optimizer_kind
//   3   1    flags (bit 0: tombstone, bit 1: has optimizer state)
//   4   2    dim
//   6   2    state_words
//   8   8    version  (16-bit incarnation << 48 | 48-bit counter)
//   16  4    crc32c over: key (8 B little-endian), bytes 0..15, payload
//   20  4    freq     (access metadata: not checksummed, never marks dirty)
//   24  4    tick     (access metadata: not checksummed)
//   28  4    reserved (0)
//   32  ...  payload: weights then state, little-endian 32-bit words
//
// A tombstone (TTL expiry, delete) has no payload; it hides older copies.
// docs/row-format.md is the long form. Thread-safety: pure functions and
// plain structs.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "common/error.hpp"

namespace strata {

inline constexpr uint16_t row_format_version = 1;
inline constexpr size_t encoded_header_bytes = 32;

enum class optimizer_kind : uint8_t { sgd = 0, adagrad = 1, adam = 2, ftrl = 3 };
std::string_view to_string(optimizer_kind kind);

// --- versions ---------------------------------------------------------------
inline constexpr uint64_t version_counter_bits = 48;
inline constexpr uint64_t version_counter_mask = (uint64_t{1} << version_counter_bits) - 1;
inline constexpr uint64_t make_version(uint16_t incarnation, uint64_t counter) {
  return (uint64_t{incarnation} << version_counter_bits) | (counter & version_counter_mask);
}
inline constexpr uint16_t incarnation_of(uint64_t version) {
  return static_cast<uint16_t>(version >> version_counter_bits);
}
inline constexpr uint64_t counter_of(uint64_t version) { return version & version_counter_mask; }

// --- in-memory record ---------------------------------------------------------
// Records sit `stride` bytes apart and a stride is only a multiple of 4 (a
// record of an odd number of value words, e.g. Adam's 3*dim+1, is 4 bytes
// short of a multiple of 8), so the meta of every other record is only
// 4-byte aligned: row_meta says so (pack(4)), and its 64-bit version is read
// and written as an unaligned member, never through a uint64_t& or pointer.
#pragma pack(push, 4)
struct row_meta {
  uint64_t version = 0;  // bumped by every applied update
  uint32_t freq = 0;     // access count (saturating); not checksummed
  uint32_t tick = 0;     // last access tick; not checksummed
};
#pragma pack(pop)
static_assert(sizeof(row_meta) == 16 && alignof(row_meta) == 4);

struct row_layout {
  uint32_t dim = 0;
  optimizer_kind optimizer = optimizer_kind::sgd;
  bool with_state = true;  // false: serving layout, weights only

  // Optimizer state words per row: SGD 0, Adagrad dim (accumulators),
  // Adam 2*dim + 1 (m, v, then a uint32 step counter), FTRL 2*dim (z, n).
  uint32_t state_words() const;
  uint32_t value_words() const { return dim + state_words(); }
  size_t record_bytes() const { return sizeof(row_meta) + size_t{4} * value_words(); }
  size_t encoded_bytes() const { return encoded_header_bytes + size_t{4} * value_words(); }
  // Raw parameter bytes (weights + state), the memory benchmark's baseline.
  size_t raw_bytes() const { return size_t{4} * value_words(); }
  bool operator==(const row_layout&) const = default;
};

inline row_meta& meta_of(std::byte* record) { return *reinterpret_cast<row_meta*>(record); }
inline const row_meta& meta_of(const std::byte* record) {
  return *reinterpret_cast<const row_meta*>(record);
}
inline float* weights_of(std::byte* record) {
  return reinterpret_cast<float*>(record + sizeof(row_meta));
}
inline const float* weights_of(const std::byte* record) {
  return reinterpret_cast<const float*>(record + sizeof(row_meta));
}
// What a reader sends of a record (a serving reply's row): its version to
// versions[8 i] and its dim weights to weights[4 dim i], as bytes (places in
// a payload, any alignment).
inline void copy_version_and_weights(const std::byte* record, uint32_t dim, size_t i,
                                     std::byte* versions, std::byte* weights) {
  const uint64_t version = meta_of(record).version;
  std::memcpy(versions + i * 8, &version, 8);
  std::memcpy(weights + i * size_t{4} * dim, weights_of(record), size_t{4} * dim);
}
inline float* state_of(const row_layout& layout, std::byte* record) {
  return weights_of(record) + layout.dim;
}
inline const float* state_of(const row_layout& layout, const std::byte* record) {
  return weights_of(record) + layout.dim;
}

// True if weights and optimizer state (not access metadata) are bit-identical
// and versions match.
bool same_row(const row_layout& layout, const std::byte* a, const std::byte* b);

// A strided view of records owned by someone else.
struct rows_span {
  std::byte* base = nullptr;
  size_t stride = 0;
  std::byte* operator[](size_t i) const { return base + i * stride; }
};
struct const_rows_span {
  const std::byte* base = nullptr;
  size_t stride = 0;
  const_rows_span() = default;
  const_rows_span(const std::byte* b, size_t s) : base(b), stride(s) {}
  const_rows_span(rows_span r) : base(r.base), stride(r.stride) {}
  const std::byte* operator[](size_t i) const { return base + i * stride; }
};

// --- encoding -----------------------------------------------------------------
// Writes the encoded form of `record` (layout.encoded_bytes() bytes) to `out`.
void encode_row(const row_layout& layout, uint64_t key, const std::byte* record, std::byte* out);
// Writes a tombstone (encoded_header_bytes bytes) with `version` to `out`.
void encode_tombstone(const row_layout& layout, uint64_t key, uint64_t version, std::byte* out);

enum class decoded_kind : uint8_t { row, tombstone };

// Checks and decodes a stored value into `record`. `where` names the table and
// file for error messages. Errors: corrupt_data (checksum, size),
// format_mismatch (other format version, dim or optimizer). A tombstone
// leaves `record` untouched except its meta.version.
expected<decoded_kind> decode_row(const row_layout& layout, uint64_t key,
                                  std::span<const std::byte> value, std::byte* record,
                                  std::string_view where);

}  // namespace strata
