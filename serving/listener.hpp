// Opens a TCP listener for the serving servers and the update publisher:
// parse the address, open, reuse_address, bind, listen. Errors name `what`
// and the address ("serving binary port 127.0.0.1:80: Permission denied").
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace strata::serving {

inline status open_listener(boost::asio::ip::tcp::acceptor& acceptor,
                            const std::string& bind_address, uint16_t port,
                            const std::string& what) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(bind_address, ec);
  if (ec) return error(errc::invalid_argument, what + ": bad bind address '" + bind_address + "'");
  const asio::ip::tcp::endpoint at(address, port);
  acceptor.open(at.protocol(), ec);
  if (!ec) acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(at, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return error(errc::unavailable,
                 what + " " + bind_address + ":" + std::to_string(port) + ": " + ec.message());
  return {};
}

}  // namespace strata::serving
