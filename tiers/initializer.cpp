#include "tiers/initializer.hpp"

#include <cmath>

#include "common/error.hpp"

// Bit recipe (docs/optimizers.md, "Initializers", is the long form):
//
//   mix(x)   = splitmix64's finalizer (Steele, Lea, Flood 2014)
//   gamma    = 0x9E3779B97F4A7C15
//   word(seed, key, c) = mix( mix(mix(seed + gamma) ^ key) + (c + 1) * gamma )
//
// i.e. (seed, key) picks a splitmix64 stream and c indexes into it. All
// arithmetic is modulo 2^64. Element j of a row uses
//   uniform: word(j) >> 40                      (the top 24 bits)
//   normal:  words 3j, 3j+1, 3j+2, each cut into four 16-bit integers
//
// This is a storage-format-level definition: changing it changes every
// never-written row. tests/tiers/initializer_test.cpp pins golden bits.

namespace strata {
namespace {

constexpr uint64_t golden_gamma = 0x9E3779B97F4A7C15ULL;

constexpr uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// u in [0, 1 - 2^-24]: 24 bits, converted exactly, scaled exactly.
float uniform_unit(uint64_t word) {
  const auto bits = static_cast<uint32_t>(word >> 40);
  return static_cast<float>(bits) * 0x1p-24f;
}

float uniform_value(const initializer_config& c, uint64_t word) {
  const float a = c.uniform_low;
  const float b = c.uniform_high;
  float x = a + ((b - a) * uniform_unit(word));
  // Rounding of the last add can land on b itself; keep the interval
  // half-open. (Exact comparison, deterministic everywhere.)
  if (x >= b && a < b) x = std::nextafter(b, a);
  return x;
}

// Irwin-Hall of 12 uniform 16-bit integers, centred and scaled in integers:
// centred = 2 * sum - 12 * 65535 = 2 * (sum - 12 * 32767.5), |centred| <=
// 786420 < 2^24, so the conversion to float is exact and so is the scaling by
// 2^-17 (= 1/2 * 1/65536). The only rounding is the final multiply by s.
float normal_value(const initializer_config& c, const uint64_t words[3]) {
  int64_t sum = 0;
  for (int w = 0; w < 3; ++w)
    for (int part = 0; part < 4; ++part)
      sum += static_cast<int64_t>((words[w] >> (16 * part)) & 0xFFFFu);
  const int64_t centred = 2 * sum - 12 * 65535;
  const float z = static_cast<float>(static_cast<int32_t>(centred)) * 0x1p-17f;
  return c.normal_stddev * z;
}

}  // namespace

uint64_t init_random_word(uint64_t seed, uint64_t key, uint64_t counter) {
  const uint64_t stream = mix(mix(seed + golden_gamma) ^ key);
  return mix(stream + (counter + 1) * golden_gamma);
}

void initialize_weights(const initializer_config& config, uint64_t key, float* out, uint32_t dim) {
  switch (config.kind) {
    case initializer_kind::zeros:
      for (uint32_t j = 0; j < dim; ++j) out[j] = 0.0f;
      return;
    case initializer_kind::uniform:
      for (uint32_t j = 0; j < dim; ++j)
        out[j] = uniform_value(config, init_random_word(config.seed, key, j));
      return;
    case initializer_kind::normal:
      for (uint32_t j = 0; j < dim; ++j) {
        const uint64_t base = uint64_t{3} * j;
        const uint64_t words[3] = {init_random_word(config.seed, key, base),
                                   init_random_word(config.seed, key, base + 1),
                                   init_random_word(config.seed, key, base + 2)};
        out[j] = normal_value(config, words);
      }
      return;
  }
  STRATA_ASSERT(false, "unknown initializer kind");
}

}  // namespace strata
