// The update publisher's resend source on a training node (serving/
// update_stream.hpp, "Bounded window"): every row the node's own shards
// hold, one partition at a time (actors::resend_atom: DRAM, write-behind,
// LMDB, newest copy first), sent as weights and versions. A subscriber
// that was away longer than the publisher's window gets these, then the
// window from where it stood when the resend began.
//
// The source asks the shards from the calling (subscriber's) thread with a
// scoped actor; it must be cleared (update_publisher::set_resend({}))
// before the actor system stops.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <vector>

#include "actors/protocol.hpp"
#include "serving/update_stream.hpp"

namespace strata::serving {

// `shards`: this node's shards (index in the cluster, handle).
resend_source shard_resend(caf::actor_system& system,
                           std::vector<std::pair<uint32_t, actors::shard_actor>> shards,
                           uint32_t partitions, row_layout layout);

}  // namespace strata::serving
