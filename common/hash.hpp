// The four key hashes of strata (docs/architecture.md, Semantics: Hashes).
//
// Partition, DRAM slot, cache set and pass owner each hash the key with their
// own seed, so that, e.g., keys of one partition still spread evenly over
// the DRAM slots and cache sets. All four are XXH3-64 over the key's 8
// little-endian bytes with a fixed seed; XXH3's output is specified and stable
// across platforms and versions since xxHash 0.8.0.
//
// The partition hash is part of the storage format (LMDB keys are
// (partition, key)): its seed and definition never change. Golden vectors in
// tests/common/hash_test.cpp pin all four.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

namespace hash_seed {
inline constexpr uint64_t partition = 0x7374726174615f70ULL;   // "strata_p"
inline constexpr uint64_t dram_slot = 0x7374726174615f64ULL;   // "strata_d"
inline constexpr uint64_t cache_set = 0x7374726174615f63ULL;   // "strata_c"
inline constexpr uint64_t pass_owner = 0x7374726174615f6fULL;  // "strata_o"
}  // namespace hash_seed

// XXH3 of the key's 8 little-endian bytes. Hashing the key object itself
// (not a byte-by-byte copy, which stalls on store forwarding) gives the same
// bytes on the little-endian machines we build for.
static_assert(std::endian::native == std::endian::little,
              "hash_key hashes the key's in-memory bytes as its little-endian form");
inline uint64_t hash_key(uint64_t key, uint64_t seed) {
  return XXH3_64bits_withSeed(&key, sizeof key, seed);
}

// Maps a 64-bit hash onto [0, n) without the bias of `%` (Lemire's
// multiply-shift); n must be > 0.
__extension__ typedef unsigned __int128 uint128_for_reduce;
inline uint64_t reduce(uint64_t hash, uint64_t n) {
  return static_cast<uint64_t>((static_cast<uint128_for_reduce>(hash) * n) >> 64);
}

// key -> partition in [0, partitions). Part of the storage format.
inline uint32_t partition_of(uint64_t key, uint32_t partitions) {
  return static_cast<uint32_t>(reduce(hash_key(key, hash_seed::partition), partitions));
}

// The DRAM tier's open-addressing probe start (a full 64-bit hash).
inline uint64_t dram_slot_hash(uint64_t key) { return hash_key(key, hash_seed::dram_slot); }

// key -> set in [0, sets) of the HBM cache (CPU and CUDA backends alike).
inline uint32_t cache_set_of(uint64_t key, uint32_t sets) {
  return static_cast<uint32_t>(reduce(hash_key(key, hash_seed::cache_set), sets));
}

// key -> owning cache tier in [0, owners) for one pass (pass mode).
inline uint32_t pass_owner_of(uint64_t key, uint32_t owners) {
  return static_cast<uint32_t>(reduce(hash_key(key, hash_seed::pass_owner), owners));
}

}  // namespace strata
