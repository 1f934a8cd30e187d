// Feature hashing. Every key is XXH3-64 with a seed of its own kind, so a
// categorical key, an integer bucket and a libffm pair never share a hash
// family with each other or with the four key hashes of common/hash.hpp.
// These definitions are part of every stored model: features_test pins them.
#include "model/features.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <string>

#include "common/hash.hpp"

namespace strata::model {
namespace {

namespace seed {
constexpr uint64_t categorical = 0x7374726174615f6bULL;  // "strata_k"
constexpr uint64_t integer = 0x7374726174615f69ULL;      // "strata_i"
constexpr uint64_t ffm = 0x7374726174615f6dULL;          // "strata_m"
}  // namespace seed

template <class T>
bool parse_whole(std::string_view s, T& out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

constexpr uint32_t criteo_integers = 13, criteo_categoricals = 26;

}  // namespace

bool parse_integer_value(std::string_view s, int64_t& out) {
  if (parse_whole(s, out)) return true;
  double d;
  if (!parse_whole(s, d) || !std::isfinite(d) || std::fabs(d) > 9e18) return false;
  out = static_cast<int64_t>(std::floor(d));
  return true;
}

uint64_t categorical_key(uint32_t slot, std::string_view value) {
  // The slot picks the seed of the value's hash: equal bytes in different
  // slots are different features.
  const uint64_t slot_seed = hash_key(slot, seed::categorical);
  return XXH3_64bits_withSeed(value.data(), value.size(), slot_seed);
}

uint64_t integer_key(uint32_t slot, int64_t v) {
  int64_t bucket;
  if (v <= 0) {
    bucket = std::max<int64_t>(v, -8);
  } else {
    bucket = 1 + (63 - std::countl_zero(static_cast<uint64_t>(v)));  // 1 + floor(log2 v)
  }
  const uint64_t packed =
      (static_cast<uint64_t>(slot) << 32) | static_cast<uint32_t>(static_cast<int32_t>(bucket));
  return hash_key(packed, seed::integer);
}

uint64_t ffm_key(uint32_t field, uint64_t feature) {
  return hash_key(feature, hash_key(field, seed::ffm));
}

expected<uint32_t> slot_index(std::string_view slot) {
  const auto unknown = [&] {
    return error(errc::invalid_argument,
                 "unknown slot '" + std::string(slot) +
                     "' (slots: I1..I13 integer and C1..C26 categorical columns of criteo_tsv "
                     "data, or a slot number for a categorical slot)");
  };
  if (slot.empty()) return unknown();
  uint32_t n = 0;
  if (parse_whole(slot, n)) return n;
  const char kind = slot.front();
  if ((kind != 'C' && kind != 'I') || !parse_whole(slot.substr(1), n) || n == 0) return unknown();
  if (kind == 'C') {
    if (n > criteo_categoricals) return unknown();
    return criteo_integers + n - 1;
  }
  if (n > criteo_integers) return unknown();
  return n - 1;
}

expected<uint64_t> feature_key(std::string_view slot, std::string_view value) {
  auto index = slot_index(slot);
  if (!index) return index.err();
  if (slot.front() != 'I') return categorical_key(*index, value);
  int64_t v = 0;
  if (!parse_integer_value(value, v))
    return error(errc::invalid_argument, "slot " + std::string(slot) + " is an integer column: '" +
                                             std::string(value) + "' is not an integer");
  return integer_key(*index, v);
}

}  // namespace strata::model
