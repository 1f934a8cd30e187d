// The HTTP/JSON endpoint of a serving node (Boost.Beast), for debugging
// and simple clients; in-cluster clients use the binary protocol.
//
//   GET  /health  -> 200 {"status":"ok","tables":{NAME:{"dim":..,"lookups":..,...}},
//                         "servers":{"binary"|"http":{"open":..,"timeouts":..,...}}}
//   POST /lookup  {"table":"ads","keys":[1,2,"18446744073709551615"]}
//                 -> 200 {"table":"ads","dim":D,"versions":[..],"rows":[[..],..]}
//   GET  /keys?table=ads&limit=10  (limit 1..1000, default 10)
//                 -> 200 {"table":"ads","keys":["1000",..]}: stored keys, as strings
// Keys are unsigned 64-bit integers, as JSON numbers or decimal strings
// (JavaScript loses precision above 2^53). Errors are JSON {"error": "..."}:
// 400 malformed JSON or fields, 404 unknown path or table, 405 wrong
// method, 413 body over max_body_bytes or keys over max_request_keys.
//
// 503 when the server's buffers are full (request bodies, parsed JSON and
// replies of all connections are charged to one byte budget before they
// are allocated); a lookup whose JSON reply would exceed max_reply_bytes
// is 413.
//
// One thread per connection (keep-alive honoured), bounded by `settings`
// (serving/connection_limits.hpp: a connection over the cap is answered
// 503 and closed; idle and request deadlines); start()/stop() as the
// binary server. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "serving/connection_limits.hpp"
#include "serving/service.hpp"

namespace strata::serving {

class http_server {
 public:
  http_server(serving_service& service, size_t max_body_bytes,
              connection_settings settings = {});
  ~http_server();
  status start(const std::string& bind_address, uint16_t port);
  uint16_t port() const;
  void stop();
  connection_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serving
