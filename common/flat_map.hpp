// A flat open-addressing hash map from uint64_t keys (linear probing,
// backward-shift deletion, load at most 1/2), for the per-batch paths that
// used std::unordered_map: one allocation per node there, none here once
// the table has grown to its working size. clear() keeps the capacity, so
// a map kept as scratch in an actor's state and cleared per batch stops
// allocating after the first batches.
//
// Values must be cheap to copy (indices, versions, flags). Pointers
// returned by find / try_emplace are valid until the next insertion or
// erase. Iteration order is unspecified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace strata {

template <class V>
class flat_map {
 public:
  flat_map() = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return used_.size(); }

  // Removes every entry; the table keeps its capacity.
  void clear() {
    if (size_ == 0) return;
    std::memset(used_.data(), 0, used_.size());
    size_ = 0;
  }

  // Room for n entries without growing.
  void reserve(size_t n) {
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want > used_.size()) rehash(want);
  }

  // Inserts (key, value) unless key is present; returns the entry's value
  // and whether it was inserted.
  std::pair<V*, bool> try_emplace(uint64_t key, const V& value = V{}) {
    if (2 * (size_ + 1) > used_.size()) rehash(used_.empty() ? 16 : 2 * used_.size());
    size_t i = slot_of(key);
    while (used_[i]) {
      if (keys_[i] == key) return {&values_[i], false};
      i = (i + 1) & mask_;
    }
    used_[i] = 1;
    keys_[i] = key;
    values_[i] = value;
    ++size_;
    return {&values_[i], true};
  }

  V& operator[](uint64_t key) { return *try_emplace(key).first; }

  V* find(uint64_t key) {
    if (size_ == 0) return nullptr;
    for (size_t i = slot_of(key); used_[i]; i = (i + 1) & mask_)
      if (keys_[i] == key) return &values_[i];
    return nullptr;
  }
  const V* find(uint64_t key) const { return const_cast<flat_map*>(this)->find(key); }
  bool contains(uint64_t key) const { return find(key) != nullptr; }

  // Removes key; returns whether it was present.
  bool erase(uint64_t key) {
    if (size_ == 0) return false;
    size_t i = slot_of(key);
    while (true) {
      if (!used_[i]) return false;
      if (keys_[i] == key) break;
      i = (i + 1) & mask_;
    }
    // Backward shift: move later entries of the probe run into the hole
    // when their home slot is not between the hole and them.
    size_t hole = i;
    for (size_t j = (hole + 1) & mask_; used_[j]; j = (j + 1) & mask_) {
      const size_t home = slot_of(keys_[j]);
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      keys_[hole] = keys_[j];
      values_[hole] = std::move(values_[j]);
      hole = j;
    }
    used_[hole] = 0;
    --size_;
    return true;
  }

  // fn(key, value) for every entry.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (size_t i = 0; i < used_.size(); ++i)
      if (used_[i]) fn(keys_[i], values_[i]);
  }

  // Bytes the table holds (for memory accounting).
  size_t memory_bytes() const {
    return used_.capacity() + keys_.capacity() * sizeof(uint64_t) + values_.capacity() * sizeof(V);
  }

 private:
  // murmur3's finalizer: sequential keys spread over the table.
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
  }
  size_t slot_of(uint64_t key) const { return static_cast<size_t>(mix(key)) & mask_; }

  void rehash(size_t slots) {
    std::vector<uint64_t> keys(slots);
    std::vector<V> values(slots);
    std::vector<uint8_t> used(slots, 0);
    keys_.swap(keys);
    values_.swap(values);
    used_.swap(used);
    mask_ = slots - 1;
    size_ = 0;
    for (size_t i = 0; i < used.size(); ++i)
      if (used[i]) try_emplace(keys[i], values[i]);
  }

  std::vector<uint64_t> keys_;
  std::vector<V> values_;
  std::vector<uint8_t> used_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace strata
