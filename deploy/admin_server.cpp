#include "deploy/admin_server.hpp"

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "deploy/admin_api.hpp"
#include "deploy/placeholder_secret.hpp"

namespace strata::deploy {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// Over the connection cap: a short answer, then the registry closes it.
void refuse_busy(int fd) {
  static const char busy[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: 56\r\nConnection: close\r\n\r\n"
      "{\"error\": \"too many admin connections; try again later\"}";
  (void)::send(fd, busy, sizeof busy - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace

// Connections are the registry's (serving/connection_limits.hpp): a cap,
// idle and request deadlines enforced by its watchdog (one idle client
// used to block its thread forever, and the reaping joined it under the
// lock, so stop() deadlocked), accept back-off when out of descriptors.
struct admin_server::impl {
  admin_api api;
  serving::connection_registry connections;

  impl(admin_config c, caf::actor_system& sys, actors::coordinator_actor coord)
      : api(c, sys, std::move(coord)), connections("admin API", c.connections) {}

  // Requests on one connection until the client closes it, asks to, or a
  // deadline (the registry's watchdog shuts the socket) ends it.
  void serve(tcp::socket& socket, serving::connection_registry::handle& deadline) {
    boost::beast::flat_buffer buffer;
    boost::system::error_code ec;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(16 * 1024);
      parser.body_limit(admin_max_body_bytes);
      deadline.wait_for_request();
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::end_of_stream) break;
      if (ec) {
        // A request the parser refused gets a 400; a connection cut (by the
        // peer or the watchdog) gets nothing.
        if (ec != asio::error::connection_reset && ec != asio::error::broken_pipe &&
            ec != asio::error::eof && ec != http::error::partial_message) {
          auto res = admin_api::malformed(ec);
          http::write(socket, res, ec);
        }
        break;
      }
      deadline.in_request();
      const bool keep = parser.get().keep_alive();
      auto res = api.handle(parser.get());
      res.keep_alive(keep);
      http::write(socket, res, ec);
      if (ec || !keep) break;
    }
    socket.shutdown(tcp::socket::shutdown_send, ec);
  }
};

admin_server::admin_server(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}

admin_server::~admin_server() { stop(); }

expected<std::unique_ptr<admin_server>> admin_server::start(const admin_config& config,
                                                            caf::actor_system& system,
                                                            actors::coordinator_actor coordinator) {
  if (config.token.empty())
    return error(errc::invalid_argument,
                 "admin API: no token (manifest admin.token or token_file)");
  if (looks_like_placeholder(config.token))
    return error(errc::invalid_argument, placeholder_refusal("admin API: the token"));
  if (config.connections.request_timeout <= std::chrono::seconds(config.request_timeout_seconds))
    return error(errc::invalid_argument,
                 "admin API: connections.request_timeout (" +
                     std::to_string(config.connections.request_timeout.count()) +
                     " ms) must be longer than request_timeout_seconds (" +
                     std::to_string(config.request_timeout_seconds) + " s)");
  auto state = std::make_unique<impl>(config, system, std::move(coordinator));
  impl* raw = state.get();
  STRATA_TRY(state->connections.start(
      config.bind_address, config.port,
      [raw](tcp::socket& socket, const std::string&, serving::connection_registry::handle& h) {
        raw->serve(socket, h);
      },
      refuse_busy));
  return std::unique_ptr<admin_server>(new admin_server(std::move(state)));
}

uint16_t admin_server::port() const { return impl_->connections.port(); }

std::string admin_server::url() const {
  return "http://" + impl_->api.config().bind_address + ":" + std::to_string(port());
}

serving::connection_stats admin_server::connections() const { return impl_->connections.stats(); }

void admin_server::stop() {
  if (impl_) impl_->connections.stop();
}

}  // namespace strata::deploy
