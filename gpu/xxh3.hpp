// XXH3-64 with a seed for exactly one 8-byte input (a key), host and device.
//
// The CUDA cache must map keys to the same sets as the CPU backend, which
// uses cache_set_of() from common/hash.hpp (libxxhash's XXH3_64bits_withSeed
// over the key's 8 little-endian bytes). libxxhash has no device build, so
// this is XXH3's 4..8-byte path (XXH3_len_4to8_64b + XXH3_rrmxmx, xxHash
// 0.8, whose output is frozen) written out for len = 8 with the default
// secret. tests/gpu/xxh3_test.cpp checks it against libxxhash on many keys
// (on the host: the same code runs on the device).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "gpu/hd.hpp"

namespace strata::gpu {

STRATA_HD uint64_t xxh3_rotl64(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

STRATA_HD uint32_t xxh3_swap32(uint32_t x) {
  return ((x << 24) & 0xff000000u) | ((x << 8) & 0x00ff0000u) | ((x >> 8) & 0x0000ff00u) |
         ((x >> 24) & 0x000000ffu);
}

// XXH3_64bits_withSeed(&key, 8, seed) on a little-endian machine.
STRATA_HD uint64_t xxh3_64_key(uint64_t key, uint64_t seed) {
  // Bytes 8..15 and 16..23 of XXH3's default secret (kSecret), read LE.
  constexpr uint64_t secret8 = 0x1cad21f72c81017cULL;
  constexpr uint64_t secret16 = 0xdb979083e96dd4deULL;
  constexpr uint64_t len = 8;
  seed ^= uint64_t{xxh3_swap32(static_cast<uint32_t>(seed))} << 32;
  const uint32_t input1 = static_cast<uint32_t>(key);        // bytes 0..3
  const uint32_t input2 = static_cast<uint32_t>(key >> 32);  // bytes len-4..len-1
  const uint64_t bitflip = (secret8 ^ secret16) - seed;
  const uint64_t input64 = uint64_t{input2} + (uint64_t{input1} << 32);
  uint64_t h = input64 ^ bitflip;
  // XXH3_rrmxmx
  h ^= xxh3_rotl64(h, 49) ^ xxh3_rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ULL;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ULL;
  return h ^ (h >> 28);
}

// High 64 bits of a 64x64 product: Lemire's reduce, as common/hash.hpp.
STRATA_HD uint64_t mul_high64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  __extension__ typedef unsigned __int128 u128;
  return static_cast<uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
}

// cache_set_of(key, sets) of common/hash.hpp (seed hash_seed::cache_set).
STRATA_HD uint32_t device_cache_set_of(uint64_t key, uint32_t sets) {
  constexpr uint64_t cache_set_seed = 0x7374726174615f63ULL;  // "strata_c"
  return static_cast<uint32_t>(mul_high64(xxh3_64_key(key, cache_set_seed), sets));
}

}  // namespace strata::gpu
