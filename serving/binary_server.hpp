// The binary lookup server of a serving node or a training gateway: frames
// (client/wire.hpp) over TCP, one thread per connection. Answers lookup
// with rows, prefetch with ack, push (gradients, a training gateway) with
// ack, anything else and every failure with an error frame naming the
// problem; a frame that fails its header or checksum check closes the
// connection (the stream cannot be resynchronized). `updates` frames are
// refused (counted in updates_refused()): rows come only from the
// configured publishers, through the node's update subscriber.
//
// Connections, deadlines and memory are bounded by `settings`
// (serving/connection_limits.hpp): receive buffers and lookup replies are
// charged to the server's byte budget before they are allocated.
//
// start() binds (port 0: a free port, see port()) and accepts on its own
// thread; stop() closes the listener and every connection and joins the
// threads. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "serving/connection_limits.hpp"
#include "serving/service.hpp"

namespace strata::serving {

class binary_server {
 public:
  explicit binary_server(lookup_service& service, connection_settings settings = {});
  ~binary_server();
  status start(const std::string& bind_address, uint16_t port);
  uint16_t port() const;
  void stop();
  connection_stats stats() const;
  uint64_t updates_refused() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serving
