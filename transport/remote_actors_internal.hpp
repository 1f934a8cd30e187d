// Internals shared by remote_actors.cpp (proxies, node_transport) and
// remote_relays.cpp (relays: a peer -> an exported local actor).
#pragma once

#include <caf/all.hpp>
#include <memory>
#include <string>

#include "actors/protocol.hpp"
#include "actors/training_protocol.hpp"
#include "transport/actor_directory.hpp"
#include "transport/remote_actors.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(strata::transport::frame_ptr)

namespace strata::transport::remote_detail {

using frame_atom = caf::atom_constant<caf::atom("frame")>;

void reply_error(node_bridge& bridge, const inbound_frame& f, const std::string& text);
void unsupported(node_bridge& bridge, const inbound_frame& f, const char* kind);

caf::behavior shard_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::shard_actor shard, std::shared_ptr<actor_directory> directory);
caf::behavior cache_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::cache_tier_actor cache, std::shared_ptr<actor_directory> directory);
caf::behavior dense_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::dense_actor dense);
caf::behavior worker_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                           actors::worker_actor worker, uint32_t target,
                           std::shared_ptr<actor_directory> caches);
caf::behavior spawner_relay(caf::event_based_actor*, std::shared_ptr<node_bridge> bridge,
                            node_transport::spawn_fn spawn, node_transport::retire_fn retire);

}  // namespace strata::transport::remote_detail
