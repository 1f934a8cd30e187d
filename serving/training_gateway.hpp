// A training cluster's endpoint for users' own models (docs/serving.md,
// "Training through the gateway"): the binary protocol of serving
// (client/wire.hpp) answered from the cluster's shards instead of a
// serving copy.
//
// - lookup: the keys' current rows, pulled from their owning shards (new
//   keys get the table's initializer row, as a worker's pull does), with
//   their versions;
// - push: gradients (n x dim) applied by the owning shards' optimizer,
//   reduced per key, answered once every shard has applied its part (an
//   acknowledged push survives a graceful stop: the coordinator stops
//   taking pushes before its final checkpoint and drain, and those already
//   taken are applied first — a push after that answers "stopping").
//   Async mode only: in pass
//   mode the cache tiers own the rows during a pass;
// - prefetch: warms the keys' rows into the shards' DRAM tiers.
//
// The partition map is refreshed from the coordinator at most every
// `routing_refresh` (after a scale, shards forward requests for partitions
// they no longer own meanwhile). Pushes carry checkpoint epoch 0: a
// checkpoint holds the pushes each shard applied before its cut.
//
// Thread-safe: every call runs on its caller's thread (the binary server's
// connection threads) with a scoped actor of its own.
#pragma once

#include <caf/all.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "actors/partition_map.hpp"
#include "actors/push_gate.hpp"
#include "actors/training_protocol.hpp"
#include "serving/service.hpp"
#include "tiers/row.hpp"

namespace strata::serving {

struct gateway_config {
  std::string table;
  row_layout layout;
  bool accepts_push = true;  // false in pass mode
  uint32_t max_request_keys = 1u << 20;
  uint64_t max_reply_bytes = uint64_t{128} << 20;  // a lookup reply (versions + weights)
  std::chrono::milliseconds timeout{60000};      // per shard request
  std::chrono::milliseconds map_timeout{60000};  // the coordinator's partition map
  std::chrono::milliseconds routing_refresh{1000};
  // The coordinator closes it before its final cut: pushes then answer
  // "stopping" (errc::unavailable). Null: pushes are always taken.
  std::shared_ptr<actors::push_gate> pushes;
};

class training_gateway : public lookup_service {
 public:
  training_gateway(caf::actor_system& system, actors::coordinator_actor coordinator,
                   gateway_config config);

  status lookup(const std::string& table, std::span<const uint64_t> keys,
                lookup_result& out) override;
  status prefetch(const std::string& table, std::span<const uint64_t> keys) override;
  expected<uint64_t> reply_bytes(const std::string& table, size_t n) override;
  status push(const std::string& table, uint32_t dim, std::span<const uint64_t> keys,
              std::span<const float> grads, uint64_t id = 0) override;
  // Its one table (keys are listed from a checkpoint, not the shards).
  expected<std::vector<wire::table_info>> tables() override;

 private:
  struct routing {
    actors::partition_map map;
    std::vector<actors::shard_actor> shards;
  };
  status check(const std::string& table, size_t keys) const;
  expected<routing> current_routing(caf::scoped_actor& self);

  caf::actor_system& system_;
  actors::coordinator_actor coordinator_;
  gateway_config config_;
  std::mutex mutex_;
  std::optional<routing> routing_;
  std::chrono::steady_clock::time_point refreshed_;
};

}  // namespace strata::serving
