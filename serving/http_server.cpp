#include "serving/http_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "serving/listener.hpp"

namespace strata::serving {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using json = nlohmann::json;

namespace {

struct http_error {
  http::status status;
  std::string message;
};

http::response<http::string_body> make_response(http::status status, const json& body,
                                                unsigned version, bool keep_alive) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(keep_alive);
  res.body() = body.dump();
  res.prepare_payload();
  return res;
}

// A key as a JSON unsigned number or a decimal string.
std::optional<uint64_t> key_of(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    try {
      size_t used = 0;
      const unsigned long long k = std::stoull(s, &used, 10);
      if (used != s.size()) return std::nullopt;
      return static_cast<uint64_t>(k);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

http::status status_of(errc code) {
  switch (code) {
    case errc::not_found:
      return http::status::not_found;
    case errc::capacity_exceeded:
      return http::status::payload_too_large;
    case errc::invalid_argument:
      return http::status::bad_request;
    default:
      return http::status::internal_server_error;
  }
}

}  // namespace

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

  json health() {
    json tables = json::object();
    for (const auto& [name, st] : service.stats()) {
      auto dim = service.dim_of(name);
      tables[name] = {{"dim", dim ? *dim : 0},
                      {"lookups", st.lookups},
                      {"keys", st.keys},
                      {"cache_hits", st.cache_hits},
                      {"dram_hits", st.dram_hits},
                      {"lmdb_hits", st.lmdb_hits},
                      {"defaults", st.defaults},
                      {"sync_inserts", st.sync_inserts},
                      {"async_inserts", st.async_inserts},
                      {"updates_applied", st.updates_applied},
                      {"updates_ignored", st.updates_ignored},
                      {"loaded_rows", st.loaded_rows},
                      {"warmed_rows", st.warmed_rows}};
    }
    return {{"status", "ok"}, {"tables", tables}};
  }

  // Returns the response body and status for one request.
  std::pair<http::status, json> route(const http::request<http::string_body>& req) {
    const auto target = std::string(req.target());
    if (target == "/health") {
      if (req.method() != http::verb::get)
        return {http::status::method_not_allowed, {{"error", "/health takes GET"}}};
      return {http::status::ok, health()};
    }
    if (target != "/lookup")
      return {http::status::not_found,
              {{"error", "no such path '" + target + "' (try /lookup, /health)"}}};
    if (req.method() != http::verb::post)
      return {http::status::method_not_allowed, {{"error", "/lookup takes POST"}}};
    json body = json::parse(req.body(), nullptr, false);
    if (body.is_discarded())
      return {http::status::bad_request, {{"error", "request body is not valid JSON"}}};
    if (!body.is_object())
      return {http::status::bad_request, {{"error", "request body must be a JSON object"}}};
    auto table = body.find("table");
    if (table == body.end() || !table->is_string())
      return {http::status::bad_request, {{"error", "field 'table' (a string) is required"}}};
    auto keys_field = body.find("keys");
    if (keys_field == body.end() || !keys_field->is_array())
      return {http::status::bad_request, {{"error", "field 'keys' (an array) is required"}}};
    if (keys_field->size() > service.limits().max_request_keys)
      return {http::status::payload_too_large,
              {{"error", std::to_string(keys_field->size()) + " keys exceed max_request_keys " +
                             std::to_string(service.limits().max_request_keys)}}};
    for (const auto& [name, v] : body.items())
      if (name != "table" && name != "keys")
        return {http::status::bad_request, {{"error", "unknown field '" + name + "'"}}};
    std::vector<uint64_t> keys;
    keys.reserve(keys_field->size());
    for (size_t i = 0; i < keys_field->size(); ++i) {
      auto k = key_of((*keys_field)[i]);
      if (!k)
        return {http::status::bad_request,
                {{"error", "keys[" + std::to_string(i) +
                               "] is not an unsigned 64-bit integer (number or decimal string)"}}};
      keys.push_back(*k);
    }
    lookup_result rows;
    const std::string table_name = table->get<std::string>();
    auto ok = service.lookup(table_name, keys, rows);
    if (!ok) return {status_of(ok.err().code()), {{"error", ok.err().message()}}};
    json out_rows = json::array();
    for (size_t i = 0; i < keys.size(); ++i)
      out_rows.push_back(std::vector<float>(rows.weights.begin() + i * rows.dim,
                                            rows.weights.begin() + (i + 1) * rows.dim));
    return {http::status::ok,
            {{"table", table_name},
             {"dim", rows.dim},
             {"versions", rows.versions},
             {"rows", out_rows}}};
  }

  void serve(tcp::socket& socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(max_body_bytes);
      parser.header_limit(16 * 1024);
      beast::error_code ec;
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset)
        break;
      if (ec) {
        const bool too_big = ec == http::error::body_limit || ec == http::error::header_limit;
        auto res = make_response(
            too_big ? http::status::payload_too_large : http::status::bad_request,
            {{"error", too_big
                           ? "request exceeds max_http_body_bytes " + std::to_string(max_body_bytes)
                           : "malformed HTTP request: " + ec.message()}},
            11, false);
        http::write(socket, res, ec);
        break;
      }
      const auto& req = parser.get();
      auto [status, body] = route(req);
      auto res = make_response(status, body, req.version(), req.keep_alive());
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
