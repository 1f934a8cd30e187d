#include "tiers/write_behind.hpp"

#include <algorithm>

namespace strata {

write_behind_buffer::write_behind_buffer(row_layout layout) : layout_(layout) {}

status write_behind_buffer::lookup(std::span<const uint64_t> keys, rows_span out,
                                   std::vector<uint32_t>& misses) {
  const size_t bytes = layout_.record_bytes();
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t* slot = rows_.find(keys[i]);
    if (slot == nullptr) {
      misses.push_back(static_cast<uint32_t>(i));
    } else {
      std::memcpy(out[i], records_.data() + *slot * bytes, bytes);
    }
  }
  return {};
}

status write_behind_buffer::store(std::span<const uint64_t> keys, const_rows_span rows,
                                  bool /*dirty*/, row_buffer& /*spilled*/) {
  const size_t bytes = layout_.record_bytes();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [slot, inserted] = rows_.try_emplace(keys[i], 0);
    if (inserted) {
      if (free_slots_.empty()) {
        *slot = records_.size() / bytes;
        records_.resize(records_.size() + bytes);
        queued_.push_back(0);
      } else {
        *slot = free_slots_.back();
        free_slots_.pop_back();
      }
    }
    std::memcpy(records_.data() + *slot * bytes, rows[i], bytes);
    if (!queued_[*slot]) open_.push_back(keys[i]);  // queued once per batch
    queued_[*slot] = 1;
  }
  return {};
}

void write_behind_buffer::remove(uint64_t key) {
  const size_t* slot = rows_.find(key);
  if (slot == nullptr) return;
  free_slots_.push_back(*slot);
  queued_[*slot] = 0;
  rows_.erase(key);
}

status write_behind_buffer::erase(std::span<const uint64_t> keys) {
  for (uint64_t key : keys) remove(key);
  return {};
}

bool write_behind_buffer::take_batch(row_buffer& out, uint64_t& seq) {
  out = row_buffer(layout_);
  return take_batch_into([&out](uint64_t key, const std::byte* rec) { out.append(key, rec); },
                         seq);
}

size_t write_behind_buffer::release(uint64_t seq) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                         [seq](const auto& b) { return b.first == seq; });
  if (it == in_flight_.end()) return 0;  // unknown or already released: nothing to do
  const size_t confirmed = it->second.size();
  const size_t bytes = layout_.record_bytes();
  for (const flushed_row& row : it->second) {
    const size_t* slot = rows_.find(row.key);
    // Release only if the copy here is still the one that was flushed; a
    // newer copy waits for its own batch.
    if (slot != nullptr && meta_of(records_.data() + *slot * bytes).version == row.version &&
        !queued_[*slot]) {
      remove(row.key);
    }
  }
  in_flight_.erase(it);
  return confirmed;
}

status write_behind_buffer::take_dirty(row_buffer& out) {
  flat_map<uint8_t> in_flight_keys;
  for (const auto& [seq, batch] : in_flight_)
    for (const auto& row : batch) in_flight_keys.try_emplace(row.key, 1);
  const size_t bytes = layout_.record_bytes();
  for (uint64_t key : open_) {
    const size_t* slot = rows_.find(key);
    if (slot == nullptr || !queued_[*slot]) continue;
    queued_[*slot] = 0;
    out.append(key, records_.data() + *slot * bytes);
    // A copy in flight stays readable until its batch is released.
    if (!in_flight_keys.contains(key)) remove(key);
  }
  open_.clear();
  return {};
}

status write_behind_buffer::dump(const row_visitor& visit) {
  const size_t bytes = layout_.record_bytes();
  rows_.for_each([&](uint64_t key, size_t slot) { visit(key, records_.data() + slot * bytes); });
  return {};
}

size_t write_behind_buffer::memory_bytes() const {
  return records_.capacity() + rows_.memory_bytes() + open_.capacity() * sizeof(uint64_t) +
         queued_.capacity();
}

}  // namespace strata
