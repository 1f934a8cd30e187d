#include "bench/transport_bench.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <future>
#include <iostream>
#include <sstream>

#include "actors/shard_actor.hpp"
#include "common/child_process.hpp"
#include "transport/remote_actors.hpp"

namespace strata::bench {
namespace {

using namespace actors;
using namespace std::chrono_literals;
constexpr uint32_t batch_keys = 4096;
constexpr uint32_t dims[] = {64, 128};

table_config bench_table(uint32_t dim) {
  table_config t;
  t.name = "bench" + std::to_string(dim);
  t.layout = row_layout{dim, optimizer_kind::sgd, true};
  t.optimizer.kind = optimizer_kind::sgd;
  t.optimizer.learning_rate = 1.0f;
  t.initializer.kind = initializer_kind::zeros;
  return t;
}

void set_ucx_env(const std::string& mode) {
  ::setenv("UCX_NET_DEVICES", "lo", 1);
  if (mode == "tcp") {
    ::setenv("UCX_TLS", "tcp", 1);
  } else {
    ::unsetenv("UCX_TLS");
  }
}

std::vector<uint64_t> batch(uint32_t n) {
  std::vector<uint64_t> keys(n);
  for (uint32_t i = 0; i < n; ++i) keys[i] = 7919ull * i + 1;
  return keys;
}

struct measured {
  double seconds = 0;
  uint64_t requests = 0;
};

// `iterations` requests, `in_flight` outstanding, from a blocking actor.
template <class Reply, class Make>
measured drive(caf::actor_system& system, uint32_t iterations, uint32_t in_flight, Make make) {
  caf::scoped_actor self{system};
  using handle_t = decltype(make(self));
  std::deque<handle_t> waiting;
  std::string failure;
  const auto start = std::chrono::steady_clock::now();
  uint32_t issued = 0;
  while (issued < iterations && waiting.size() < in_flight) {
    waiting.push_back(make(self));
    ++issued;
  }
  while (!waiting.empty()) {
    waiting.front().receive([](Reply&) {}, [&](caf::error& e) { failure = system.render(e); });
    waiting.pop_front();
    if (!failure.empty()) throw std::runtime_error("transport bench: " + failure);
    if (issued < iterations) {
      waiting.push_back(make(self));
      ++issued;
    }
  }
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          iterations};
}

struct exchange_result {
  double pull_gbs = 0, push_gbs = 0, pull_rows_s = 0, push_rows_s = 0;
};

exchange_result run_exchange(caf::actor_system& system, const shard_actor& shard, uint32_t dim,
                             uint32_t iterations, uint32_t in_flight) {
  const auto keys = batch(batch_keys);
  const double record = static_cast<double>(bench_table(dim).layout.record_bytes());
  auto pull = [&](auto& self) {
    return self->request(shard, caf::infinite, pull_atom::value, keys);
  };
  auto push = [&](auto& self) {
    push_request r;
    r.keys = keys;
    r.grads.assign(size_t{batch_keys} * dim, -1.0f);
    return self->request(shard, caf::infinite, push_atom::value, std::move(r));
  };
  drive<pull_reply>(system, std::max(2u, iterations / 10), in_flight, pull);  // warm
  exchange_result r;
  auto p = drive<pull_reply>(system, iterations, in_flight, pull);
  r.pull_rows_s = p.requests * batch_keys / p.seconds;
  r.pull_gbs = r.pull_rows_s * record / 1e9;  // reply rows
  auto q = drive<push_reply>(system, iterations, in_flight, push);
  r.push_rows_s = q.requests * batch_keys / q.seconds;
  r.push_gbs = r.push_rows_s * (4.0 * dim + 8) / 1e9;  // gradients and keys sent
  return r;
}

// ucx_perftest ucp_am_bw at `bytes` on the connection type of `mode`
// (server and client as subprocesses); GB/s, or 0 if unavailable.
double ucx_perftest_gbs(const std::string& mode, size_t bytes, uint32_t iterations) {
  const std::string binary = "/usr/bin/ucx_perftest";
  if (::access(binary.c_str(), X_OK) != 0) return 0;
  // The same connection type as the bridge's: TCP, or shared memory
  // without CMA (node_bridge turns it off, docs/transport.md).
  std::vector<std::string> env{"UCX_NET_DEVICES=lo"};
  env.push_back(mode == "tcp" ? "UCX_TLS=tcp" : "UCX_TLS=^cma");
  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  const std::vector<std::string> common{
      "-t", "ucp_am_bw", "-s", std::to_string(bytes), "-n", std::to_string(iterations), "-p", port};
  child_process server(binary, common, env);
  std::optional<std::string> final_line;
  for (int attempt = 0; attempt < 20 && !final_line; ++attempt) {
    auto args = common;
    args.insert(args.begin(), "127.0.0.1");
    child_process client(binary, args, env);
    final_line = client.wait_line("Final:", 120s);
    client.wait_exit(10s);
    if (!final_line) std::this_thread::sleep_for(200ms);  // server not listening yet
  }
  if (!final_line) return 0;
  std::istringstream in(final_line->substr(6));
  double iters, p50, avg, overall, bw_avg, bw_overall;
  in >> iters >> p50 >> avg >> overall >> bw_avg >> bw_overall;
  return bw_overall * 1024 * 1024 / 1e9;  // ucx_perftest's MB is 2^20 bytes
}

// The transport alone: `iterations` one-way frames of `bytes` through the
// bridge, then one echo; per-peer FIFO means its reply comes back only
// after every frame was delivered. GB/s of frame payload.
double frames_gbs(transport::node_bridge& bridge, const std::string& peer, size_t bytes,
                  uint32_t iterations) {
  auto run_once = [&](uint32_t n) {
    const auto start = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < n; ++i) {
      auto s = bridge.send(peer, transport::frame_type::sink, 200, std::vector<std::byte>(bytes));
      if (!s) throw std::runtime_error("transport bench: " + s.err().to_string());
    }
    std::promise<expected<transport::inbound_frame>> done;
    auto s = bridge.request(
        peer, transport::frame_type::echo, 200, {},
        [&done](expected<transport::inbound_frame> r) { done.set_value(std::move(r)); });
    if (!s) throw std::runtime_error("transport bench: " + s.err().to_string());
    auto r = done.get_future().get();
    if (!r) throw std::runtime_error("transport bench: " + r.err().to_string());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run_once(std::max(2u, iterations / 10));  // warm
  return static_cast<double>(bytes) * iterations / run_once(iterations) / 1e9;
}

}  // namespace

int run_transport_bench_peer(const std::string& mode, const std::filesystem::path& work_dir) {
  set_ucx_env(mode);
  caf::actor_system_config cfg;
  add_message_types(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system system{cfg};
  transport::bridge_config bc;
  bc.node_name = "bench-peer";
  bc.exchange_worker_address = mode != "tcp";
  auto t = transport::node_transport::start(system, bc);
  if (!t) {
    std::cerr << "transport bench peer: " << t.err().to_string() << "\n";
    return 1;
  }
  std::cout << "UCX " << (*t)->bridge().port() << std::endl;
  (*t)->export_echo(200);
  std::vector<shard_actor> shards;
  for (uint32_t dim : dims) {
    shard_config c;
    c.index = dim;
    c.table = bench_table(dim);
    c.dram.capacity_bytes =
        dram_tier::budget_for_rows(c.table.layout, c.dram.policy, 4 * batch_keys);
    c.lmdb.directory = work_dir / ("transport-peer-" + mode + "-" + std::to_string(dim));
    c.lmdb.table = c.table.name;
    c.lmdb.partitions = 64;
    c.lmdb.map_bytes = size_t{1} << 30;
    auto shard = spawn_shard(system, c);
    if (!shard) {
      std::cerr << "transport bench peer: " << shard.err().to_string() << "\n";
      return 1;
    }
    (*t)->export_shard(dim, *shard);
    auto port = system.middleman().publish(*shard, 0, "127.0.0.1");
    if (!port) {
      std::cerr << "transport bench peer: CAF publish failed: " << system.render(port.error())
                << "\n";
      return 1;
    }
    std::cout << "CAF" << dim << " " << *port << std::endl;
    shards.push_back(*shard);
  }
  std::cout << "READY" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  (*t)->stop();
  for (auto& s : shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  return 0;
}

double transport_frame_rows_per_s(const std::string& self_binary,
                                  const std::filesystem::path& work_dir, size_t record_bytes,
                                  size_t rows_per_frame, uint32_t iterations) {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system system{cfg};
  child_process peer(self_binary,
                     {"bench", "transport", "--transport-peer", "tcp", "--dir", work_dir.string()});
  if (!peer.wait_line("READY", 120s))
    throw std::runtime_error("transport bench: the peer did not start:\n" + peer.output());
  uint16_t port = 0;
  for (const auto& l : peer.lines())
    if (l.rfind("UCX ", 0) == 0) port = static_cast<uint16_t>(std::stoul(l.substr(4)));
  if (port == 0) throw std::runtime_error("transport bench: the peer printed no UCX port");
  set_ucx_env("tcp");
  transport::bridge_config bc;
  bc.node_name = "bench-client";
  bc.exchange_worker_address = false;
  auto t = transport::node_transport::start(system, bc);
  if (!t) throw std::runtime_error(t.err().to_string());
  auto connected = (*t)->bridge().connect("127.0.0.1", port, 30s);
  if (!connected) throw std::runtime_error(connected.err().to_string());
  const double gbs = frames_gbs((*t)->bridge(), *connected, record_bytes * rows_per_frame,
                                iterations);
  (*t)->stop();
  peer.close_stdin();
  peer.wait_exit(60s);
  ::unsetenv("UCX_TLS");
  ::unsetenv("UCX_NET_DEVICES");
  return gbs * 1e9 / static_cast<double>(record_bytes);
}

void run_transport_bench(const transport_bench_options& options, bench_report& report) {
  const uint32_t iterations = options.small ? 20 : 300;
  const uint32_t caf_iterations = options.small ? 4 : 30;
  caf::actor_system_config cfg;
  add_message_types(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system system{cfg};
  bool caf_done = false;
  std::map<uint32_t, exchange_result> caf_results;
  for (const std::string mode : {"shm", "tcp"}) {
    child_process peer(options.self_binary, {"bench", "transport", "--transport-peer", mode,
                                             "--dir", options.work_dir.string()});
    if (!peer.wait_line("READY", 120s)) {
      throw std::runtime_error("transport bench: the peer did not start:\n" + peer.output());
    }
    auto value_of = [&](const std::string& key) {
      for (const auto& l : peer.lines()) {
        if (l.rfind(key + " ", 0) == 0)
          return static_cast<uint16_t>(std::stoul(l.substr(key.size() + 1)));
      }
      throw std::runtime_error("transport bench: the peer printed no " + key);
    };
    set_ucx_env(mode);
    transport::bridge_config bc;
    bc.node_name = "bench-client";
    bc.exchange_worker_address = mode != "tcp";
    auto t = transport::node_transport::start(system, bc);
    if (!t) throw std::runtime_error(t.err().to_string());
    auto connected = (*t)->bridge().connect("127.0.0.1", value_of("UCX"), 30s);
    if (!connected) throw std::runtime_error(connected.err().to_string());
    for (uint32_t dim : dims) {
      const auto shard = (*t)->remote_shard(*connected, dim);
      const auto ours = run_exchange(system, shard, dim, iterations, options.in_flight);
      const size_t reply_bytes = size_t{batch_keys} * bench_table(dim).layout.record_bytes();
      const double limit = ucx_perftest_gbs(mode, reply_bytes, iterations);
      if (!caf_done) {
        auto remote = system.middleman().remote_actor<shard_actor>(
            "127.0.0.1", value_of("CAF" + std::to_string(dim)));
        if (!remote) throw std::runtime_error("caf_io: " + system.render(remote.error()));
        caf_results[dim] = run_exchange(system, *remote, dim, caf_iterations, options.in_flight);
      }
      const auto& caf = caf_results[dim];
      const std::string tag = "_dim" + std::to_string(dim) + "_" + mode;
      const double frames = frames_gbs((*t)->bridge(), *connected, reply_bytes, iterations);
      report.add({"transport_frames" + tag, frames, "GB/s", "ucx_perftest", limit});
      report.add({"transport_pull" + tag, ours.pull_gbs, "GB/s", "ucx_perftest", limit});
      report.add({"transport_push" + tag, ours.push_gbs, "GB/s", "ucx_perftest", limit});
      report.add({"transport_pull" + tag, ours.pull_rows_s, "rows/s", "caf_io", caf.pull_rows_s});
      report.add({"transport_push" + tag, ours.push_rows_s, "rows/s", "caf_io", caf.push_rows_s});
      caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
    }
    caf_done = true;
    (*t)->stop();
    peer.close_stdin();
    peer.wait_exit(60s);
  }
}

}  // namespace strata::bench
