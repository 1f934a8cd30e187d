// The interface every storage tier of a shard's tier chain implements
// (DRAM tier, write-behind buffer, LMDB tier), and row_buffer, the owned
// batch of rows that moves between tiers.
//
// Batched and narrow: keys are a span, rows are strided records (row.hpp),
// misses come back as an index list. Duplicate keys in a batch are legal;
// every copy gets the same row. A tier instance is owned and used by one
// thread (one actor) at a time; implementations do no locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "tiers/row.hpp"

namespace strata {

// An owned batch of (key, record) pairs of one layout, records packed at
// layout.record_bytes() apart.
class row_buffer {
 public:
  row_buffer() = default;
  explicit row_buffer(row_layout layout) : layout_(layout) {}

  const row_layout& layout() const { return layout_; }
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  std::span<const uint64_t> keys() const { return keys_; }
  uint64_t key(size_t i) const { return keys_[i]; }
  std::byte* record(size_t i) { return records_.data() + i * layout_.record_bytes(); }
  const std::byte* record(size_t i) const { return records_.data() + i * layout_.record_bytes(); }
  rows_span rows() { return {records_.data(), layout_.record_bytes()}; }
  const_rows_span rows() const { return {records_.data(), layout_.record_bytes()}; }

  // Appends a copy of `record`.
  void append(uint64_t key, const std::byte* record) {
    keys_.push_back(key);
    records_.insert(records_.end(), record, record + layout_.record_bytes());
  }
  // Appends an uninitialized record and returns it.
  std::byte* append(uint64_t key) {
    keys_.push_back(key);
    records_.resize(records_.size() + layout_.record_bytes());
    return record(keys_.size() - 1);
  }
  void clear() {
    keys_.clear();
    records_.clear();
  }
  void reserve(size_t n) {
    keys_.reserve(n);
    records_.reserve(n * layout_.record_bytes());
  }

 private:
  row_layout layout_{};
  std::vector<uint64_t> keys_;
  std::vector<std::byte> records_;
};

using row_visitor = std::function<void(uint64_t key, const std::byte* record)>;

class row_store {
 public:
  virtual ~row_store() = default;

  virtual std::string_view name() const = 0;
  virtual const row_layout& layout() const = 0;

  // For each keys[i] present, copies its record to out[i]; appends i to
  // `misses` (in ascending order) for each absent key. A lookup may update
  // access metadata (freq, tick) but never marks a row dirty.
  virtual status lookup(std::span<const uint64_t> keys, rows_span out,
                        std::vector<uint32_t>& misses) = 0;

  // Writes rows[i] as the row of keys[i] (insert or overwrite). `dirty`
  // says the rows are newer than every lower tier (an update or a write-back)
  // rather than a clean promotion from below. Rows this tier pushes out to
  // make room are appended to `spilled` when dirty (the caller writes them
  // down, exactly once) and dropped when clean. A tier without a capacity
  // limit never spills. If a key repeats in the batch, the last copy wins.
  virtual status store(std::span<const uint64_t> keys, const_rows_span rows, bool dirty,
                       row_buffer& spilled) = 0;

  // Removes keys (absent keys are ignored). Not a tombstone: see the chain.
  virtual status erase(std::span<const uint64_t> keys) = 0;

  // Appends every dirty row to `out` and marks it clean: afterwards the
  // caller owns writing them down. Durable tiers have nothing dirty.
  virtual status take_dirty(row_buffer& out) = 0;

  // Calls `visit` for every resident row (order unspecified).
  virtual status dump(const row_visitor& visit) = 0;

  virtual size_t size() const = 0;
};

}  // namespace strata
