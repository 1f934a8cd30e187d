// The shard actor: owns the tier chain of its partitions (DRAM ->
// write-behind -> LMDB -> initializer) and, through its ssd_flush actor,
// the write side of its LMDB environment.
//
// pull: rows from the chain (promoting, initializing); with
// STRATA_SHARD_ASYNC_READS=1, keys below DRAM and the write-behind buffer
// are read by the shard's reader off the shard's thread while the pull
// waits and other requests go on (shard_read.cpp). push (async mode):
// gradients reduced per key, the optimizer applied here (updates of one key
// are serialized by the actor), the updated rows returned. write_back:
// whole rows from a cache tier, older versions ignored. prefetch: warms
// DRAM (its cold keys read off the thread too, with the reader on). Evicted dirty rows wait in the
// write-behind buffer until ssd_flush confirms their batch (at most max_flushes_in_flight batches
// in flight: back-pressure, rows are never dropped); once max_queued_flush_batches batches' rows
// wait behind those, requests that can spill more stay in the mailbox until a flush lands
// (bounded memory under a slow disk). drain: everything written down and synced, then ok.
#pragma once

#include <caf/fwd.hpp>
#include <memory>

#include "actors/config.hpp"
#include "actors/protocol.hpp"
#include "common/error.hpp"

namespace strata::actors {

struct shard_read_gate;

// Opens the shard's LMDB environment (errors name the path) and spawns the
// shard with its ssd_flush actor and its reader (actors/shard_reader.hpp).
// read_gate: fault injection for tests (holds the reader's replies).
expected<shard_actor> spawn_shard(caf::actor_system& system, const shard_config& config,
                                  std::shared_ptr<shard_read_gate> read_gate = nullptr);

}  // namespace strata::actors
