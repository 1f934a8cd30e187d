// Initial weights as a pure function of (table seed, key, element).
//
// A counter-based generator: each 64-bit random word is a hash of
// (seed, key, element block) with our own mixing, and the transforms to
// floats use only integer arithmetic plus one exact conversion and one
// rounding multiply/add — no library log/cos/erf whose last bits differ
// between standard libraries or between CPU and GPU. So a key gets the same
// bits on any shard, machine, run, CPU or GPU, which makes resharding and
// restarts reproducible.
//
//   zeros:          0
//   uniform(a, b):  a + (b - a) * u,        u = (24 random bits) * 2^-24
//   normal(0, s):   s * (sum of 12 uniform 16-bit integers - 12 * 32767.5) / 65536
//                   (Irwin-Hall: mean 0, variance 1, bounded at +-6 s)
//
// docs/optimizers.md documents the exact bit recipe. Thread-safety: pure.
#pragma once

#include <cstdint>

namespace strata {

enum class initializer_kind : uint8_t { zeros = 0, uniform = 1, normal = 2 };

struct initializer_config {
  initializer_kind kind = initializer_kind::normal;
  float uniform_low = -0.05f;
  float uniform_high = 0.05f;
  float normal_stddev = 0.01f;
  uint64_t seed = 0;  // the table seed
};

// Writes `dim` initial weights of `key` to `out`.
void initialize_weights(const initializer_config& config, uint64_t key, float* out, uint32_t dim);

// The counter-based random word for (seed, key, counter); exposed for tests
// and for the CUDA backend's check against the CPU.
uint64_t init_random_word(uint64_t seed, uint64_t key, uint64_t counter);

}  // namespace strata
