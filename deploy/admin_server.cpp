#include "deploy/admin_server.hpp"

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <caf/all.hpp>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace strata::deploy {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

using request = http::request<http::string_body>;
using response = http::response<http::string_body>;

response reply(const request& req, http::status status, const json& body) {
  response res{status, req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = body.dump(2) + "\n";
  res.prepare_payload();
  return res;
}

response error_reply(const request& req, http::status status, const std::string& message) {
  return reply(req, status, json{{"error", message}});
}

// The text of a caf::error: its string context if it has one.
std::string message_of(caf::actor_system& system, const caf::error& err) {
  const auto& context = err.context();
  if (context.match_elements<std::string>()) return context.get_as<std::string>(0);
  return system.render(err);
}

// Constant-time comparison: the token's length leaks, its content does not.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

struct admin_server::impl {
  admin_config config;
  caf::actor_system& system;
  actors::coordinator_actor coordinator;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::mutex mutex;  // guards connections
  std::vector<std::pair<std::shared_ptr<tcp::socket>, std::thread>> connections;
  bool stopping = false;

  impl(admin_config c, caf::actor_system& sys, actors::coordinator_actor coord)
      : config(std::move(c)), system(sys), coordinator(std::move(coord)) {}

  caf::duration timeout() const {
    return caf::duration{std::chrono::seconds(config.request_timeout_seconds)};
  }

  // Asks an actor and waits; errors come back as caf::error.
  template <class Reply, class Handle, class... Ts>
  std::pair<std::optional<Reply>, caf::error> ask(const Handle& handle, Ts... xs) {
    caf::scoped_actor self{system};
    std::optional<Reply> out;
    caf::error failure;
    self->request(handle, timeout(), xs...)
        .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { failure = e; });
    return {std::move(out), failure};
  }

  response status(const request& req) {
    auto [st, err] = ask<actors::cluster_status>(coordinator, actors::map_atom::value);
    if (!st) return error_reply(req, http::status::service_unavailable, message_of(system, err));
    json shards = json::array();
    std::vector<std::vector<uint32_t>> owned(st->routing.shards.size());
    for (uint32_t p = 0; p < st->routing.owners.size(); ++p)
      owned[st->routing.owners[p]].push_back(p);
    uint64_t dram = 0, write_behind = 0, lmdb = 0, cached = 0;
    for (size_t i = 0; i < st->routing.shards.size(); ++i) {
      auto [stats, serr] = ask<actors::tier_stats>(
          caf::actor_cast<actors::shard_actor>(st->routing.shards[i]), actors::stats_atom::value);
      json shard{{"index", i},
                 {"node", config.nodes.empty() ? "" : config.nodes.front().name},
                 {"partitions", owned[i]},
                 {"partition_count", owned[i].size()}};
      if (stats) {
        shard["rows"] = {{"dram", stats->rows},
                         {"write_behind", stats->write_behind_rows},
                         {"lmdb", stats->lmdb_rows}};
        shard["health"] = "ok";
        dram += stats->rows;
        write_behind += stats->write_behind_rows;
        lmdb += stats->lmdb_rows;
      } else {
        shard["health"] = "unreachable: " + message_of(system, serr);
      }
      shards.push_back(std::move(shard));
    }
    json caches = json::array();
    for (size_t i = 0; i < st->caches.size(); ++i) {
      auto [stats, cerr] = ask<actors::tier_stats>(
          caf::actor_cast<actors::cache_tier_actor>(st->caches[i]), actors::stats_atom::value);
      json cache{{"index", i}};
      if (stats) {
        cache["rows"] = stats->rows;
        cache["health"] = "ok";
        cached += stats->rows;
      } else {
        cache["health"] = "unreachable: " + message_of(system, cerr);
      }
      caches.push_back(std::move(cache));
    }
    json nodes = json::array();
    for (size_t i = 0; i < config.nodes.size(); ++i)
      // This node answers; the others are reached once the transport lands.
      nodes.push_back({{"name", config.nodes[i].name},
                       {"host", config.nodes[i].host},
                       {"health", i == 0 ? "ok" : "unknown"}});
    json body{{"cluster", config.cluster},
              {"state", st->state},
              {"nodes", nodes},
              {"partition_map",
               {{"epoch", st->routing.epoch},
                {"partitions", st->routing.owners.size()},
                {"shards", st->routing.shards.size()}}},
              {"scaling_to", st->scaling_to == 0 ? json(nullptr) : json(st->scaling_to)},
              {"shards", shards},
              {"caches", caches},
              {"rows",
               {{"cache", cached}, {"dram", dram}, {"write_behind", write_behind}, {"lmdb", lmdb}}},
              {"training",
               {{"batches", st->batches},
                {"examples", st->examples},
                {"recent_loss", st->recent_loss},
                {"passes", st->passes},
                {"workers", st->workers},
                {"checkpoints", st->checkpoints},
                {"last_checkpoint", st->last_checkpoint}}}};
    return reply(req, http::status::ok, body);
  }

  response scale(const request& req) {
    json body;
    try {
      body = json::parse(req.body());
    } catch (const json::parse_error& e) {
      return error_reply(req, http::status::bad_request,
                         std::string("body: malformed JSON: ") + e.what());
    }
    if (!body.is_object())
      return error_reply(req, http::status::bad_request,
                         "body: expected a JSON object like {\"shards\": 4}");
    for (const auto& [key, value] : body.items())
      if (key != "shards" && key != "placement")
        return error_reply(req, http::status::bad_request,
                           "body: unknown field '" + key + "' (expected shards, placement)");
    if (!body.contains("shards") || !body["shards"].is_number_unsigned() ||
        body["shards"].get<uint64_t>() == 0 || body["shards"].get<uint64_t>() > (1u << 24))
      return error_reply(req, http::status::bad_request,
                         "shards: expected a positive integer, got " +
                             (body.contains("shards") ? body["shards"].dump() : "nothing"));
    const auto target = static_cast<uint32_t>(body["shards"].get<uint64_t>());
    if (body.contains("placement")) {
      const json& placement = body["placement"];
      if (placement.is_string()) {
        if (placement.get<std::string>() != "spread")
          return error_reply(
              req, http::status::bad_request,
              "placement: expected \"spread\" or a list of node names, got " + placement.dump());
      } else if (placement.is_array()) {
        if (placement.size() != target)
          return error_reply(req, http::status::bad_request,
                             "placement: " + std::to_string(placement.size()) + " node names for " +
                                 std::to_string(target) + " shards");
        for (const auto& name : placement) {
          const bool known =
              name.is_string() &&
              std::any_of(config.nodes.begin(), config.nodes.end(),
                          [&](const admin_node& n) { return n.name == name.get<std::string>(); });
          if (!known)
            return error_reply(req, http::status::bad_request,
                               "placement: unknown node " + name.dump());
          if (name.get<std::string>() != config.nodes.front().name)
            return error_reply(req, http::status::bad_request,
                               "placement: node " + name.dump() +
                                   " is not reachable from this node (multi-node placement "
                                   "needs the transport)");
        }
      } else {
        return error_reply(
            req, http::status::bad_request,
            "placement: expected \"spread\" or a list of node names, got " + placement.dump());
      }
    }
    auto [result, err] = ask<actors::scale_result>(coordinator, actors::scale_atom::value, target);
    if (!result)
      return error_reply(req,
                         err == caf::sec::invalid_argument ? http::status::conflict
                                                           : http::status::internal_server_error,
                         message_of(system, err));
    return reply(req, http::status::ok,
                 {{"epoch", result->epoch},
                  {"shards", result->shards},
                  {"moved_partitions", result->moved_partitions},
                  {"copied_rows", result->copied_rows},
                  {"delta_rows", result->delta_rows},
                  {"bytes", result->bytes}});
  }

  response checkpoint(const request& req) {
    auto [dir, err] = ask<std::string>(coordinator, actors::checkpoint_atom::value);
    if (!dir)
      return error_reply(req,
                         err == caf::sec::invalid_argument ? http::status::conflict
                                                           : http::status::internal_server_error,
                         message_of(system, err));
    return reply(req, http::status::ok, {{"checkpoint", *dir}});
  }

  response handle(const request& req) {
    const auto auth = req[http::field::authorization];
    const std::string expected = "Bearer " + config.token;
    if (!same_token(std::string(auth), expected)) {
      auto res = error_reply(req, http::status::unauthorized,
                             "missing or wrong admin token (send Authorization: Bearer <token>; "
                             "the CLI reads it with --token-file)");
      res.set(http::field::www_authenticate, "Bearer");
      return res;
    }
    const std::string target(req.target());
    struct route {
      const char* path;
      http::verb verb;
      response (impl::*handler)(const request&);
    };
    static const route routes[] = {{"/status", http::verb::get, &impl::status},
                                   {"/scale", http::verb::post, &impl::scale},
                                   {"/checkpoint", http::verb::post, &impl::checkpoint},
                                   {"/stop", http::verb::post, nullptr}};
    for (const auto& r : routes) {
      if (target != r.path) continue;
      if (req.method() != r.verb)
        return error_reply(req, http::status::method_not_allowed,
                           target + " takes " + std::string(http::to_string(r.verb)));
      if (!r.handler) {
        caf::anon_send(coordinator, actors::stop_atom::value);
        return reply(req, http::status::accepted,
                     {{"stopping", true}, {"detail", "training stops gracefully at the next cut"}});
      }
      return (this->*r.handler)(req);
    }
    return error_reply(req, http::status::not_found,
                       "no " + target + " (try /status, /scale, /checkpoint, /stop)");
  }

  void serve(std::shared_ptr<tcp::socket> socket) {
    boost::beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);
    boost::system::error_code ec;
    http::read(*socket, buffer, parser, ec);
    if (!ec) {
      auto res = handle(parser.get());
      http::write(*socket, res, ec);
    } else if (ec != http::error::end_of_stream) {
      request bad;
      bad.version(11);
      auto res = error_reply(bad, http::status::bad_request, "bad HTTP request: " + ec.message());
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
  return "http://" + impl_->config.bind_address + ":" + std::to_string(port());
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
