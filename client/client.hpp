// The C++ client of strata: lookups and prefetches over the binary protocol
// (client/wire.hpp), with failover across serving replicas, and pushes of
// gradients to a training cluster's gateway (async mode).
//
//   auto c = strata::client::serving_client::connect({{"10.0.0.5", 7100}, {"10.0.0.6", 7100}});
//   auto rows = c->lookup("ads", keys);   // rows->weights: keys.size() x rows->dim
//   c->push("ads", keys, grads);          // grads: keys.size() x dim, to a gateway
//   auto t = c->tables();                 // [{name, dim}] of the served tables
//   auto k = c->list_keys("ads", 10);     // up to 10 stored keys of "ads"
//
// A request goes to the current replica; if the connection fails (refused,
// reset, timed out) the client moves to the next replica and retries the
// request there, up to one full round over the replicas. Lookups are
// idempotent, so a retry is safe; so are pushes, by their push id. Errors
// from the server (unknown table, a request over its limits) are returned,
// not retried.
//
// Not thread-safe: one serving_client per thread (connections are cheap).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "client/frame_socket.hpp"
#include "common/error.hpp"

namespace strata::client {

struct client_options {
  std::vector<wire::endpoint> replicas;
  std::chrono::milliseconds timeout{5000};  // per request, on one replica
  uint32_t push_retries = 2;                // re-sends of a push (same id) the gateway failed
};

// A lookup's answer: dim, then per key its version (0: the table's default
// vector) and its dim weights, in key order. The protocol's own reply type,
// so replies are read straight into it.
using rows = wire::rows_reply;

class serving_client {
 public:
  static expected<serving_client> connect(client_options options);
  // The replicas listed in a manifest's serving.replicas (or its own
  // serving.binary_port on 127.0.0.1). Errors name the manifest.
  static expected<serving_client> connect_manifest(const std::filesystem::path& manifest);

  expected<rows> lookup(const std::string& table, std::span<const uint64_t> keys);
  // The same into `out`, reusing its buffers (hot loops, the benchmark).
  status lookup_into(const std::string& table, std::span<const uint64_t> keys, rows& out);
  // Several lookups on one connection, pipelined: up to `depth` requests
  // (and at most 64 KiB of them past the first, so neither side can block
  // on a full socket while the other does) are written before their
  // replies are read; the server answers in order, so the client's and the
  // server's work overlap. `on_rows(i, rows)` gets batch i's rows, in
  // order (valid until it returns; an error from it stops the lookups). A
  // broken connection drops what was in flight; the batches not yet
  // answered go through lookup_into (which fails over to another replica).
  status lookup_pipelined(const std::string& table,
                          std::span<const std::vector<uint64_t>> batches,
                          const std::function<status(size_t, const rows&)>& on_rows,
                          size_t depth = 4);
  // Asks the serving node to bring keys into its cache; no rows back.
  status prefetch(const std::string& table, std::span<const uint64_t> keys);
  // Gradients for the keys' rows (keys.size() x dim, row-major; duplicate
  // keys are summed), applied by a training cluster's gateway (manifest:
  // gateway.port; async mode) with the table's optimizer. Returns once
  // every owning shard applied its part. Serving nodes refuse it.
  // Every push carries a push id (`id`, or a fresh random one for 0): the
  // cluster's shards apply an id once (docs/serving.md, "Retrying a
  // push"), so a lost connection or a push the gateway could apply only in
  // part (unavailable) is retried with the same id, up to `push_retries`
  // times; the error after that names the id, and a push(..., that id)
  // later is still safe within the shards' window.
  status push(const std::string& table, std::span<const uint64_t> keys,
              std::span<const float> grads, uint64_t id = 0);
  // The served tables' names and dims (serving nodes and gateways).
  expected<std::vector<wire::table_info>> tables();
  // Up to `limit` (1..wire::max_list_keys) keys stored in `table`, the
  // first in the server's storage order: keys to try a lookup with.
  // Serving nodes answer it; errors: not_found (unknown table),
  // invalid_argument (limit).
  expected<std::vector<uint64_t>> list_keys(const std::string& table, uint32_t limit);
  // The id of the last push (to retry it after an error).
  uint64_t last_push_id() const { return last_push_id_; }

  // The replica requests go to now ("host:port").
  std::string current_replica() const;
  uint64_t failovers() const { return failovers_; }

 private:
  explicit serving_client(client_options options) : options_(std::move(options)) {}
  // Sends a request and leaves the reply in reply_ (failing over on a broken connection).
  // With `rows`, a rows reply is read straight into it.
  status request(wire::frame_type type, std::span<const std::byte> payload,
                 bool idempotent = true, wire::rows_reply* rows = nullptr);
  client_options options_;
  size_t current_ = 0;
  wire::frame_socket socket_;
  bool connected_ = false;
  uint64_t next_request_ = 1;
  uint64_t failovers_ = 0;
  uint64_t last_push_id_ = 0;
  std::mt19937_64 push_ids_{std::random_device{}()};
  wire::frame reply_;
  std::vector<std::byte> payload_;
  rows pipelined_rows_;  // reused by lookup_pipelined
};

}  // namespace strata::client
