#include "bench/torch_gateway_bench.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/child_process.hpp"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uint64_t max_rows = 100000;
constexpr uint32_t batch = 1024;

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("bench e2e: no free loopback port for the gateway");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string slurp(const fs::path& p) {
  std::ostringstream s;
  s << std::ifstream(p).rdbuf();
  return s.str();
}

// The store: the baseline's table (rows of dim 8 + 1), all in DRAM.
std::string manifest(const fs::path& d, uint16_t port) {
  std::ostringstream m;
  m << "name: bench-torch-gateway\nmode: async\npartitions: 256\nthreads: 2\n"
    << "table:\n  name: ctr\n  seed: 7\n"
    << "  optimizer: {kind: adagrad, learning_rate: 0.01, l2: 0.0, initial_accumulator: 0.1}\n"
    << "  initializer: {kind: normal, stddev: 0.01}\n"
    << "model:\n  embedding_dim: 8\n"
    << "shards:\n  count: 2\n  dram_bytes: 256MiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 1GiB\n"
    << "caches:\n  count: 1\n  sets: 8\n"
    << "workers:\n  count: 0\n"
    << "gateway:\n  port: " << port << "\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n";
  return m.str();
}

double run_loop(const e2e_bench_options& o, const fs::path& data, uint64_t rows,
                const std::string& extra, const std::string& label) {
  const std::string cmd = "PYTHONPATH=" + quote(STRATA_PYTHON_MODULE_DIR) + " " +
                          quote(o.python) + " " + quote(o.torch_script.string()) + " --data " +
                          quote(data.string()) + " --rows " + std::to_string(rows) +
                          " --heldout-rows 0 --batch " + std::to_string(batch) +
                          " --threads 1 --dim 8 --hidden 64,32" + extra;
  std::cerr << "bench e2e: training " << label << ": " << cmd << "\n";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("bench e2e: cannot run " + o.python);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int rc = ::pclose(pipe);
  std::smatch m;
  static const std::regex eps("\"examples_per_s\": *([0-9.eE+-]+)");
  if (rc != 0 || !std::regex_search(out, m, eps))
    throw std::runtime_error("bench e2e: " + label + " failed (exit " + std::to_string(rc) +
                             "): " + out);
  std::cerr << "bench e2e: " << label << ": " << m[1] << " examples/s\n";
  return std::stod(m[1]);
}

}  // namespace

void run_torch_gateway_bench(const e2e_bench_options& o, const fs::path& data,
                             bench_report& report) {
  const fs::path module_dir = STRATA_PYTHON_MODULE_DIR;
  bool built = false;
  if (fs::is_directory(module_dir))
    for (const auto& e : fs::directory_iterator(module_dir))
      built |= e.path().filename().string().rfind("strata_client", 0) == 0;
  if (!built || !fs::exists(module_dir / "strata_torch.py")) {
    std::cerr << "bench e2e: e2e_torch_gateway_* skipped: no Python module in "
              << module_dir.string() << " (pybind11-dev; build the target strata_client_py)\n";
    return;
  }
  const fs::path dir = o.work_dir / "torch_gateway";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const uint16_t port = free_port();
  std::ofstream(dir / "store.yaml") << manifest(dir, port);
  // This very binary, even when a rebuild replaced its file since it started.
  child_process node("/proc/self/exe", {"node", "--manifest", (dir / "store.yaml").string()}, {},
                     child_output{dir / "node.log", {}});
  // Polls the node's log for its gateway (it starts in seconds).
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (slurp(dir / "node.log").find("gateway: serving") == std::string::npos) {
    if (!node.running() || std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("bench e2e: the gateway node did not start: " +
                               slurp(dir / "node.log"));
    std::this_thread::sleep_for(50ms);
  }
  const uint64_t rows = std::min<uint64_t>(o.train_rows, max_rows);
  const std::string gateway = " --strata 127.0.0.1:" + std::to_string(port) + " --table ctr";
  const double torch = run_loop(o, data, rows, "", "pytorch_cpu (batch 1024, 1 thread)");
  const double overlapped =
      run_loop(o, data, rows, gateway + " --max-staleness 2", "pytorch through strata_torch");
  const double sync = run_loop(o, data, rows, gateway + " --no-prefetch --max-staleness 0",
                               "pytorch through strata_torch, no prefetch, sync pushes");
  node.signal(SIGTERM);
  if (node.wait_exit(120s) != 0)
    std::cerr << "bench e2e: the gateway node did not stop cleanly: " << slurp(dir / "node.log")
              << "\n";
  report.add({"e2e_torch_gateway_examples_per_s", overlapped, "examples/s", "pytorch_cpu", torch});
  report.add({"e2e_torch_gateway_sync_examples_per_s", sync, "examples/s", "pytorch_cpu", torch});
}

}  // namespace strata::bench
