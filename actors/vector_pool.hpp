// vector_pool: message vectors kept for reuse by the actor that owns it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace strata::actors {

// Vectors that messages brought in, kept for the messages an actor sends
// (CAF 0.17 messages own their vectors: a vector moved into a request is
// gone, one received can be kept). Bounded by Limit; take() hands out an
// empty one with its capacity, or a new one when the pool is dry. The
// cache tier and the worker keep theirs in their state.
template <class T, size_t Limit = 32>
class vector_pool {
 public:
  // One that holds n elements without growing if there is one (the
  // smallest such), else the largest.
  std::vector<T> take(size_t n = 0) {
    if (free_.empty()) return {};
    size_t best = 0;
    for (size_t i = 1; i < free_.size(); ++i) {
      const size_t c = free_[i].capacity(), b = free_[best].capacity();
      if (b < n ? c > b : (c >= n && c < b)) best = i;
    }
    auto v = std::move(free_[best]);
    free_[best] = std::move(free_.back());
    free_.pop_back();
    v.clear();
    return v;
  }
  // When full, `v` replaces the smallest vector if it is larger: the big
  // buffers (a whole batch's rows) are the ones worth keeping.
  void give(std::vector<T>&& v) {
    if (v.capacity() == 0) return;
    if (free_.size() >= Limit) {
      auto smallest = std::min_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
        return a.capacity() < b.capacity();
      });
      if (smallest->capacity() < v.capacity()) *smallest = std::move(v);
      v = {};
      return;
    }
    free_.push_back(std::move(v));
    v = {};
  }
  size_t size() const { return free_.size(); }
  // Gives `v` a pooled buffer if it has none (it was moved into a message).
  void refill(std::vector<T>& v, size_t n = 0) {
    if (v.capacity() == 0) v = take(n);
  }

 private:
  std::vector<std::vector<T>> free_;
};

}  // namespace strata::actors
