// The HTTP/JSON endpoint of a serving node (Boost.Beast), for debugging
// and simple clients; in-cluster clients use the binary protocol.
//
//   GET  /health  -> 200 {"status":"ok","tables":{NAME:{"dim":..,"lookups":..,...}}}
//   POST /lookup  {"table":"ads","keys":[1,2,"18446744073709551615"]}
//                 -> 200 {"table":"ads","dim":D,"versions":[..],"rows":[[..],..]}
// Keys are unsigned 64-bit integers, as JSON numbers or decimal strings
// (JavaScript loses precision above 2^53). Errors are JSON {"error": "..."}:
// 400 malformed JSON or fields, 404 unknown path or table, 405 wrong
// method, 413 body over max_body_bytes or keys over max_request_keys.
//
// One thread per connection (keep-alive honoured); start()/stop() as the
// binary server. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "serving/service.hpp"

namespace strata::serving {

class http_server {
 public:
  http_server(serving_service& service, size_t max_body_bytes);
  ~http_server();
  status start(const std::string& bind_address, uint16_t port);
  uint16_t port() const;
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serving
