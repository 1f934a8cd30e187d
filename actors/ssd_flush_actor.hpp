// The ssd_flush actor: the write side of one shard's LMDB table. Each
// flush(seq, rows) is written in one sorted write transaction and answered
// with seq once committed; drain syncs the environment (MDB_NOSYNC writes
// become durable). A failed write is retried here, in order, before the
// next batch (flush_attempts in all, with a short backoff): a later batch
// never overtakes a retried one. If every attempt fails the answer is an
// error naming the path, and the shard fail-stops (shard_flush.cpp). A
// failed sync is not retried (after a failed fsync the kernel may have
// dropped the dirty pages: a second fsync can succeed with the data lost).
#pragma once

#include <caf/fwd.hpp>
#include <memory>

#include "actors/protocol.hpp"
#include "common/clock.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {

// Attempts of one flush batch's write, and the pauses between them
// (10 ms, 100 ms, 500 ms: a transient failure is ridden out, a full disk
// stops the shard within about 0.6 s).
inline constexpr int flush_attempts = 4;
inline constexpr int flush_backoff_ms[flush_attempts - 1] = {10, 100, 500};

// own_thread: run detached (LMDB commits block a thread); off in
// deterministic tests.
// clock: times each LMDB write transaction (the reply carries it).
ssd_flush_actor spawn_ssd_flush(caf::actor_system& system, std::unique_ptr<lmdb_tier> writer,
                                bool own_thread = true,
                                const clock_source* clock = &steady_clock_source::instance());

}  // namespace strata::actors
