// The push ids a shard has applied (issue 15 item 5): a client retrying a
// push with the same id must not apply it twice, even when its earlier
// attempt timed out at a shard that applied it later. Bounded: the last
// `capacity` ids are remembered (FIFO), older ones are forgotten and
// counted as evictions; a retry older than that window applies again.
//
// An entry is a fingerprint of the id and the keys of the part this shard
// was sent (push_fingerprint): the gateway sends one part per shard under
// the same id, and a shard forwarding keys it no longer owns sends another
// part of the same push to their new owner, which must not be taken for a
// retry of the part it was sent directly.
//
// Single-threaded (the shard's state); no id 0 (0 means "no id").
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_set>

namespace strata::actors {

// The id mixed with the keys, in order (splitmix64 steps). 0 for id 0.
inline uint64_t push_fingerprint(uint64_t id, std::span<const uint64_t> keys) {
  if (id == 0) return 0;
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(id);
  for (uint64_t k : keys) h = mix(h ^ k);
  return h == 0 ? 1 : h;  // 0 stays "no id"
}

class push_ids {
 public:
  static constexpr size_t default_capacity = 65536;

  explicit push_ids(size_t capacity = default_capacity) : capacity_(capacity ? capacity : 1) {}

  bool seen(uint64_t id) const { return id != 0 && set_.count(id) != 0; }

  // Remembers `id` (no-op for 0 or an id already held), forgetting the
  // oldest when full.
  void remember(uint64_t id) {
    if (id == 0 || !set_.insert(id).second) return;
    order_.push_back(id);
    if (order_.size() > capacity_) {
      set_.erase(order_.front());
      order_.pop_front();
      ++evictions_;
    }
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }

 private:
  size_t capacity_;
  std::deque<uint64_t> order_;
  std::unordered_set<uint64_t> set_;
  uint64_t evictions_ = 0;
};

}  // namespace strata::actors
