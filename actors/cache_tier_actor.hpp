// The cache tier actor: one HBM cache (cache_backend; the CPU backend on
// machines without a GPU) in front of the shards.
//
// lookup: hits from the cache; misses pulled from their shards, one pull
// per shard, inserted clean, then answered — every position gets its row
// (the newest of the pulled, resident and evicted copies: a reply may
// predate an update made here while it was in flight).
// prefetch: the same without a reply. push: async mode forwards gradients
// to the owning shards and refreshes its copies from their replies (the ack
// carries the new versions); pass mode applies them in the cache (rows
// dirty) and acks once applied (rows it misses are pulled first; its keys
// stay pinned meanwhile). Evicted dirty rows are written back to their
// shard and kept readable until the shard acknowledges, and past that
// while a pass-mode push waiting for rows pins the key. pass_end writes
// every dirty row back and replies when all shards acknowledged.
#pragma once

#include <caf/fwd.hpp>
#include <memory>
#include <vector>

#include "actors/config.hpp"
#include "actors/partition_map.hpp"
#include "actors/protocol.hpp"

namespace strata::actors {

// The backend comes from config.make_backend (cpu_cache when empty); its
// failure is the error, naming the cache tier.
expected<cache_tier_actor> spawn_cache_tier(caf::actor_system& system, const cache_config& config,
                                            training_mode mode, std::vector<shard_actor> shards,
                                            partition_map map);

}  // namespace strata::actors
