// Helpers for the monitoring tests, which run real processes (strata
// launch, prometheus, promtool) on loopback:
//   free_port      a loopback port free a moment ago, below the ephemeral range;
//   http_get       a plain HTTP/1.0 GET on loopback (no client library);
//   parse_exposition  Prometheus text format -> series -> value.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.hpp"

namespace strata::monitoring::testing {

// Processes: common/child_process.hpp, the one helper of the project's tests.
using strata::child_process;

uint16_t free_port();

// The body of GET http://127.0.0.1:port/path, or nullopt (connect failed,
// not 200).
std::optional<std::string> http_get(uint16_t port, const std::string& path);

// series text (name{labels} exactly as written) -> value; every series
// seen more than once is added to `duplicates`.
std::map<std::string, double> parse_exposition(const std::string& text,
                                               std::vector<std::string>* duplicates = nullptr);

// Runs a shell command; its exit status and combined output.
std::pair<int, std::string> run_command(const std::string& command);

bool on_path(const std::string& program);

// A temporary directory removed with its contents at scope exit.
class temp_dir {
 public:
  explicit temp_dir(const std::string& prefix);
  ~temp_dir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The manifest of a small real run: 2 shards, 2 caches, 2 workers on
// generated data in `dir`, metrics on `port`, node `node`.
std::string small_manifest(const std::filesystem::path& dir, uint16_t port, const std::string& node,
                           uint64_t rows, uint32_t linger_seconds, double heldout_fraction);

// The same run over several nodes (one process each, strata launch): node
// i is named `names[i]`, serves /metrics on metrics_ports[i] and listens
// for the transport on a free port; shards, caches and workers are spread.
std::string small_multi_node_manifest(const std::filesystem::path& dir,
                                      const std::vector<std::string>& names,
                                      const std::vector<uint16_t>& metrics_ports, uint64_t rows,
                                      uint32_t linger_seconds, double heldout_fraction);

}  // namespace strata::monitoring::testing
