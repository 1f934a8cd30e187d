#include "actors/partition_map.hpp"

#include "common/error.hpp"

namespace strata::actors {

partition_map::partition_map(uint32_t partitions, uint32_t shards)
    : epoch_(1), shards_(shards), owner_(partitions) {
  STRATA_ASSERT(partitions > 0 && shards > 0, "a partition map needs partitions and shards");
  for (uint32_t p = 0; p < partitions; ++p) owner_[p] = p % shards;
}

partition_map::partition_map(uint64_t epoch, std::vector<uint32_t> owners, uint32_t shards)
    : epoch_(epoch), shards_(shards), owner_(std::move(owners)) {
  STRATA_ASSERT(!owner_.empty() && shards > 0, "a partition map needs partitions and shards");
  for (uint32_t o : owner_) STRATA_ASSERT(o < shards, "a partition's owner is not a shard");
}

partition_map partition_map::rebalanced(uint32_t shards) const {
  STRATA_ASSERT(shards > 0 && shards <= partitions(),
                "cannot spread partitions over that many shards");
  const uint32_t p = partitions();
  // Shard s's share: the first P % n shards take one more.
  auto share = [&](uint32_t s) { return p / shards + (s < p % shards ? 1u : 0u); };
  std::vector<uint32_t> held(shards, 0);
  std::vector<uint32_t> owner = owner_;
  std::vector<uint32_t> freed;
  for (uint32_t part = 0; part < p; ++part) {
    const uint32_t o = owner[part];
    if (o < shards && held[o] < share(o))
      ++held[o];
    else
      freed.push_back(part);
  }
  uint32_t s = 0;
  for (uint32_t part : freed) {
    while (held[s] >= share(s)) ++s;
    owner[part] = s;
    ++held[s];
  }
  return partition_map(epoch_ + 1, std::move(owner), shards);
}

std::vector<std::vector<uint32_t>> partition_map::group(const std::vector<uint64_t>& keys) const {
  std::vector<std::vector<uint32_t>> out(shards_);
  for (uint32_t i = 0; i < keys.size(); ++i) out[shard_of(keys[i])].push_back(i);
  return out;
}

}  // namespace strata::actors
