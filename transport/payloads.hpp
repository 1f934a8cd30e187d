// Which value each frame type carries (docs/wire-format.md, "Payloads"),
// as one function: decodes `payload` as the value of `header.type` and
// throws it away. The frame fuzzer (tests/fuzz/frame_fuzz.cpp) and the
// corpus tests run every frame through it; the bridge (hello) and the
// relays and proxies (remote_actors.cpp) decode the same types.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "transport/frame.hpp"

namespace strata::transport {

// What every frame of the hello exchange carries (the fields a step does
// not use are empty; node_bridge_connect.cpp, docs/multi-node.md):
//   hello          name, node_id, host_id, nonce
//   hello_ack      name, node_id, host_id, nonce, proof
//   hello_proof    name, proof, worker_address
//   hello_welcome  name, worker_address
//   hello_refused  name, refusal
// A worker address goes only to a peer that proved the cluster secret.
struct hello_payload {
  std::string name;
  uint64_t node_id = 0;
  std::string host_id;
  std::vector<uint8_t> worker_address;
  std::vector<uint8_t> nonce;  // the sender's fresh challenge (auth::nonce_size bytes)
  std::vector<uint8_t> proof;  // auth::prove over the receiver's nonce (auth::mac_size bytes)
  std::string refusal;         // hello_refused: why
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello_payload& x) {
  return f(x.name, x.node_id, x.host_id, x.worker_address, x.nonce, x.proof, x.refusal);
}

// An actor handle on the wire (routing tables and migration orders name
// shards): the node that hosts it and its target there. The receiver maps
// it back to its own exported actor (node == itself) or to a proxy; an
// unknown node or target is an error naming it (remote_actors.cpp).
struct actor_ref {
  std::string node;
  uint32_t target = 0;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_ref& x) {
  return f(x.node, x.target);
}

// actors::routing_table with its shards as actor_refs (shard_commit, cache_map).
struct routing_wire {
  uint64_t epoch = 0;
  std::vector<uint32_t> owners;
  std::vector<actor_ref> shards;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, routing_wire& x) {
  return f(x.epoch, x.owners, x.shards);
}

// actors::migration_order with its destinations as actor_refs (shard_migrate).
struct migration_wire {
  uint64_t epoch = 0;
  std::vector<uint32_t> partitions;
  std::vector<actor_ref> destinations;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_wire& x) {
  return f(x.epoch, x.partitions, x.destinations);
}

// A reply's value depends on its request, which a lone frame does not say:
// replies are checked against every reply type, and pass if any fits.
status check_payload_value(const frame_header& header, std::span<const std::byte> payload);

}  // namespace strata::transport
