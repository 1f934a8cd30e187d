#include "serving/http_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <sys/socket.h>

#include "serving/connection_limits.hpp"
#include "serving/http_api.hpp"

namespace strata::serving {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

struct http_server::impl {
  serving_service& service;
  size_t max_body_bytes;
  connection_registry connections;

  impl(serving_service& s, size_t limit, connection_settings settings)
      : service(s), max_body_bytes(limit), connections("serving http port", settings) {}

  void serve(tcp::socket& socket, connection_registry::handle& deadline) {
    beast::flat_buffer buffer;
    for (;;) {
      http_request_parser parser;
      limit_request_parser(parser, max_body_bytes);
      beast::error_code ec;
      // The next request's first byte must come within idle_timeout, all
      // of it and the answer within request_timeout (the registry's
      // watchdog closes the socket otherwise: a slowloris client that
      // drips its header cannot hold it).
      deadline.wait_for_request();
      if (buffer.size() == 0) socket.wait(tcp::socket::wait_read, ec);
      deadline.in_request();
      if (!ec) http::read_header(socket, buffer, parser, ec);
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset || ec == asio::error::shut_down ||
          ec == asio::error::not_connected)
        break;
      http_memory memory{&connections.buffers()};
      if (!ec) {
        // The body is charged before it is read (its declared length, or
        // the limit when chunked; one over the limit fails below, 413).
        const uint64_t body =
            parser.is_done()
                ? 0  // no body (a GET)
                : std::min<uint64_t>(parser.content_length().value_or(max_body_bytes),
                                     max_body_bytes);
        if (!memory.take(body)) {
          http::response<http::string_body> res{http::status::service_unavailable, 11};
          res.set(http::field::content_type, "application/json");
          res.keep_alive(false);
          res.body() = "{\"error\":\"the server's buffers are full; retry later\"}";
          res.prepare_payload();
          http::write(socket, res, ec);
          break;
        }
        http::read(socket, buffer, parser, ec);
      }
      if (ec) {
        memory.give_back();
        if (ec == asio::error::eof || ec == asio::error::connection_reset ||
            ec == asio::error::shut_down || ec == asio::error::operation_aborted)
          break;
        auto res = http_parse_error_response(ec, max_body_bytes);
        http::write(socket, res, ec);
        break;
      }
      auto res = handle_http_request(service, parser.get(), &memory);
      parser.release();  // the request body is not needed any more
      http::write(socket, res, ec);
      const bool keep = res.keep_alive();
      res = {};
      memory.give_back();
      service.finish_request();
      if (ec || !keep) break;
    }
    beast::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }
};

// A connection over the cap hears why before it is closed (non-blocking:
// the accept loop never waits on a client).
static void refuse_busy(int fd) {
  static const char answer[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nContent-Length: 48\r\n\r\n"
      "{\"error\":\"too many connections; retry later\"}\n";
  (void)::send(fd, answer, sizeof answer - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

http_server::http_server(serving_service& service, size_t max_body_bytes,
                         connection_settings settings)
    : impl_(std::make_unique<impl>(service, max_body_bytes, settings)) {}
http_server::~http_server() { stop(); }

status http_server::start(const std::string& bind_address, uint16_t port) {
  impl_->service.set_server_stats("http", [i = impl_.get()] { return i->connections.stats(); });
  return impl_->connections.start(
      bind_address, port,
      [this](tcp::socket& s, const std::string&, connection_registry::handle& h) {
        impl_->serve(s, h);
      },
      refuse_busy);
}

uint16_t http_server::port() const { return impl_->connections.port(); }

void http_server::stop() {
  impl_->connections.stop();
  impl_->service.set_server_stats("http", nullptr);
}

connection_stats http_server::stats() const { return impl_->connections.stats(); }

}  // namespace strata::serving
