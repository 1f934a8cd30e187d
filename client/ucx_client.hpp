// A client in the cluster: lookups, prefetches and pushes over the UCX
// transport (docs/serving.md, "Over the transport") to a serving node's or
// a training gateway's transport endpoint (serving.transport_port). Same
// answers as serving_client over TCP; on the same host UCX uses shared
// memory, across hosts TCP or RDMA. Links UCX (strata_client_ucx).
//
//   auto c = strata::client::ucx_client::connect({"10.0.0.5", 7400});
//   strata::client::rows r;
//   c->lookup_into("ads", keys, r);
//
// Thread-safe (the transport's bridge is); each call waits for its reply up
// to the timeout. A push is not retried here; one given a push id (non-zero)
// can be re-sent with the same id safely (the shards apply an id once).
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "client/client.hpp"
#include "client/frame_socket.hpp"
#include "common/error.hpp"

namespace strata::transport {
class node_bridge;
}

namespace strata::client {

class ucx_client {
 public:
  static expected<std::unique_ptr<ucx_client>> connect(
      const wire::endpoint& endpoint,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  ~ucx_client();

  status lookup_into(const std::string& table, std::span<const uint64_t> keys, rows& out);
  status prefetch(const std::string& table, std::span<const uint64_t> keys);
  status push(const std::string& table, std::span<const uint64_t> keys,
              std::span<const float> grads, uint64_t id = 0);
  // The serving node's name (its bridge's).
  const std::string& server() const { return server_; }

 private:
  ucx_client() = default;
  expected<std::vector<std::byte>> call(int type, std::vector<std::byte> payload);
  std::unique_ptr<transport::node_bridge> bridge_;
  std::string server_;
  std::chrono::milliseconds timeout_{5000};
};

}  // namespace strata::client
