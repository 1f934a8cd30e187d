// Routing: key -> partition (a fixed hash, part of the storage format) ->
// shard (a versioned map, so scaling moves partitions, never rehashes keys).
// A value type; each actor holds its own copy and replaces it on a map
// update with a higher epoch.
#pragma once

#include <cstdint>
#include <vector>

#include "common/hash.hpp"

namespace strata::actors {

class partition_map {
 public:
  partition_map() = default;
  // Partitions dealt round-robin over `shards`.
  partition_map(uint32_t partitions, uint32_t shards);
  // An explicit map (a committed routing table); every owner < shards.
  partition_map(uint64_t epoch, std::vector<uint32_t> owners, uint32_t shards);

  // The map for `shards` shards (epoch + 1) that moves as few partitions as
  // possible: every shard ends with floor(P/n) or ceil(P/n) partitions;
  // partitions of shards >= n all move; a remaining shard gives away only
  // what it holds above its share, and keeps the rest.
  partition_map rebalanced(uint32_t shards) const;
  const std::vector<uint32_t>& owners() const { return owner_; }

  uint64_t epoch() const { return epoch_; }
  uint32_t partitions() const { return static_cast<uint32_t>(owner_.size()); }
  uint32_t shards() const { return shards_; }
  uint32_t partition_of_key(uint64_t key) const { return partition_of(key, partitions()); }
  uint32_t shard_of(uint64_t key) const { return owner_[partition_of_key(key)]; }
  uint32_t owner(uint32_t partition) const { return owner_[partition]; }

  // Groups positions of `keys` by owning shard: result[s] lists the
  // positions (ascending) of keys owned by shard s.
  std::vector<std::vector<uint32_t>> group(const std::vector<uint64_t>& keys) const;

 private:
  uint64_t epoch_ = 0;
  uint32_t shards_ = 0;
  std::vector<uint32_t> owner_;
};

}  // namespace strata::actors
