// The admin API's request handling (the routes are listed in
// deploy/admin_server.hpp), as an object that answers one parsed HTTP
// request: admin_server's connection threads parse a request off the
// socket and hand it here; the fuzzer (tests/fuzz/admin_http_fuzz.cpp)
// parses raw bytes and calls the same handle(). It checks the bearer
// token, routes, validates the body and asks the coordinator actor
// (blocking, with the configured deadline).
//
// Thread-safety: handle() may run on several threads at once (it only
// reads the configuration and sends actor messages).
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <caf/all.hpp>
#include <cstddef>
#include <optional>
#include <utility>

#include "actors/training_protocol.hpp"
#include "deploy/admin_server.hpp"

namespace strata::deploy {

using admin_request = boost::beast::http::request<boost::beast::http::string_body>;
using admin_response = boost::beast::http::response<boost::beast::http::string_body>;

// Request bodies above this are refused by the parser.
inline constexpr size_t admin_max_body_bytes = 64 * 1024;

class admin_api {
 public:
  admin_api(admin_config config, caf::actor_system& system, actors::coordinator_actor coordinator);

  const admin_config& config() const { return config_; }

  // The answer to one request (401 without the token, 404/405 off the routes).
  admin_response handle(const admin_request& req);
  // The answer to a request the parser refused (`ec`).
  static admin_response malformed(boost::beast::error_code ec);

 private:
  template <class Reply, class Handle, class... Ts>
  std::pair<std::optional<Reply>, caf::error> ask(const Handle& handle, Ts... xs);
  admin_response status(const admin_request& req);
  admin_response scale(const admin_request& req);
  admin_response drain(const admin_request& req);
  admin_response checkpoint(const admin_request& req);

  admin_config config_;
  caf::actor_system& system_;
  actors::coordinator_actor coordinator_;
};

}  // namespace strata::deploy
