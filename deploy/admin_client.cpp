#include "deploy/admin_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/auth.hpp"
#include "deploy/placeholder_secret.hpp"

namespace strata::deploy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

expected<admin_reply> admin_request(const std::string& address, const std::string& method,
                                    const std::string& target, const std::string& token,
                                    const std::string& body) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return error(errc::invalid_argument,
                 "--admin: expected HOST:PORT (e.g. 127.0.0.1:7070), got '" + address + "'");
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    tcp::socket socket(io);
    asio::connect(socket, resolver.resolve(host, port));
    http::request<http::string_body> req{method == "POST" ? http::verb::post : http::verb::get,
                                         target, 11};
    req.set(http::field::host, host);
    req.set(http::field::user_agent, "strata-cli");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    if (method == "POST") {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    http::write(socket, req);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(socket, buffer, res);
    boost::system::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    return admin_reply{static_cast<unsigned>(res.result_int()), res.body()};
  } catch (const boost::system::system_error& e) {
    return error(errc::io_error, "admin API at " + address + ": " + e.code().message());
  }
}

expected<std::string> read_token_file(const std::string& path) {
  // The same rules as the node's admin.token_file: owner-only, no placeholder.
  auto token = auth::read_secret_text(path, "--token-file");
  if (!token) return token.err();
  if (looks_like_placeholder(*token))
    return error(errc::invalid_argument, placeholder_refusal("--token-file: " + path));
  return token;
}

}  // namespace strata::deploy
