// The shard actor: owns the tier chain of its partitions (DRAM ->
// write-behind -> LMDB -> initializer) and, through its ssd_flush actor,
// the write side of its LMDB environment.
//
// pull: rows from the chain (promoting, initializing). push (async mode):
// gradients reduced per key, the optimizer applied here (updates of one key
// are serialized by the actor), the updated rows returned. write_back:
// whole rows from a cache tier, older versions ignored. prefetch: warms
// DRAM. Evicted dirty rows wait in the write-behind buffer until ssd_flush
// confirms their batch (at most max_flushes_in_flight batches in flight:
// back-pressure, rows are never dropped). drain: everything written down
// and synced, then ok.
#pragma once

#include <caf/fwd.hpp>

#include "actors/config.hpp"
#include "actors/protocol.hpp"
#include "common/error.hpp"

namespace strata::actors {

// Opens the shard's LMDB environment (errors name the path) and spawns the
// shard with its ssd_flush actor.
expected<shard_actor> spawn_shard(caf::actor_system& system, const shard_config& config);

}  // namespace strata::actors
