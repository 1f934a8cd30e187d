#include "serving/http_api.hpp"

#include <boost/beast/http/error.hpp>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "serving/connection_limits.hpp"
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
                    {"warmed_rows", st.warmed_rows},
                    {"lmdb_read_handles", st.lmdb_read_handles},
                    {"lmdb_read_waits", st.lmdb_read_waits}};
  }
  json servers = json::object();
  for (const auto& [name, st] : service.server_stats())
    servers[name] = {{"open", st.open},
                     {"accepted", st.accepted},
                     {"refused_over_cap", st.refused_over_cap},
                     {"accept_errors", st.accept_errors},
                     {"accept_backoffs", st.accept_backoffs},
                     {"timeouts", st.timeouts},
                     {"buffered_bytes", st.buffered_bytes},
                     {"buffer_refusals", st.buffer_refusals}};
  return {{"status", "ok"}, {"tables", tables}, {"servers", servers}};
}

// A JSON reply's bytes per row at most: a version (20 digits), each weight
// (shortest round-trip float, at most 15 characters) and separators.
uint64_t json_row_bytes(uint32_t dim) { return 26 + uint64_t(dim) * 16; }

// The lookup answer written straight as text: the same JSON the json type
// would give, without a DOM of n x dim values (16 bytes each and more).
std::string lookup_body(const std::string& table, const lookup_result& rows, size_t n) {
  std::string out;
  out.reserve(64 + table.size() + n * json_row_bytes(rows.dim));
  out += "{\"dim\":" + std::to_string(rows.dim) + ",\"rows\":[";
  char num[64];
  for (size_t i = 0; i < n; ++i) {
    out += i ? ",[" : "[";
    for (uint32_t d = 0; d < rows.dim; ++d) {
      if (d) out += ',';
      const float w = rows.weights[i * rows.dim + d];
      if (!std::isfinite(w)) {
        out += "null";  // as nlohmann's dump writes NaN and infinities
        continue;
      }
      auto r = std::to_chars(num, num + sizeof num, w);
      out.append(num, r.ptr);
    }
    out += ']';
  }
  out += "],\"table\":" + json(table).dump(-1, ' ', false, json::error_handler_t::replace) +
         ",\"versions\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    out += std::to_string(rows.versions[i]);
  }
  out += "]}";
  return out;
}

// GET /keys?table=T[&limit=N]: up to N (1..1000, default 10) stored keys,
// as decimal strings (exact in any JSON reader; /lookup takes them back).
std::pair<http::status, json> list_keys(serving_service& service, const std::string& query) {
  std::string table;
  uint32_t limit = 10;
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string part = query.substr(start, end - start);
    start = end + 1;
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    const std::string name = part.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (name == "table") {
      table = value;
    } else if (name == "limit") {
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), limit);
      if (ec != std::errc() || ptr != value.data() + value.size() || limit == 0 ||
          limit > wire::max_list_keys)
        return {http::status::bad_request,
                {{"error", "query parameter 'limit' must be 1.." +
                               std::to_string(wire::max_list_keys) + ", not '" + value + "'"}}};
    } else {
      return {http::status::bad_request,
              {{"error", "unknown query parameter '" + name + "' (table, limit)"}}};
    }
  }
  if (table.empty())
    return {http::status::bad_request, {{"error", "query parameter 'table' is required"}}};
  auto keys = service.list_keys(table, limit);
  if (!keys) return {status_of(keys.err().code()), {{"error", keys.err().message()}}};
  json listed = json::array();
  for (uint64_t k : *keys) listed.push_back(std::to_string(k));
  return {http::status::ok, {{"table", table}, {"keys", std::move(listed)}}};
}

struct routed {
  routed(http::status s, json b) : status(s), body(std::move(b)) {}
  routed(http::status s, std::string t) : status(s), text(std::move(t)) {}
  http::status status;
  json body;
  std::optional<std::string> text;  // a body already written (lookups)
};

// Returns the response body and status for one request.
routed route(serving_service& service, const http_request& req, http_memory* memory) {
  const auto target = std::string(req.target());
  if (target == "/health") {
    if (req.method() != http::verb::get)
      return {http::status::method_not_allowed, {{"error", "/health takes GET"}}};
    return {http::status::ok, health(service)};
  }
  if (target == "/keys" || target.rfind("/keys?", 0) == 0) {
    if (req.method() != http::verb::get)
      return {http::status::method_not_allowed, {{"error", "/keys takes GET"}}};
    auto [status, body] = list_keys(service, target.size() > 6 ? target.substr(6) : "");
    return {status, std::move(body)};
  }
  // Parsing the body costs memory in proportion to it: charged first.
  if (memory && !memory->take(req.body().size() * http_json_bytes_per_body_byte))
    return {http::status::service_unavailable,
            {{"error", "the server's buffers are full (" +
                           std::to_string(memory->budget->used()) + " of " +
                           std::to_string(memory->budget->cap()) + " bytes); retry later"}}};
  if (target != "/lookup")
    return {http::status::not_found,
            {{"error", "no such path '" + target + "' (try /lookup, /keys, /health)"}}};
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
  const std::string table_name = table->get<std::string>();
  body = json();  // the parsed request is not needed any more
  // The reply is bounded before it is built: its JSON and the rows.
  auto dim = service.dim_of(table_name);
  if (!dim) return {status_of(dim.err().code()), {{"error", dim.err().message()}}};
  const uint64_t json_bytes = keys.size() * json_row_bytes(*dim) + 64;
  auto binary = service.reply_bytes(table_name, keys.size());
  if (!binary) return {status_of(binary.err().code()), {{"error", binary.err().message()}}};
  if (json_bytes > service.limits().max_reply_bytes)
    return {http::status::payload_too_large,
            {{"error", "lookup of " + std::to_string(keys.size()) + " keys of table '" +
                           table_name + "' (dim " + std::to_string(*dim) + ") needs up to " +
                           std::to_string(json_bytes) + " bytes of JSON, over max_reply_bytes " +
                           std::to_string(service.limits().max_reply_bytes) +
                           "; split the request (repeated keys count each time)"}}};
  if (memory && !memory->take(json_bytes + *binary))
    return {http::status::service_unavailable,
            {{"error", "the server's buffers are full (" +
                           std::to_string(memory->budget->used()) + " of " +
                           std::to_string(memory->budget->cap()) + " bytes); retry later"}}};
  lookup_result rows;
  auto ok = service.lookup(table_name, keys, rows);
  if (!ok) return {status_of(ok.err().code()), {{"error", ok.err().message()}}};
  return routed(http::status::ok, lookup_body(table_name, rows, keys.size()));
}

}  // namespace

void limit_request_parser(http_request_parser& parser, size_t max_body_bytes) {
  parser.body_limit(max_body_bytes);
  parser.header_limit(http_max_header_bytes);
}

http_response handle_http_request(serving_service& service, const http_request& req,
                                  http_memory* memory) {
  auto r = route(service, req, memory);
  if (!r.text) return make_response(r.status, r.body, req.version(), req.keep_alive());
  http_response res{r.status, req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = std::move(*r.text);
  res.prepare_payload();
  return res;
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
