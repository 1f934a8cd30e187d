// Count-min sketch for admission: a key is admitted (gets a row of its own)
// only after it has been seen `threshold` times.
//
// depth rows x width counters of 16 bits (saturating); each row hashes the
// key with its own seed. Counts never under-estimate, so an admitted key is
// never refused; a few rare keys may be admitted early (over-estimate), with
// probability <= e^-depth for error width/e * total sightings.
// Owned by one tier / actor; no locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata {

class count_min_sketch {
 public:
  // width counters per row (rounded up to a power of two), depth rows.
  count_min_sketch(uint32_t width, uint32_t depth);

  // Counts one sighting of `key` and returns its (over-)estimated count
  // including this one.
  uint32_t add(uint64_t key);
  uint32_t estimate(uint64_t key) const;
  // Halves every counter (ageing), so the sketch tracks recent popularity.
  void halve();
  size_t memory_bytes() const { return counters_.size() * sizeof(uint16_t); }
  // Raw counters, for checkpoints.
  const std::vector<uint16_t>& counters() const { return counters_; }
  void load(std::vector<uint16_t> counters);

 private:
  uint32_t index(uint64_t key, uint32_t row) const;
  uint32_t width_mask_;
  uint32_t depth_;
  std::vector<uint16_t> counters_;
};

}  // namespace strata
