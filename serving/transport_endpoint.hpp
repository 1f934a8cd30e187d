// Lookups over the UCX transport, for clients in the cluster
// (docs/serving.md, "Over the transport"): a node_bridge of its own whose
// serve_lookup / serve_prefetch / serve_push frames (payloads of the binary
// serving protocol, client/wire.hpp) are answered by a lookup_service — a
// serving node's tables or a training gateway. With `threads` = 0 requests
// are answered on the bridge's progress thread (a serving node: lookups
// are memory reads, an LMDB miss a short read; no thread hop, measured 3x
// the small-batch throughput of a worker-thread hand-off); otherwise by
// that many worker threads (a training gateway, whose requests wait for
// shards). Peers on the same host get loopback TCP (shared memory only
// where UCX_TLS allows it, docs/transport.md), others TCP or RDMA.
//
// start() listens (port 0: a free one, see port()); stop() says goodbye to
// the clients, drains the queue and joins the threads. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "serving/service.hpp"
#include "transport/node_bridge.hpp"

namespace strata::serving {

class transport_endpoint {
 public:
  explicit transport_endpoint(lookup_service& service, size_t threads = 0);
  ~transport_endpoint();
  // `config.node_name` names this node in the clients' errors.
  status start(transport::bridge_config config);
  uint16_t port() const;
  void stop();

 private:
  void serve(transport::inbound_frame frame);
  void run();

  lookup_service& service_;
  size_t threads_count_;
  std::unique_ptr<transport::node_bridge> bridge_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<transport::inbound_frame> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::serving
