#include "deploy/admin_server.hpp"

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <thread>

#include "deploy/admin_api.hpp"
#include "deploy/placeholder_secret.hpp"

namespace strata::deploy {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

}  // namespace

struct admin_server::impl {
  admin_api api;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::mutex mutex;  // guards connections
  std::vector<std::pair<std::shared_ptr<tcp::socket>, std::thread>> connections;
  bool stopping = false;

  impl(admin_config c, caf::actor_system& sys, actors::coordinator_actor coord)
      : api(std::move(c), sys, std::move(coord)) {}

  void serve(std::shared_ptr<tcp::socket> socket) {
    boost::beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.body_limit(admin_max_body_bytes);
    boost::system::error_code ec;
    http::read(*socket, buffer, parser, ec);
    if (!ec) {
      auto res = api.handle(parser.get());
      http::write(*socket, res, ec);
    } else if (ec != http::error::end_of_stream) {
      auto res = admin_api::malformed(ec);
      http::write(*socket, res, ec);
    }
    socket->shutdown(tcp::socket::shutdown_send, ec);
  }

  void accept_loop() {
    for (;;) {
      auto socket = std::make_shared<tcp::socket>(io);
      boost::system::error_code ec;
      acceptor.accept(*socket, ec);
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) return;
      if (ec) continue;
      connections.emplace_back(socket, std::thread([this, socket] { serve(socket); }));
      // Reap finished connections now and then: join what is done.
      if (connections.size() > 64) {
        for (auto& [s, t] : connections) t.join();
        connections.clear();
      }
    }
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
  auto state = std::make_unique<impl>(config, system, std::move(coordinator));
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(config.bind_address, ec);
  if (ec)
    return error(errc::invalid_argument,
                 "admin API: bad bind address '" + config.bind_address + "': " + ec.message());
  const tcp::endpoint endpoint(address, config.port);
  state->acceptor.open(endpoint.protocol(), ec);
  if (!ec) state->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) state->acceptor.bind(endpoint, ec);
  if (!ec) state->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return error(errc::io_error, "admin API: cannot listen on " + config.bind_address + ":" +
                                     std::to_string(config.port) + ": " + ec.message());
  impl* raw = state.get();
  state->accept_thread = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<admin_server>(new admin_server(std::move(state)));
}

uint16_t admin_server::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string admin_server::url() const {
  return "http://" + impl_->api.config().bind_address + ":" + std::to_string(port());
}

void admin_server::stop() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
    // Wakes the blocking accept (Linux: shutdown on a listening socket).
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    for (auto& [socket, t] : impl_->connections) {
      boost::system::error_code ec;
      socket->shutdown(tcp::socket::shutdown_both, ec);
    }
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  for (auto& [socket, t] : impl_->connections)
    if (t.joinable()) t.join();
  impl_->connections.clear();
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
}

}  // namespace strata::deploy
