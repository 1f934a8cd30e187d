// The shard's reader: reads LMDB rows for a shard's cold keys on a thread
// of its own (its own handle of the table, its own read transactions), so
// the shard goes on answering requests whose rows are above LMDB while the
// read runs (docs/tiers.md, Reads off the shard's thread). Requests are
// answered in the order they came (one actor): the shard relies on it.
//
// The reply carries the keys that were found (a subset of the request, in
// its order) and their rows; a key not in it is not stored (or is a
// tombstone). The shard installs the rows (shard_actor.cpp), skipping any
// whose copy may have changed since the read.
#pragma once

#include <atomic>
#include <caf/actor_addr.hpp>
#include <caf/fwd.hpp>
#include <memory>
#include <vector>

#include "actors/protocol.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {

using shard_read_atom = caf::atom_constant<caf::atom("shardread")>;
using shard_read_release_atom = caf::atom_constant<caf::atom("shardrrel")>;

using shard_reader_actor =
    caf::typed_actor<caf::replies_to<shard_read_atom, std::vector<uint64_t>>::with<row_batch>,
                     // Tests (shard_read_gate): sends the held replies.
                     caf::reacts_to<shard_read_release_atom>>;

// Fault injection for tests: while `hold` is set the reader reads at once
// but keeps its replies until release(), as if they were slow to come back
// (the race of a read against a flush of the same key).
struct shard_read_gate {
  std::atomic<bool> hold = false;
  caf::actor_addr reader;  // set at spawn
  // Stops holding; the reader sends the held replies (in order) when it
  // gets the release message (run the scheduler in deterministic tests).
  void release();
};

// own_thread: run detached (an LMDB read blocks its thread); off in
// deterministic tests. gate: null except in tests.
shard_reader_actor spawn_shard_reader(caf::actor_system& system, std::unique_ptr<lmdb_tier> tier,
                                      bool own_thread, std::shared_ptr<shard_read_gate> gate);

}  // namespace strata::actors
