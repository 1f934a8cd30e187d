#include "common/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata {
namespace {

constexpr uint32_t poly = 0x82f63b78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto table = make_table();

uint32_t extend_software(uint32_t crc, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_hardware(uint32_t crc, const unsigned char* p,
                                                           size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}

// Large buffers: three independent crc32 chains over three stripes of a
// chunk hide the instruction's 3-cycle latency (about 3x the throughput of
// one chain); the stripes' registers are then combined. The register after
// a stripe of zeros is linear in the register before it: `shift` applies
// that map (byte-sliced tables of its 32 columns, built once).
constexpr size_t stripe = 4096;  // bytes per chain per chunk, a multiple of 8

struct stripe_shift {
  uint32_t table[4][256];
  uint32_t operator()(uint32_t x) const {
    return table[0][x & 0xff] ^ table[1][(x >> 8) & 0xff] ^ table[2][(x >> 16) & 0xff] ^
           table[3][x >> 24];
  }
};

const stripe_shift& shift_by_stripe() {
  static const stripe_shift s = [] {
    stripe_shift out{};
    static const unsigned char zeros[stripe] = {};
    uint32_t column[32];
    for (int bit = 0; bit < 32; ++bit) column[bit] = extend_hardware(1u << bit, zeros, stripe);
    for (int k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j)
          if (b & (1u << j)) v ^= column[8 * k + j];
        out.table[k][b] = v;
      }
    return out;
  }();
  return s;
}

__attribute__((target("sse4.2"))) uint32_t extend_hardware_striped(uint32_t crc,
                                                                   const unsigned char* p,
                                                                   size_t n) {
  if (n < 3 * stripe) return extend_hardware(crc, p, n);
  const stripe_shift& shift = shift_by_stripe();
  while (n >= 3 * stripe) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < stripe; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + stripe + i, 8);
      std::memcpy(&wc, p + 2 * stripe + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    crc = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(c);
    p += 3 * stripe;
    n -= 3 * stripe;
  }
  return extend_hardware(crc, p, n);
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  auto p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  crc = has_sse42 ? extend_hardware_striped(crc, p, size) : extend_software(crc, p, size);
#else
  crc = extend_software(crc, p, size);
#endif
  return ~crc;
}

}  // namespace strata
