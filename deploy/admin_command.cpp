// `strata status|scale|stop --admin HOST:PORT [--token-file F]` and the
// `checkpoint create` verb: requests to the coordinator's admin API
// (deploy/admin_server.hpp). The reply's JSON goes to stdout; an HTTP error
// status prints the server's message on stderr and exits 1.
#include <cstdio>
#include <memory>
#include <string>

#include "deploy/admin_client.hpp"
#include "deploy/commands.hpp"

namespace strata::cli {
namespace {

struct admin_options {
  std::string address;
  std::string token_file;
};

void add_admin_options(CLI::App* cmd, admin_options& o) {
  cmd->add_option("--admin", o.address, "the coordinator's admin API, HOST:PORT")->required();
  cmd->add_option("--token-file", o.token_file,
                  "file holding the admin token (the manifest's admin.token)");
}

int send(const char* verb, const admin_options& o, const std::string& method,
         const std::string& target, const std::string& body) {
  std::string token;
  if (!o.token_file.empty()) {
    auto read = deploy::read_token_file(o.token_file);
    if (!read) {
      std::fprintf(stderr, "strata %s: %s\n", verb, read.err().message().c_str());
      return 1;
    }
    token = *read;
  }
  auto reply = deploy::admin_request(o.address, method, target, token, body);
  if (!reply) {
    std::fprintf(stderr, "strata %s: %s\n", verb, reply.err().message().c_str());
    return 1;
  }
  if (reply->status >= 400) {
    std::fprintf(stderr, "strata %s: HTTP %u: %s", verb, reply->status, reply->body.c_str());
    return 1;
  }
  std::fputs(reply->body.c_str(), stdout);
  return 0;
}

}  // namespace

void add_admin_commands(CLI::App& app, int& exit_code) {
  auto status_opts = std::make_shared<admin_options>();
  auto* status = app.add_subcommand(
      "status", "the cluster's nodes, shards and partitions, rows per tier, training progress");
  add_admin_options(status, *status_opts);
  status->callback([status_opts, &exit_code] {
    exit_code = send("status", *status_opts, "GET", "/status", "");
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
