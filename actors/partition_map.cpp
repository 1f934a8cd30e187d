#include "actors/partition_map.hpp"

#include "common/error.hpp"

namespace strata::actors {

partition_map::partition_map(uint32_t partitions, uint32_t shards)
    : epoch_(1), shards_(shards), owner_(partitions) {
  STRATA_ASSERT(partitions > 0 && shards > 0, "a partition map needs partitions and shards");
  for (uint32_t p = 0; p < partitions; ++p) owner_[p] = p % shards;
}

std::vector<std::vector<uint32_t>> partition_map::group(const std::vector<uint64_t>& keys) const {
  std::vector<std::vector<uint32_t>> out(shards_);
  for (uint32_t i = 0; i < keys.size(); ++i) out[shard_of(keys[i])].push_back(i);
  return out;
}

}  // namespace strata::actors
