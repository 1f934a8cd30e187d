#include "serving/http_api.hpp"

#include <boost/beast/http/error.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata::serving {

namespace http = boost::beast::http;
using json = nlohmann::json;

namespace {

http_response make_response(http::status status, const json& body, unsigned version,
                            bool keep_alive) {
  http_response res{status, version};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(keep_alive);
  // Replace, not throw: messages quote the request's target, which may be
  // any bytes (an exception here would end the server process).
  res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
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

json health(serving_service& service) {
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
std::pair<http::status, json> route(serving_service& service, const http_request& req) {
  const auto target = std::string(req.target());
  if (target == "/health") {
    if (req.method() != http::verb::get)
      return {http::status::method_not_allowed, {{"error", "/health takes GET"}}};
    return {http::status::ok, health(service)};
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
  return {
      http::status::ok,
      {{"table", table_name}, {"dim", rows.dim}, {"versions", rows.versions}, {"rows", out_rows}}};
}

}  // namespace

void limit_request_parser(http_request_parser& parser, size_t max_body_bytes) {
  parser.body_limit(max_body_bytes);
  parser.header_limit(http_max_header_bytes);
}

http_response handle_http_request(serving_service& service, const http_request& req) {
  auto [status, body] = route(service, req);
  return make_response(status, body, req.version(), req.keep_alive());
}

http_response http_parse_error_response(boost::beast::error_code ec, size_t max_body_bytes) {
  const bool too_big = ec == http::error::body_limit || ec == http::error::header_limit;
  return make_response(
      too_big ? http::status::payload_too_large : http::status::bad_request,
      {{"error", too_big ? "request exceeds max_http_body_bytes " + std::to_string(max_body_bytes)
                         : "malformed HTTP request: " + ec.message()}},
      11, false);
}

}  // namespace strata::serving
