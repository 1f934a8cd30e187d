// A blocking HTTP/1.1 client for the admin API (deploy/admin_server.hpp),
// used by `strata status|scale|stop|checkpoint create --admin HOST:PORT`
// and by the tests. One request per connection. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace strata::deploy {

struct admin_reply {
  unsigned status = 0;  // HTTP status code
  std::string body;
};

// Sends `method` (GET or POST) `target` with `body` (JSON, POST only) and
// `Authorization: Bearer <token>` unless the token is empty. `address` is
// HOST:PORT. Errors (bad address, refused connection) name the address;
// an HTTP error status is a reply, not an error.
expected<admin_reply> admin_request(const std::string& address, const std::string& method,
                                    const std::string& target, const std::string& token,
                                    const std::string& body = "");

// Reads a token file (trimmed) with auth::read_secret_text: owner-only, at
// least 16 characters, not a placeholder; errors name the file.
expected<std::string> read_token_file(const std::string& path);

}  // namespace strata::deploy
