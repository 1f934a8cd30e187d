// `strata status|scale|drain|stop` and `strata checkpoint create`: requests to
// the coordinator's admin API (deploy/admin_server.hpp). The API is found
// by --admin HOST:PORT and --token-file F, or by --manifest M (the first
// node's admin port and address, admin.token or admin.token_file); an
// explicit option wins over the manifest. `status` prints a short summary
// (deploy/status_summary.hpp), its JSON with --json; the other verbs print
// the reply's JSON. An HTTP error status prints the server's message on
// stderr and exits 1.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "deploy/admin_client.hpp"
#include "deploy/commands.hpp"
#include "deploy/manifest.hpp"
#include "deploy/status_summary.hpp"

namespace strata::cli {
namespace {

struct admin_options {
  std::string address;
  std::string token_file;
  std::string manifest;
};

void add_admin_options(CLI::App* cmd, admin_options& o) {
  cmd->add_option("--admin", o.address,
                  "the coordinator's admin API, HOST:PORT (default: from --manifest)");
  cmd->add_option("--token-file", o.token_file,
                  "file holding the admin token (default: the manifest's admin.token_file)");
  cmd->add_option("--manifest", o.manifest,
                  "the cluster's manifest: the admin API's address and token come from it");
}

// Where the admin API is and its token: the explicit options, else the
// manifest's first node (its admin_port, else admin.port) on the admin
// bind address (the node's host when it binds every interface).
struct admin_target {
  std::string address;
  std::string token;
};

expected<admin_target> resolve(const admin_options& o) {
  admin_target t{o.address, ""};
  std::optional<deploy::manifest> m;
  if (!o.manifest.empty() && (o.address.empty() || o.token_file.empty())) {
    auto loaded = deploy::load_manifest(o.manifest);
    if (!loaded) return loaded.err();
    m = std::move(*loaded);
  }
  if (t.address.empty()) {
    if (!m)
      return error(errc::invalid_argument,
                   "give --manifest M (the cluster's manifest) or --admin HOST:PORT");
    uint16_t port = m->admin.port;
    std::string host = m->admin.bind_address;
    if (!m->nodes.empty() && m->nodes.front().admin_port != 0) port = m->nodes.front().admin_port;
    if (host.empty() || host == "0.0.0.0" || host == "::")
      host = m->nodes.empty() ? "127.0.0.1" : m->nodes.front().host;
    if (port == 0)
      return error(errc::invalid_argument,
                   o.manifest + ": no admin API (set admin.port, or nodes[0].admin_port)");
    t.address = host + ":" + std::to_string(port);
  }
  if (!o.token_file.empty()) {
    auto read = deploy::read_token_file(o.token_file);
    if (!read) return read.err();
    t.token = *read;
  } else if (m && (!m->admin.token.empty() || !m->admin.token_file.empty())) {
    auto read = deploy::admin_token(*m);
    if (!read) return read.err();
    t.token = *read;
  }
  return t;
}

// Sends the request; the reply's body on success (an HTTP error status
// prints the server's message and fails).
std::optional<std::string> request(const char* verb, const admin_options& o,
                                   const std::string& method, const std::string& target,
                                   const std::string& body) {
  auto t = resolve(o);
  if (!t) {
    std::fprintf(stderr, "strata %s: %s\n", verb, t.err().message().c_str());
    return std::nullopt;
  }
  auto reply = deploy::admin_request(t->address, method, target, t->token, body);
  if (!reply) {
    std::fprintf(stderr, "strata %s: %s\n", verb, reply.err().message().c_str());
    return std::nullopt;
  }
  if (reply->status >= 400) {
    std::fprintf(stderr, "strata %s: HTTP %u: %s", verb, reply->status,
                 deploy::admin_error_text(reply->body).c_str());
    return std::nullopt;
  }
  return reply->body;
}

int send(const char* verb, const admin_options& o, const std::string& method,
         const std::string& target, const std::string& body) {
  auto reply = request(verb, o, method, target, body);
  if (!reply) return 1;
  std::fputs(reply->c_str(), stdout);
  return 0;
}

}  // namespace

void add_admin_commands(CLI::App& app, int& exit_code) {
  auto status_opts = std::make_shared<admin_options>();
  auto json_out = std::make_shared<bool>(false);
  auto* status = app.add_subcommand(
      "status", "a summary of the cluster: nodes and their health, shards with rows and "
                "partition counts, training progress, the last checkpoint");
  add_admin_options(status, *status_opts);
  status->add_flag("--json", *json_out,
                   "print the admin API's whole /status document (every partition of every shard)");
  status->callback([status_opts, json_out, &exit_code] {
    if (*json_out) {
      exit_code = send("status", *status_opts, "GET", "/status", "");
      return;
    }
    auto reply = request("status", *status_opts, "GET", "/status", "");
    if (!reply) {
      exit_code = 1;
      return;
    }
    auto summary = deploy::status_summary(*reply);
    if (!summary) {
      std::fprintf(stderr, "strata status: %s\n", summary.err().message().c_str());
      exit_code = 1;
      return;
    }
    std::fputs(summary->c_str(), stdout);
    exit_code = 0;
  });

  auto scale_opts = std::make_shared<admin_options>();
  auto shards = std::make_shared<uint32_t>(0);
  auto placement = std::make_shared<std::vector<std::string>>();
  auto* scale = app.add_subcommand(
      "scale", "move partitions to N shards while training goes on; returns once committed");
  add_admin_options(scale, *scale_opts);
  scale->add_option("--shards", *shards, "target shard count")->required();
  scale->add_option("--placement", *placement, "node name per shard (default: spread)");
  scale->callback([scale_opts, shards, placement, &exit_code] {
    std::string body = "{\"shards\": " + std::to_string(*shards);
    if (!placement->empty()) {
      body += ", \"placement\": [";
      for (size_t i = 0; i < placement->size(); ++i)
        body += (i ? ", \"" : "\"") + (*placement)[i] + "\"";
      body += "]";
    }
    body += "}";
    exit_code = send("scale", *scale_opts, "POST", "/scale", body);
  });

  auto drain_opts = std::make_shared<admin_options>();
  auto drain_node = std::make_shared<std::string>();
  auto* drain = app.add_subcommand(
      "drain",
      "move every shard off a node to the other connected nodes (its workers and "
      "cache tiers to the coordinator's node) while training goes on, then let the "
      "node leave (it exits 0); returns once it has left");
  add_admin_options(drain, *drain_opts);
  drain->add_option("--node", *drain_node, "the node to drain (a name in the manifest)")
      ->required();
  drain->callback([drain_opts, drain_node, &exit_code] {
    // The name goes as a JSON string: quotes and backslashes escaped.
    std::string name;
    for (char c : *drain_node) {
      if (c == '"' || c == '\\') name += '\\';
      name += c;
    }
    exit_code = send("drain", *drain_opts, "POST", "/drain", "{\"node\": \"" + name + "\"}");
  });

  auto stop_opts = std::make_shared<admin_options>();
  auto* stop = app.add_subcommand(
      "stop", "stop training gracefully at the next cut (final checkpoint if configured)");
  add_admin_options(stop, *stop_opts);
  stop->callback(
      [stop_opts, &exit_code] { exit_code = send("stop", *stop_opts, "POST", "/stop", "{}"); });
}

void add_checkpoint_create_command(CLI::App& checkpoint, int& exit_code) {
  auto opts = std::make_shared<admin_options>();
  auto* create = checkpoint.add_subcommand(
      "create", "take a checkpoint at the next cut through the admin API; prints its directory");
  add_admin_options(create, *opts);
  create->callback([opts, &exit_code] {
    exit_code = send("checkpoint create", *opts, "POST", "/checkpoint", "{}");
  });
}

}  // namespace strata::cli
