// The HTTP/JSON API of a serving node as plain functions of one request:
// http_server's connection threads parse a request off the socket and
// answer it with these; the fuzzer (tests/fuzz/serving_http_fuzz.cpp)
// parses raw bytes and calls the same functions. The routes are listed in
// serving/http_server.hpp.
//
// Thread-safety: as serving_service (thread-safe).
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>

#include "client/frame_socket.hpp"
#include "serving/service.hpp"

namespace strata::serving {

using http_request = boost::beast::http::request<boost::beast::http::string_body>;
using http_response = boost::beast::http::response<boost::beast::http::string_body>;
using http_request_parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Request headers above this are refused (413) before any body is read.
inline constexpr size_t http_max_header_bytes = 16 * 1024;

// Sets the parser's header and body limits (body: max_body_bytes).
void limit_request_parser(http_request_parser& parser, size_t max_body_bytes);

// Memory one request holds, charged to a server's byte budget (null: no
// budget) before it is allocated; the caller gives `charged` back once the
// answer is sent.
struct http_memory {
  wire::byte_budget* budget = nullptr;
  uint64_t charged = 0;
  bool take(uint64_t n) {
    if (budget && !budget->try_take(n)) return false;
    charged += n;
    return true;
  }
  void give_back() {
    if (budget) budget->give(charged);
    charged = 0;
  }
};

// Bytes a parsed JSON body may hold per body byte (nlohmann's values are
// 16 bytes; "1," is 2).
inline constexpr uint64_t http_json_bytes_per_body_byte = 8;

// The answer to a parsed request; the caller runs service.finish_request()
// once it is sent. A lookup whose JSON reply (estimated from its keys and
// dim before it is built) is over the service's max_reply_bytes is 413;
// one whose memory does not fit `memory`'s budget is 503.
http_response handle_http_request(serving_service& service, const http_request& req,
                                  http_memory* memory = nullptr);

// The answer to a request the parser refused (`ec`): 413 over the limits,
// 400 otherwise; the connection closes after it.
http_response http_parse_error_response(boost::beast::error_code ec, size_t max_body_bytes);

}  // namespace strata::serving
