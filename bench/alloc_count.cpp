#include "bench/alloc_count.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace strata::alloc_count {
namespace {

// One counter per thread slot, each on its own cache line, so that two
// threads allocating at once do not share a line. A thread takes the next
// slot on its first allocation; past `slots` threads, slots are shared
// (fetch_add keeps the sum right).
constexpr unsigned slots = 256;
struct alignas(64) slot {
  std::atomic<uint64_t> count{0};
};
slot counters[slots];
std::atomic<unsigned> next_slot{0};
// Trivially initialized (no TLS constructor runs inside operator new).
thread_local slot* mine = nullptr;
thread_local uint64_t mine_count = 0;

inline void count_one() {
  if (mine == nullptr) mine = &counters[next_slot.fetch_add(1, std::memory_order_relaxed) % slots];
  mine->count.fetch_add(1, std::memory_order_relaxed);
  ++mine_count;
}

void* allocate(std::size_t n) {
  count_one();
  if (n == 0) n = 1;
  return std::malloc(n);
}

void* allocate_aligned(std::size_t n, std::align_val_t al) {
  count_one();
  const auto align = static_cast<std::size_t>(al);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, n) != 0) return nullptr;
  return p;
}

}  // namespace

uint64_t total() {
  uint64_t sum = 0;
  for (const auto& s : counters) sum += s.count.load(std::memory_order_relaxed);
  return sum;
}

uint64_t thread_total() { return mine_count; }

}  // namespace strata::alloc_count

using strata::alloc_count::allocate;
using strata::alloc_count::allocate_aligned;

void* operator new(std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  if (void* p = allocate_aligned(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  if (void* p = allocate_aligned(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, al);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
