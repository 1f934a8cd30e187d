#include "deploy/admin_api.hpp"

#include <algorithm>
#include <boost/beast/http/error.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actors/checkpoint.hpp"
#include "actors/error.hpp"
#include "actors/foreign_thread.hpp"

namespace strata::deploy {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;

using request = admin_request;
using response = admin_response;

response reply(const request& req, http::status status, const json& body) {
  response res{status, req.version()};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  // Replace, not throw: messages quote the request's target, which may be
  // any bytes (an exception here would end the node process).
  res.body() = body.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  res.prepare_payload();
  return res;
}

response error_reply(const request& req, http::status status, const std::string& message) {
  return reply(req, status, json{{"error", message}});
}

// The text of a caf::error: its string context if it has one.
std::string message_of(caf::actor_system& system, const caf::error& err) {
  return actors::describe(system, err);
}

// A request value quoted in an error: scalars as JSON, containers by their
// size only (dumping is recursive: a body nested 30000 deep overflowed the
// connection thread's stack).
std::string quoted(const json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size());
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " fields";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The node of shard/cache `index` in a placement list (missing: the first node).
// The manifest's placement with the coordinator's node (the first) for the
// indices a drain relocated there.
std::vector<std::string> homes_now(std::vector<std::string> placement,
                                   const std::vector<uint32_t>& relocated,
                                   const std::vector<admin_node>& nodes) {
  for (uint32_t i : relocated)
    if (i < placement.size() && !nodes.empty()) placement[i] = nodes.front().name;
  return placement;
}

std::string node_of(const std::vector<std::string>& placement, size_t index,
                    const std::vector<admin_node>& nodes) {
  if (index < placement.size()) return placement[index];
  return nodes.empty() ? "" : nodes.front().name;
}

// The health of node `i` of the manifest: this node answers ("ok"); the
// others as the transport sees them: "ok" while connected and heard from
// within the heartbeat timeout, "down: <reason>", "not connected" before
// they joined ("standby (not joined)" for a standby node); "unknown"
// without a transport.
std::string node_health(const admin_config& config, size_t i,
                        const std::optional<transport::transport_stats>& transport) {
  if (i == 0) return "ok";
  if (config.left_nodes) {
    const auto left = config.left_nodes();
    if (std::find(left.begin(), left.end(), config.nodes[i].name) != left.end())
      return "left (drained)";
  }
  if (!transport) return "unknown";
  for (const auto& p : transport->peers) {
    if (p.name != config.nodes[i].name) continue;
    if (p.up) return "ok";
    return "down: " + (p.down_reason.empty() ? std::string("not connected") : p.down_reason);
  }
  return config.nodes[i].standby ? "standby (not joined)" : "not connected";
}

// The last checkpoint's epoch and age (its metadata file's time), when the
// directory is readable from this node.
json checkpoint_details(const std::string& dir) {
  json out = json::object();
  if (dir.empty()) return out;
  namespace fs = std::filesystem;
  auto meta = actors::read_checkpoint_meta(dir);
  if (!meta) return out;
  out["last_checkpoint_epoch"] = meta->epoch;
  std::error_code ec;
  const fs::path file = fs::path(dir) / actors::checkpoint_meta_name;
  const auto written = fs::last_write_time(fs::exists(file, ec) ? file : fs::path(dir), ec);
  if (!ec) {
    const auto age = fs::file_time_type::clock::now() - written;
    out["last_checkpoint_age_seconds"] =
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(age).count());
  }
  return out;
}

// Constant-time comparison: the token's length leaks, its content does not.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

admin_api::admin_api(admin_config config, caf::actor_system& system,
                     actors::coordinator_actor coordinator)
    : config_(std::move(config)), system_(system), coordinator_(std::move(coordinator)) {}

// Asks an actor and waits; errors come back as caf::error.
template <class Reply, class Handle, class... Ts>
std::pair<std::optional<Reply>, caf::error> admin_api::ask(const Handle& handle, Ts... xs) {
  actors::foreign_thread_scope foreign;  // an HTTP thread: let go of CAF's logger after
  caf::scoped_actor self{system_};
  std::optional<Reply> out;
  caf::error failure;
  self->request(handle, caf::duration{std::chrono::seconds(config_.request_timeout_seconds)}, xs...)
      .receive([&](Reply& r) { out = std::move(r); }, [&](caf::error& e) { failure = e; });
  return {std::move(out), failure};
}

response admin_api::status(const request& req) {
  auto [st, err] = ask<actors::cluster_status>(coordinator_, actors::map_atom::value);
  if (!st) return error_reply(req, http::status::service_unavailable, message_of(system_, err));
  json shards = json::array();
  std::vector<std::vector<uint32_t>> owned(st->routing.shards.size());
  const auto shard_homes =
      config_.current_shard_nodes ? config_.current_shard_nodes() : config_.shard_nodes;
  for (uint32_t p = 0; p < st->routing.owners.size(); ++p)
    owned[st->routing.owners[p]].push_back(p);
  uint64_t dram = 0, write_behind = 0, lmdb = 0, cached = 0;
  for (size_t i = 0; i < st->routing.shards.size(); ++i) {
    auto [stats, serr] = ask<actors::tier_stats>(
        caf::actor_cast<actors::shard_actor>(st->routing.shards[i]), actors::stats_atom::value);
    json shard{{"index", i},
               {"node", node_of(shard_homes, i, config_.nodes)},
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
      shard["health"] = "unreachable: " + message_of(system_, serr);
    }
    shards.push_back(std::move(shard));
  }
  json caches = json::array();
  const auto cache_homes = homes_now(config_.cache_nodes, st->relocated_caches, config_.nodes);
  for (size_t i = 0; i < st->caches.size(); ++i) {
    auto [stats, cerr] = ask<actors::tier_stats>(
        caf::actor_cast<actors::cache_tier_actor>(st->caches[i]), actors::stats_atom::value);
    json cache{{"index", i}, {"node", node_of(cache_homes, i, config_.nodes)}};
    if (stats) {
      cache["rows"] = stats->rows;
      cache["health"] = "ok";
      cached += stats->rows;
    } else {
      cache["health"] = "unreachable: " + message_of(system_, cerr);
    }
    caches.push_back(std::move(cache));
  }
  std::optional<transport::transport_stats> transport;
  if (config_.transport) transport = config_.transport();
  json nodes = json::array();
  for (size_t i = 0; i < config_.nodes.size(); ++i)
    nodes.push_back({{"name", config_.nodes[i].name},
                     {"host", config_.nodes[i].host},
                     {"health", node_health(config_, i, transport)}});
  json training{{"batches", st->batches},
                {"examples", st->examples},
                {"recent_loss", st->recent_loss},
                {"passes", st->passes},
                {"workers", st->workers},
                {"checkpoints", st->checkpoints},
                {"last_checkpoint", st->last_checkpoint}};
  const double rate = config_.examples_per_second ? config_.examples_per_second() : 0.0;
  training["examples_per_second"] = rate > 0 ? json(rate) : json(nullptr);
  training["planned_examples"] =
      config_.planned_examples ? json(config_.planned_examples) : json(nullptr);
  training["epochs"] = config_.epochs ? json(config_.epochs) : json(nullptr);
  training["restored_examples"] = config_.restored_examples;
  training.update(checkpoint_details(st->last_checkpoint));
  json body{
      {"cluster", config_.cluster},
      {"state", st->state},
      {"nodes", nodes},
      {"partition_map",
       {{"epoch", st->routing.epoch},
        {"partitions", st->routing.owners.size()},
        {"shards", st->routing.shards.size()}}},
      {"scaling_to", st->scaling_to == 0 ? json(nullptr) : json(st->scaling_to)},
      {"shards", shards},
      {"caches", caches},
      {"rows", {{"cache", cached}, {"dram", dram}, {"write_behind", write_behind}, {"lmdb", lmdb}}},
      {"training", training}};
  return reply(req, http::status::ok, body);
}

response admin_api::scale(const request& req) {
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
                           (body.contains("shards") ? quoted(body["shards"]) : "nothing"));
  const auto target = static_cast<uint32_t>(body["shards"].get<uint64_t>());
  std::vector<std::string> names;  // the node of every shard index; empty: spread
  if (body.contains("placement")) {
    const json& placement = body["placement"];
    if (placement.is_string()) {
      if (placement.get<std::string>() != "spread")
        return error_reply(
            req, http::status::bad_request,
            "placement: expected \"spread\" or a list of node names, got " + quoted(placement));
    } else if (placement.is_array()) {
      if (placement.size() != target)
        return error_reply(req, http::status::bad_request,
                           "placement: " + std::to_string(placement.size()) + " node names for " +
                               std::to_string(target) + " shards");
      // Every name first: an unknown one is the error, whatever comes before it.
      for (const auto& name : placement) {
        const bool known =
            name.is_string() &&
            std::any_of(config_.nodes.begin(), config_.nodes.end(),
                        [&](const admin_node& n) { return n.name == name.get<std::string>(); });
        if (!known) {
          std::string names;
          for (const auto& n : config_.nodes) names += (names.empty() ? "" : ", ") + n.name;
          return error_reply(req, http::status::bad_request,
                             "placement: unknown node " + quoted(name) + " (nodes: " + names + ")");
        }
      }
      for (const auto& name : placement) names.push_back(name.get<std::string>());
      // New shards go only to nodes that are connected: one that is not is
      // named with its transport health (the node's spawner checks too).
      if (config_.transport) {
        auto [st, serr] = ask<actors::cluster_status>(coordinator_, actors::map_atom::value);
        const std::optional<transport::transport_stats> seen = config_.transport();
        for (size_t i = st ? st->routing.shards.size() : 0; i < names.size(); ++i) {
          const auto at = std::find_if(config_.nodes.begin(), config_.nodes.end(),
                                       [&](const admin_node& n) { return n.name == names[i]; });
          const auto health = node_health(config_, at - config_.nodes.begin(), seen);
          if (health != "ok")
            return error_reply(req, http::status::conflict,
                               "placement: shard " + std::to_string(i) + " on node \"" + names[i] +
                                   "\": the node is " + health + "; new shards go to connected "
                                   "nodes");
        }
      }
    } else {
      return error_reply(
          req, http::status::bad_request,
          "placement: expected \"spread\" or a list of node names, got " + quoted(placement));
    }
  }
  auto [result, err] =
      ask<actors::scale_result>(coordinator_, actors::scale_atom::value, target, std::move(names));
  if (!result)
    return error_reply(req,
                       err == caf::sec::invalid_argument ? http::status::conflict
                                                         : http::status::internal_server_error,
                       message_of(system_, err));
  return reply(req, http::status::ok,
               {{"epoch", result->epoch},
                {"shards", result->shards},
                {"moved_partitions", result->moved_partitions},
                {"copied_rows", result->copied_rows},
                {"delta_rows", result->delta_rows},
                {"bytes", result->bytes}});
}

// A node's indices in a per-index placement ("1, 4"), or "".
std::string indices_on(const std::vector<std::string>& nodes, const std::string& node,
                       std::vector<uint32_t>* out = nullptr) {
  std::string text;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != node) continue;
    text += (text.empty() ? "" : ", ") + std::to_string(i);
    if (out) out->push_back(static_cast<uint32_t>(i));
  }
  return text;
}

response admin_api::drain(const request& req) {
  json body;
  try {
    body = json::parse(req.body());
  } catch (const json::parse_error& e) {
    return error_reply(req, http::status::bad_request,
                       std::string("body: malformed JSON: ") + e.what());
  }
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string())
    return error_reply(req, http::status::bad_request,
                       "body: expected a JSON object like {\"node\": \"n2\"}");
  for (const auto& [key, value] : body.items())
    if (key != "node")
      return error_reply(req, http::status::bad_request,
                         "body: unknown field '" + key + "' (expected node)");
  const std::string node = body["node"].get<std::string>();
  const auto at = std::find_if(config_.nodes.begin(), config_.nodes.end(),
                               [&](const admin_node& n) { return n.name == node; });
  if (at == config_.nodes.end()) {
    std::string names;
    for (const auto& n : config_.nodes) names += (names.empty() ? "" : ", ") + n.name;
    return error_reply(req, http::status::bad_request,
                       "node: unknown node " + quoted(body["node"]) + " (nodes: " + names + ")");
  }
  const std::string what = "cannot drain node \"" + node + "\": ";
  if (at == config_.nodes.begin())
    return error_reply(req, http::status::conflict,
                       what + "it runs the coordinator (and the admin API), which does not move");
  if (!config_.release_node)
    return error_reply(req, http::status::conflict,
                       what + "this cluster's nodes do not move shards at run time");
  if (config_.left_nodes) {
    const auto left = config_.left_nodes();
    if (std::find(left.begin(), left.end(), node) != left.end())
      return error_reply(req, http::status::conflict, what + "it has left already (drained)");
  }
  const auto seen_now = config_.transport ? std::optional(config_.transport()) : std::nullopt;
  if (const auto health = node_health(config_, at - config_.nodes.begin(), seen_now);
      health != "ok")
    return error_reply(req, http::status::conflict,
                       what + "it is " + health + "; only a connected node can be drained");
  // Its workers and cache tiers first: at the next cut the cache tiers
  // write back and every one gets a successor on the coordinator's node
  // (the workers resume their streams where they stopped).
  // (Where they are now: the coordinator knows which it relocated.)
  std::vector<uint32_t> worker_moves, cache_moves;
  {
    auto [st, err] = ask<actors::cluster_status>(coordinator_, actors::map_atom::value);
    if (!st)
      return error_reply(req, http::status::service_unavailable, what + message_of(system_, err));
    indices_on(homes_now(config_.worker_nodes, st->relocated_workers, config_.nodes), node,
               &worker_moves);
    indices_on(homes_now(config_.cache_nodes, st->relocated_caches, config_.nodes), node,
               &cache_moves);
  }
  if (!worker_moves.empty() || !cache_moves.empty()) {
    auto [moved, err] =
        ask<actors::ok_atom>(coordinator_, actors::relocate_atom::value, worker_moves, cache_moves);
    if (!moved)
      return error_reply(req,
                         err == caf::sec::invalid_argument ? http::status::conflict
                                                           : http::status::internal_server_error,
                         what + message_of(system_, err));
    // A worker whose data had ended stays (nothing to resume): say what moved.
    auto [after, serr] = ask<actors::cluster_status>(coordinator_, actors::map_atom::value);
    if (after) {
      const std::vector<uint32_t>& relocated = after->relocated_workers;
      std::erase_if(worker_moves, [&relocated](uint32_t w) {
        return !std::binary_search(relocated.begin(), relocated.end(), w);
      });
    }
  }
  const std::vector<std::string> homes =
      config_.current_shard_nodes ? config_.current_shard_nodes() : config_.shard_nodes;
  std::vector<uint32_t> indices;
  indices_on(homes, node, &indices);
  // Each shard goes to the connected node (not this one, not one that
  // left) with the fewest shards; the manifest's order breaks ties.
  const std::optional<transport::transport_stats> seen =
      config_.transport ? std::optional(config_.transport()) : std::nullopt;
  std::vector<std::pair<std::string, size_t>> takers;
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    const auto& n = config_.nodes[i];
    if (n.name == node || node_health(config_, i, seen) != "ok") continue;
    takers.emplace_back(n.name, std::count(homes.begin(), homes.end(), n.name));
  }
  if (!indices.empty() && takers.empty())
    return error_reply(req, http::status::conflict,
                       what + "no other connected node to take its shards " +
                           indices_on(homes, node));
  std::vector<std::string> destinations;
  for (size_t k = 0; k < indices.size(); ++k) {
    auto best = std::min_element(takers.begin(), takers.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    destinations.push_back(best->first);
    ++best->second;
  }
  actors::scale_result moved;
  if (!indices.empty()) {
    auto [result, err] =
        ask<actors::scale_result>(coordinator_, actors::drain_atom::value, indices, destinations);
    if (!result)
      return error_reply(req,
                         err == caf::sec::invalid_argument ? http::status::conflict
                                                           : http::status::internal_server_error,
                         what + message_of(system_, err));
    moved = *result;
  }
  if (auto released = config_.release_node(node); !released)
    return error_reply(req, http::status::internal_server_error,
                       "node \"" + node + "\": its shards moved, but " +
                           released.err().message());
  json shards = json::array();
  for (size_t k = 0; k < indices.size(); ++k)
    shards.push_back({{"shard", indices[k]}, {"node", destinations[k]}});
  json workers = json::array(), caches = json::array();
  for (uint32_t w : worker_moves)
    workers.push_back({{"worker", w}, {"node", config_.nodes.front().name}});
  for (uint32_t c : cache_moves)
    caches.push_back({{"cache", c}, {"node", config_.nodes.front().name}});
  return reply(req, http::status::ok,
               {{"node", node},
                {"left", true},
                {"shards", shards},
                {"workers", workers},
                {"caches", caches},
                {"epoch", moved.epoch},
                {"moved_partitions", moved.moved_partitions},
                {"copied_rows", moved.copied_rows},
                {"delta_rows", moved.delta_rows},
                {"bytes", moved.bytes}});
}

response admin_api::checkpoint(const request& req) {
  auto [dir, err] = ask<std::string>(coordinator_, actors::checkpoint_atom::value);
  if (!dir)
    return error_reply(req,
                       err == caf::sec::invalid_argument ? http::status::conflict
                                                         : http::status::internal_server_error,
                       message_of(system_, err));
  return reply(req, http::status::ok, {{"checkpoint", *dir}});
}

response admin_api::handle(const request& req) {
  const auto auth = req[http::field::authorization];
  const std::string expected = "Bearer " + config_.token;
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
    response (admin_api::*handler)(const request&);
  };
  static const route routes[] = {{"/status", http::verb::get, &admin_api::status},
                                 {"/scale", http::verb::post, &admin_api::scale},
                                 {"/drain", http::verb::post, &admin_api::drain},
                                 {"/checkpoint", http::verb::post, &admin_api::checkpoint},
                                 {"/stop", http::verb::post, nullptr}};
  for (const auto& r : routes) {
    if (target != r.path) continue;
    if (req.method() != r.verb)
      return error_reply(req, http::status::method_not_allowed,
                         target + " takes " + std::string(http::to_string(r.verb)));
    if (!r.handler) {
      caf::anon_send(coordinator_, actors::stop_atom::value);
      return reply(req, http::status::accepted,
                   {{"stopping", true}, {"detail", "training stops gracefully at the next cut"}});
    }
    return (this->*r.handler)(req);
  }
  return error_reply(req, http::status::not_found,
                     "no " + target + " (try /status, /scale, /drain, /checkpoint, /stop)");
}

admin_response admin_api::malformed(boost::beast::error_code ec) {
  request bad;
  bad.version(11);
  return error_reply(bad, http::status::bad_request, "bad HTTP request: " + ec.message());
}

}  // namespace strata::deploy
