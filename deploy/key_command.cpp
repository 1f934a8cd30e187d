// `strata key`, `strata keys`, `strata tables`: the keys a user can look
// up. Keys are XXH3 hashes of feature values (docs/model.md), so a user of
// a served checkpoint needs strata to compute one (`key`, the same
// function the reader keys the data with) or to list a few that are stored
// (`keys`, from a checkpoint offline or from a serving node), and the
// tables a server holds (`tables`).
#include <cstdio>
#include <memory>
#include <string>

#include "client/client.hpp"
#include "deploy/commands.hpp"
#include "model/features.hpp"
#include "serving/metadata_requests.hpp"

namespace strata::cli {

namespace {

// A client of one serving node (the binary port), or the error naming it.
expected<client::serving_client> connect_to(const std::string& server) {
  auto at = wire::parse_endpoint(server);
  if (!at) return at.err();
  return client::serving_client::connect({{*at}});
}

}  // namespace

void add_key_commands(CLI::App& app, int& exit_code) {
  struct key_args {
    std::string slot, value;
  };
  auto k = std::make_shared<key_args>();
  auto* key = app.add_subcommand(
      "key", "the key strata stores a feature value under (the XXH3 hash of docs/model.md)");
  key->add_option("--slot", k->slot,
                  "the value's column: I1..I13 (integer) or C1..C26 (categorical) of criteo_tsv "
                  "data, or a slot number (a categorical slot of any format)")
      ->required();
  key->add_option("--value", k->value, "the raw feature value, e.g. 68fd1e64")->required();
  key->callback([k, &exit_code] {
    auto got = model::feature_key(k->slot, k->value);
    if (!got) {
      std::fprintf(stderr, "strata key: %s\n", got.err().message().c_str());
      exit_code = 1;
      return;
    }
    std::printf("%llu\n", static_cast<unsigned long long>(*got));
  });

  struct keys_args {
    std::string table, checkpoint, server;
    uint32_t limit = 10;
  };
  auto a = std::make_shared<keys_args>();
  auto* keys = app.add_subcommand(
      "keys", "list a few keys stored in a table, one per line (from a checkpoint or a server)");
  keys->add_option("--table", a->table, "the table (manifest: table.name)")->required();
  keys->add_option("--limit", a->limit, "how many keys, 1.." + std::to_string(wire::max_list_keys))
      ->check(CLI::Range(uint32_t{1}, wire::max_list_keys))
      ->capture_default_str();
  auto* from_checkpoint = keys->add_option(
      "--checkpoint", a->checkpoint,
      "a checkpoint directory (ckpt-...) or a checkpoint root (its latest complete checkpoint)");
  auto* from_server =
      keys->add_option("--server", a->server, "a serving node's binary port, HOST:PORT");
  from_checkpoint->excludes(from_server);
  keys->callback([a, from_checkpoint, from_server, &exit_code] {
    auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "strata keys: %s\n", what.c_str());
      exit_code = 1;
    };
    if (from_checkpoint->count() + from_server->count() != 1)
      return fail("say where to list from: --checkpoint DIR or --server HOST:PORT");
    expected<std::vector<uint64_t>> got = std::vector<uint64_t>{};
    if (!a->checkpoint.empty()) {
      got = serving::checkpoint_keys(a->checkpoint, a->table, a->limit);
    } else {
      auto c = connect_to(a->server);
      if (!c) return fail(c.err().message());
      got = c->list_keys(a->table, a->limit);
    }
    if (!got) return fail(got.err().message());
    for (uint64_t key : *got) std::printf("%llu\n", static_cast<unsigned long long>(key));
  });

  auto server = std::make_shared<std::string>();
  auto* tables = app.add_subcommand("tables", "the tables a serving node serves: name and dim");
  tables->add_option("--server", *server, "a serving node's binary port, HOST:PORT")->required();
  tables->callback([server, &exit_code] {
    auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "strata tables: %s\n", what.c_str());
      exit_code = 1;
    };
    auto c = connect_to(*server);
    if (!c) return fail(c.err().message());
    auto got = c->tables();
    if (!got) return fail(got.err().message());
    for (const auto& t : *got) std::printf("%s dim %u\n", t.name.c_str(), t.dim);
  });
}

}  // namespace strata::cli
