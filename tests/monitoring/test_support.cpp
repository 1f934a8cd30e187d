#include "tests/monitoring/test_support.hpp"

#include "tests/tiers/test_util.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace strata::monitoring::testing {

namespace fs = std::filesystem;

uint16_t free_port() { return strata::testing::free_port(); }

std::optional<std::string> http_get(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string response;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  const auto header_end = response.find("\r\n\r\n");
  const bool ok =
      response.compare(0, 12, "HTTP/1.1 200") == 0 || response.compare(0, 12, "HTTP/1.0 200") == 0;
  if (header_end == std::string::npos || !ok) return std::nullopt;
  return response.substr(header_end + 4);
}

std::map<std::string, double> parse_exposition(const std::string& text,
                                               std::vector<std::string>* duplicates) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // The value follows the last space outside the label braces.
    const auto close = line.rfind('}');
    const auto space = line.find(' ', close == std::string::npos ? 0 : close);
    if (space == std::string::npos) continue;
    const std::string series = line.substr(0, space);
    const std::string value = line.substr(space + 1);
    double v = 0;
    if (value == "+Inf")
      v = 1.0 / 0.0;
    else
      v = std::strtod(value.c_str(), nullptr);
    if (!out.emplace(series, v).second && duplicates) duplicates->push_back(series);
  }
  return out;
}

std::pair<int, std::string> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

bool on_path(const std::string& program) {
  return run_command("command -v " + program + " >/dev/null").first == 0;
}

temp_dir::temp_dir(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string small_manifest(const fs::path& dir, uint16_t port, const std::string& node,
                           uint64_t rows, uint32_t linger_seconds, double heldout_fraction) {
  std::ostringstream m;
  m << "name: monitoring-test\n"
       "threads: 2\n"
       "table:\n  name: ctr\n"
       "model:\n  embedding_dim: 4\n  hidden: [8]\n"
       "shards:\n  count: 2\n  dram_bytes: 256KiB\n  ssd_path: "
    << (dir / "state").string()
    << "\n  map_bytes: 64MiB\n  flush_batch_rows: 256\n"
       "caches:\n  count: 2\n  sets: 16\n  slabs_per_set: 1\n  staleness: 8\n"
       "workers:\n  count: 2\n  batch_size: 128\n  epochs: 1\n"
       "data:\n  format: criteo_tsv\n  path: "
    << (dir / "data.tsv").string() << "\n  heldout_fraction: " << heldout_fraction
    << "\n  generate:\n    rows: " << rows << "\n    distinct_keys: " << rows / 2
    << "\n    seed: 3\n"
       "metrics:\n  port: "
    << port << "\n  node: " << node << "\n  linger_seconds: " << linger_seconds << "\n";
  return m.str();
}

std::string small_multi_node_manifest(const fs::path& dir, const std::vector<std::string>& names,
                                      const std::vector<uint16_t>& metrics_ports, uint64_t rows,
                                      uint32_t linger_seconds, double heldout_fraction) {
  std::ostringstream m;
  m << "cluster_secret:\n  file: " << (dir / "cluster.secret").string()
    << "\n  create_if_missing: true\nnodes:\n";
  for (size_t i = 0; i < names.size(); ++i)
    m << "  - name: " << names[i] << "\n    host: 127.0.0.1\n    transport_port: " << free_port()
      << "\n    metrics_port: " << metrics_ports[i] << "\n    ssd_path: "
      << (dir / names[i]).string() << "\n";
  m << small_manifest(dir, metrics_ports.front(), names.front(), rows, linger_seconds,
                      heldout_fraction);
  return m.str();
}

}  // namespace strata::monitoring::testing
