#include "serving/http_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <mutex>
#include <thread>

#include "serving/http_api.hpp"
#include "serving/listener.hpp"

namespace strata::serving {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

struct http_server::impl {
  serving_service& service;
  size_t max_body_bytes;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::thread accept_thread;
  std::mutex mutex;
  struct connection {
    int fd = -1;  // -1 once the connection ended
    std::thread thread;
    bool done = false;
  };

  // Joins and forgets ended connections (REQUIRES: mutex held).
  void reap_finished() {
    for (auto it = connections.begin(); it != connections.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();
      it = connections.erase(it);
    }
  }
  std::list<connection> connections;
  bool stopping = false;

  impl(serving_service& s, size_t limit) : service(s), max_body_bytes(limit) {}

  void serve(tcp::socket& socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http_request_parser parser;
      limit_request_parser(parser, max_body_bytes);
      beast::error_code ec;
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset)
        break;
      if (ec) {
        auto res = http_parse_error_response(ec, max_body_bytes);
        http::write(socket, res, ec);
        break;
      }
      auto res = handle_http_request(service, parser.get());
      http::write(socket, res, ec);
      service.finish_request();
      if (ec || !res.keep_alive()) break;
    }
    beast::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }

  void accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket peer(io);
      acceptor.accept(peer, ec);
      std::lock_guard lock(mutex);
      if (stopping) return;
      if (ec) continue;
      reap_finished();
      connections.push_back({peer.native_handle(), {}, false});
      auto* entry = &connections.back();  // std::list: stable
      entry->thread =
          std::thread([this, entry, s = std::make_shared<tcp::socket>(std::move(peer))]() mutable {
            serve(*s);
            // Forget the descriptor before closing it: stop() must never
            // shut down whatever reuses it.
            std::lock_guard lock(mutex);
            entry->fd = -1;
            entry->done = true;
            boost::system::error_code ec;
            s->close(ec);
          });
    }
  }
};

http_server::http_server(serving_service& service, size_t max_body_bytes)
    : impl_(std::make_unique<impl>(service, max_body_bytes)) {}
http_server::~http_server() { stop(); }

status http_server::start(const std::string& bind_address, uint16_t port) {
  STRATA_TRY(open_listener(impl_->acceptor, bind_address, port, "serving http port"));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
  return {};
}

uint16_t http_server::port() const { return impl_->port; }

void http_server::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
    for (auto& c : impl_->connections)
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
  }
  if (impl_->accept_thread.joinable()) {
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    impl_->accept_thread.join();
  }
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  for (auto& c : impl_->connections)
    if (c.thread.joinable()) c.thread.join();
}

}  // namespace strata::serving
