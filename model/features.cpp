// Feature hashing. Every key is XXH3-64 with a seed of its own kind, so a
// categorical key, an integer bucket and a libffm pair never share a hash
// family with each other or with the four key hashes of common/hash.hpp.
// These definitions are part of every stored model: features_test pins them.
#include "model/features.hpp"

#include <algorithm>
#include <bit>

#include "common/hash.hpp"

namespace strata::model {
namespace {

namespace seed {
constexpr uint64_t categorical = 0x7374726174615f6bULL;  // "strata_k"
constexpr uint64_t integer = 0x7374726174615f69ULL;      // "strata_i"
constexpr uint64_t ffm = 0x7374726174615f6dULL;          // "strata_m"
}  // namespace seed

}  // namespace

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

}  // namespace strata::model
