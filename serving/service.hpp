// serving_service: the shared front of one serving node. It owns the
// serving_store of each served table, so the binary server's and the HTTP
// server's connection threads and the update subscriber can call it
// concurrently. Locking: the table map is read-mostly (a shared_mutex,
// taken exclusively only by add_table); each store locks itself
// (serving_store.hpp: lookups the cache answers run side by side, the rest
// holds the table exclusively), only for the store's work — a reply is
// checksummed and sent after it (the reply is the caller's own buffer).
// reply_bytes()/dim_of() (the dim is kept beside the store) and a
// finish_request() with nothing queued take no store lock.
// Asynchronous cache inserts queued by a lookup run on the calling thread
// after the reply was sent (finish_request()).
//
// Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "client/wire.hpp"
#include "serving/serving_store.hpp"

namespace strata::serving {

struct connection_stats;  // serving/connection_limits.hpp

struct service_limits {
  uint32_t max_request_keys = 1u << 20;
  // A lookup reply (versions and weights; the HTTP server's JSON is
  // bounded the same way) above this is refused before it is built.
  uint64_t max_reply_bytes = uint64_t{128} << 20;
};

// The binary size of a lookup reply of n rows of `dim` (versions + weights),
// or capacity_exceeded naming the sizes when it is over `cap`.
expected<uint64_t> checked_reply_bytes(const std::string& table, size_t n, uint32_t dim,
                                       uint64_t cap);

// What the binary server (serving/binary_server.hpp) answers requests
// with: a serving node's tables (serving_service), or a training cluster's
// shards (serving/training_gateway.hpp). Implementations are thread-safe.
class lookup_service {
 public:
  virtual ~lookup_service() = default;
  virtual status lookup(const std::string& table, std::span<const uint64_t> keys,
                        lookup_result& out) = 0;
  virtual status prefetch(const std::string& table, std::span<const uint64_t> keys) = 0;
  // The bytes of a lookup reply of `n` keys (checked before the lookup
  // runs, so the server bounds its memory before allocating): not_found
  // for an unknown table, capacity_exceeded over the endpoint's reply cap.
  // The default knows no dim: 8 bytes a key.
  virtual expected<uint64_t> reply_bytes(const std::string& table, size_t n);
  // Runs work deferred until the reply was sent.
  virtual void finish_request() {}
  // Rows streamed by a training cluster (serving nodes).
  virtual status apply_updates(const std::string& table, std::span<const uint64_t> keys,
                               std::span<const float> weights,
                               std::span<const uint64_t> versions);
  // Gradients, n x dim, for the keys' rows (training gateways, async mode).
  // `id` (0: none) makes a retry safe: a push of an id already applied is
  // not applied again (docs/serving.md, "Retrying a push").
  virtual status push(const std::string& table, uint32_t dim, std::span<const uint64_t> keys,
                      std::span<const float> grads, uint64_t id = 0);
  // The tables answered here, with their dims; and up to `limit` keys
  // stored in one (serving/metadata_requests.hpp). The defaults refuse.
  virtual expected<std::vector<wire::table_info>> tables();
  virtual expected<std::vector<uint64_t>> list_keys(const std::string& table, uint32_t limit);
};

class serving_service : public lookup_service {
 public:
  explicit serving_service(service_limits limits) : limits_(limits) {}
  void add_table(std::unique_ptr<serving_store> store);

  // Errors: not_found (unknown table), capacity_exceeded (too many keys).
  status lookup(const std::string& table, std::span<const uint64_t> keys,
                lookup_result& out) override;
  status prefetch(const std::string& table, std::span<const uint64_t> keys) override;
  expected<uint64_t> reply_bytes(const std::string& table, size_t n) override;
  // Runs queued asynchronous cache inserts (call after sending a reply).
  void finish_request() override;
  status apply_updates(const std::string& table, std::span<const uint64_t> keys,
                       std::span<const float> weights, std::span<const uint64_t> versions) override;
  expected<uint32_t> dim_of(const std::string& table);
  expected<std::vector<wire::table_info>> tables() override;
  // Errors: not_found (unknown table), invalid_argument (limit over wire::max_list_keys).
  expected<std::vector<uint64_t>> list_keys(const std::string& table, uint32_t limit) override;
  // Copies of the tables' stats.
  std::map<std::string, serving_stats> stats();
  const service_limits& limits() const { return limits_; }
  // The connection counters of the servers in front of this service, by
  // name ("binary", "http"; /health lists them); a server sets its own on
  // start and clears it (null) when it goes.
  void set_server_stats(const std::string& name, std::function<connection_stats()> stats);
  std::map<std::string, connection_stats> server_stats();

 private:
  struct table_entry {
    std::unique_ptr<serving_store> store;  // thread-safe
    uint32_t dim = 0;
  };
  // Callers hold tables_mutex_ (shared at least) while they use the entry.
  expected<table_entry*> find(const std::string& table);
  service_limits limits_;
  std::shared_mutex tables_mutex_;
  std::map<std::string, std::unique_ptr<table_entry>, std::less<>> tables_;
  std::mutex servers_mutex_;
  std::map<std::string, std::function<connection_stats()>> servers_;
};

}  // namespace strata::serving
