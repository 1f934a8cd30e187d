// A read prefetch the optimizer keeps. GCC's pure-const analysis treats
// __builtin_prefetch as free of side effects, so a void helper made only of
// prefetches (or a loop of nothing else) is deemed pure and deleted at -O2:
// the cache's prefetch helpers compiled to nothing until they used this.
#pragma once

#include <cstddef>

namespace strata {

inline void prefetch_line(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 3);
  asm volatile("" : : "r"(p));  // a side effect: the helper is not pure, so it stays
#endif
}

// Every 64-byte line of [p, p + bytes).
inline void prefetch_bytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t b = 0; b < bytes; b += 64) prefetch_line(c + b);
  if (bytes > 0) prefetch_line(c + bytes - 1);  // an unaligned range may end on one more line
}

}  // namespace strata
