// serving_service: the shared front of one serving node. It owns the
// serving_store of each served table and serializes calls into it (one
// mutex: the stores are single-owner objects), so the binary server's and
// the HTTP server's connection threads and the update subscriber can call
// it concurrently. Asynchronous cache inserts queued by a lookup run on
// the calling thread after the reply was sent (finish_request()).
//
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "serving/serving_store.hpp"

namespace strata::serving {

struct service_limits {
  uint32_t max_request_keys = 1u << 20;
};

class serving_service {
 public:
  explicit serving_service(service_limits limits) : limits_(limits) {}
  void add_table(std::unique_ptr<serving_store> store);

  // Errors: not_found (unknown table), capacity_exceeded (too many keys).
  status lookup(const std::string& table, std::span<const uint64_t> keys, lookup_result& out);
  status prefetch(const std::string& table, std::span<const uint64_t> keys);
  // Runs queued asynchronous cache inserts (call after sending a reply).
  void finish_request();
  status apply_updates(const std::string& table, std::span<const uint64_t> keys,
                       std::span<const float> weights, std::span<const uint64_t> versions);
  expected<uint32_t> dim_of(const std::string& table);
  // Copies of the tables' stats.
  std::map<std::string, serving_stats> stats();
  const service_limits& limits() const { return limits_; }

 private:
  expected<serving_store*> find(const std::string& table);
  service_limits limits_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<serving_store>, std::less<>> tables_;
};

}  // namespace strata::serving
