// The ssd_flush actor: the write side of one shard's LMDB table. Each
// flush(seq, rows) is written in one sorted write transaction and answered
// with seq once committed; drain syncs the environment (MDB_NOSYNC writes
// become durable). A failed write is answered with an error naming the
// path; the shard keeps the rows and retries.
#pragma once

#include <caf/fwd.hpp>
#include <memory>

#include "actors/protocol.hpp"
#include "common/clock.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {

// own_thread: run detached (LMDB commits block a thread); off in
// deterministic tests.
// clock: times each LMDB write transaction (the reply carries it).
ssd_flush_actor spawn_ssd_flush(caf::actor_system& system, std::unique_ptr<lmdb_tier> writer,
                                bool own_thread = true,
                                const clock_source* clock = &steady_clock_source::instance());

}  // namespace strata::actors
