// The update publisher's resend source on a training node (serving/
// update_stream.hpp, "Bounded window"): every row the node's own shards
// hold, one partition at a time (actors::resend_atom: DRAM, write-behind,
// LMDB, newest copy first), sent as weights and versions. A subscriber
// that was away longer than the publisher's window gets these, then the
// window from where it stood when the resend began.
//
// The source asks the shards from the calling (subscriber's) thread
// through short-lived event-based actors, holding the shards weakly.
//
// NOT WIRED into strata node yet: wired in launch_node (set_resend once the
// cluster started, cleared before the actors stop), a node that had resent
// rows hung in its actor system's shutdown in serving_e2e_test (the
// detached threads never finished; cause not found in time).
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
