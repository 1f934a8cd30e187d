#include "tiers/row.hpp"

#include <string>

#include "common/crc32c.hpp"

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the row encoding copies little-endian words directly");

constexpr uint8_t flag_tombstone = 1;
constexpr uint8_t flag_has_state = 2;

template <class T>
void put(std::byte* out, size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof(T));
}
template <class T>
T get(const std::byte* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

uint32_t checksum(uint64_t key, const std::byte* encoded, size_t payload_bytes) {
  uint32_t crc = crc32c_extend(0, &key, sizeof key);
  crc = crc32c_extend(crc, encoded, 16);
  return crc32c_extend(crc, encoded + encoded_header_bytes, payload_bytes);
}

void write_header(const row_layout& layout, uint8_t flags, uint64_t version, std::byte* out) {
  put<uint16_t>(out, 0, row_format_version);
  put<uint8_t>(out, 2, static_cast<uint8_t>(layout.optimizer));
  put<uint8_t>(out, 3, flags);
  put<uint16_t>(out, 4, static_cast<uint16_t>(layout.dim));
  put<uint16_t>(out, 6, static_cast<uint16_t>(layout.state_words()));
  put<uint64_t>(out, 8, version);
  put<uint32_t>(out, 16, 0);
  put<uint32_t>(out, 20, 0);
  put<uint32_t>(out, 24, 0);
  put<uint32_t>(out, 28, 0);
}

std::string describe(uint64_t key, std::string_view where) {
  return "key " + std::to_string(key) + " in " + std::string(where);
}

}  // namespace

std::string_view to_string(optimizer_kind kind) {
  switch (kind) {
    case optimizer_kind::sgd:
      return "sgd";
    case optimizer_kind::adagrad:
      return "adagrad";
    case optimizer_kind::adam:
      return "adam";
    case optimizer_kind::ftrl:
      return "ftrl";
  }
  return "unknown";
}

uint32_t row_layout::state_words() const {
  if (!with_state) return 0;
  switch (optimizer) {
    case optimizer_kind::sgd:
      return 0;
    case optimizer_kind::adagrad:
      return dim;
    case optimizer_kind::adam:
      return 2 * dim + 1;
    case optimizer_kind::ftrl:
      return 2 * dim;
  }
  return 0;
}

bool same_row(const row_layout& layout, const std::byte* a, const std::byte* b) {
  return meta_of(a).version == meta_of(b).version &&
         std::memcmp(weights_of(a), weights_of(b), size_t{4} * layout.value_words()) == 0;
}

void encode_row(const row_layout& layout, uint64_t key, const std::byte* record, std::byte* out) {
  const row_meta& meta = meta_of(record);
  write_header(layout, layout.with_state ? flag_has_state : 0, meta.version, out);
  const size_t payload = size_t{4} * layout.value_words();
  std::memcpy(out + encoded_header_bytes, weights_of(record), payload);
  put<uint32_t>(out, 16, checksum(key, out, payload));
  put<uint32_t>(out, 20, meta.freq);
  put<uint32_t>(out, 24, meta.tick);
}

void encode_tombstone(const row_layout& layout, uint64_t key, uint64_t version, std::byte* out) {
  write_header(layout, flag_tombstone | (layout.with_state ? flag_has_state : 0), version, out);
  put<uint32_t>(out, 16, checksum(key, out, 0));
}

expected<decoded_kind> decode_row(const row_layout& layout, uint64_t key,
                                  std::span<const std::byte> value, std::byte* record,
                                  std::string_view where) {
  if (value.size() < encoded_header_bytes) {
    return error{errc::corrupt_data, "stored row too short (" + std::to_string(value.size()) +
                                         " bytes) for " + describe(key, where)};
  }
  const std::byte* in = value.data();
  const auto format = get<uint16_t>(in, 0);
  if (format != row_format_version) {
    return error{errc::format_mismatch, "row format version " + std::to_string(format) +
                                            " (expected " + std::to_string(row_format_version) +
                                            ") for " + describe(key, where)};
  }
  const auto flags = get<uint8_t>(in, 3);
  const bool tombstone = (flags & flag_tombstone) != 0;
  const size_t payload = value.size() - encoded_header_bytes;
  if (get<uint32_t>(in, 16) != checksum(key, in, payload)) {
    return error{errc::corrupt_data, "row checksum mismatch for " + describe(key, where)};
  }
  const auto opt = static_cast<optimizer_kind>(get<uint8_t>(in, 2));
  const auto dim = get<uint16_t>(in, 4);
  const auto state_words = get<uint16_t>(in, 6);
  if (dim != layout.dim || opt != layout.optimizer ||
      (state_words != layout.state_words() && !tombstone)) {
    return error{errc::format_mismatch,
                 "stored row has dim " + std::to_string(dim) + ", optimizer " +
                     std::string(to_string(opt)) + ", " + std::to_string(state_words) +
                     " state words; table expects dim " + std::to_string(layout.dim) + ", " +
                     std::string(to_string(layout.optimizer)) + ", " +
                     std::to_string(layout.state_words()) + " for " + describe(key, where)};
  }
  row_meta& meta = meta_of(record);
  meta.version = get<uint64_t>(in, 8);
  if (tombstone) {
    if (payload != 0)
      return error{errc::corrupt_data, "tombstone with a payload for " + describe(key, where)};
    return decoded_kind::tombstone;
  }
  if (payload != size_t{4} * layout.value_words()) {
    return error{errc::corrupt_data,
                 "stored row has " + std::to_string(payload) + " payload bytes, expected " +
                     std::to_string(4 * layout.value_words()) + " for " + describe(key, where)};
  }
  meta.freq = get<uint32_t>(in, 20);
  meta.tick = get<uint32_t>(in, 24);
  std::memcpy(weights_of(record), in + encoded_header_bytes, payload);
  return decoded_kind::row;
}

}  // namespace strata
