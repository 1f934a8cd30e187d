#include "bench/serve_bench.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

// Before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it.
// clang-format off
#include <utility>
// clang-format on

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

#include "bench/serve_clients.hpp"
#include "client/client.hpp"
#include "client/ucx_client.hpp"
#include "serving/binary_server.hpp"
#include "serving/service.hpp"
#include "serving/transport_endpoint.hpp"
#include "tiers/cpu_cache.hpp"
#include "tiers/dram_tier.hpp"

namespace strata::bench {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using bench_clock = std::chrono::steady_clock;
constexpr uint32_t dim = 64;

// One system's samples over the rounds of a batch size.
struct samples {
  std::vector<double> latencies_us;  // every request of every round
  std::vector<double> round_rates;   // keys/s of each round
  void add_round(std::vector<double>& latencies, uint64_t keys, double seconds) {
    latencies_us.insert(latencies_us.end(), latencies.begin(), latencies.end());
    round_rates.push_back(double(keys) / seconds);
  }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
  double keys_per_s() const { return median(round_rates); }
  double percentile(double p) const {
    std::vector<double> v = latencies_us;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(double(v.size()) * p))];
  }
};

// Runs `one(keys)` on random batches for about `seconds` (one request in
// flight) and adds the round to `out`.
template <class F>
void measure(uint64_t rows, uint32_t batch, double seconds, samples& out, F&& one) {
  const auto batches = random_batches(rows, batch, 64, batch);
  std::vector<double> latencies;
  for (int w = 0; w < 3; ++w) one(batches[w % batches.size()]);  // warm connections and caches
  const auto start = bench_clock::now();
  uint64_t keys = 0;
  for (size_t i = 0;; ++i) {
    const auto t0 = bench_clock::now();
    one(batches[i % batches.size()]);
    const auto t1 = bench_clock::now();
    latencies.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    keys += batch;
    if (std::chrono::duration<double>(t1 - start).count() >= seconds && latencies.size() >= 10)
      break;
  }
  out.add_round(latencies, keys, std::chrono::duration<double>(bench_clock::now() - start).count());
}

// --- a minimal RESP client (blocking, one connection) --------------------------

class redis_connection {
 public:
  explicit redis_connection(uint16_t port) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    socket_.set_option(tcp::no_delay(true));
  }
  // Sends one command as a RESP array of bulk strings.
  void append_command(const std::vector<std::string_view>& args) {
    out_ += "*" + std::to_string(args.size()) + "\r\n";
    for (auto a : args) {
      out_ += "$" + std::to_string(a.size()) + "\r\n";
      out_.append(a.data(), a.size());
      out_ += "\r\n";
    }
  }
  void flush() {
    asio::write(socket_, asio::buffer(out_));
    out_.clear();
  }
  // One MGET of `keys` (named by their decimal form); `names` and `values`
  // are the caller's scratch. Throws unless every key got its value.
  void mget(const std::vector<uint64_t>& keys, std::vector<std::string>& names,
            std::string& values) {
    names.resize(keys.size());
    std::vector<std::string_view> args{"MGET"};
    for (size_t i = 0; i < keys.size(); ++i) {
      names[i] = std::to_string(keys[i]);
      args.push_back(names[i]);
    }
    append_command(args);
    flush();
    values.clear();
    size_t count = 0;
    read_reply(values, count);
    if (count != keys.size()) throw std::runtime_error("redis: MGET returned too few values");
  }
  // Reads one reply; bulk strings' bytes are appended to `values`.
  void read_reply(std::string& values, size_t& count) {
    const std::string line = read_line();
    if (line.empty()) throw std::runtime_error("redis: empty reply");
    switch (line[0]) {
      case '+':
      case ':':
        return;
      case '-':
        throw std::runtime_error("redis: " + line);
      case '$': {
        const long n = std::stol(line.substr(1));
        if (n < 0) return;
        need(size_t(n) + 2);
        values.append(buf_.data() + begin_, size_t(n));  // the one copy a client needs
        begin_ += size_t(n) + 2;
        ++count;
        return;
      }
      case '*': {
        const long n = std::stol(line.substr(1));
        for (long i = 0; i < n; ++i) read_reply(values, count);
        return;
      }
      default:
        throw std::runtime_error("redis: unexpected reply " + line);
    }
  }

 private:
  // Reads from the socket straight into the buffer (no staging copy).
  void fill() {
    if (begin_ == end_) begin_ = end_ = 0;
    if (buf_.size() - end_ < (1 << 16)) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);  // only the unread tail
      end_ -= begin_;
      begin_ = 0;
      if (buf_.size() - end_ < (1 << 16)) buf_.resize(buf_.size() * 2);
    }
    end_ += socket_.read_some(asio::buffer(buf_.data() + end_, buf_.size() - end_));
  }
  void need(size_t n) {
    while (end_ - begin_ < n) fill();
  }
  std::string read_line() {
    for (;;) {
      const char* b = buf_.data() + begin_;
      const void* cr = std::memchr(b, '\r', end_ - begin_);
      if (cr && static_cast<const char*>(cr) + 1 < buf_.data() + end_) {
        const size_t len = size_t(static_cast<const char*>(cr) - b);
        std::string line(b, len);
        begin_ += len + 2;
        return line;
      }
      fill();
    }
  }
  asio::io_context io_;
  tcp::socket socket_;
  std::string out_;
  std::vector<char> buf_ = std::vector<char>(size_t{1} << 20);
  size_t begin_ = 0, end_ = 0;
};

uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

struct redis_process {
  pid_t pid = -1;
  uint16_t port = 0;
  ~redis_process() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Starts redis-server; returns false (and says why) if it is not installed.
bool start_redis(redis_process& r, const std::filesystem::path& dir) {
  if (::access("/usr/bin/redis-server", X_OK) != 0) {
    std::cerr << "strata bench serve: redis-server not found (deploy/install-deps.sh --bench "
                 "installs it): Redis rows skipped\n";
    return false;
  }
  r.port = free_port();
  const std::string port = std::to_string(r.port);
  r.pid = ::fork();
  if (r.pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    ::execl("/usr/bin/redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    try {
      redis_connection probe(r.port);
      return true;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  throw std::runtime_error("redis-server on port " + port + " did not start");
}

// The wire's limit on loopback: a bare loop on its own thread writes
// `count` replies of `reply_bytes` (the bytes a lookup reply of the same
// batch puts on the socket) back to back; the client reads them into one
// buffer. No framing, checksum, lookup or allocation: what one TCP
// connection carries on this machine.
class loopback_stream {
 public:
  explicit loopback_stream(size_t reply_bytes)
      : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}), client_(io_), reply_(reply_bytes, std::byte{1}), in_(reply_bytes) {
    client_.connect(acceptor_.local_endpoint());
    client_.set_option(tcp::no_delay(true));
    server_ = std::make_unique<tcp::socket>(acceptor_.accept());
    server_->set_option(tcp::no_delay(true));
    thread_ = std::thread([this] {
      uint64_t count = 0;
      boost::system::error_code ec;
      for (;;) {
        asio::read(*server_, asio::buffer(&count, sizeof count), ec);
        if (ec || count == 0) return;
        for (uint64_t i = 0; i < count && !ec; ++i) asio::write(*server_, asio::buffer(reply_), ec);
        if (ec) return;
      }
    });
  }
  ~loopback_stream() {
    const uint64_t stop = 0;
    boost::system::error_code ec;
    asio::write(client_, asio::buffer(&stop, sizeof stop), ec);
    thread_.join();
  }
  // Streams `count` replies; returns the seconds they took to arrive.
  double stream(uint64_t count) {
    const auto t0 = bench_clock::now();
    asio::write(client_, asio::buffer(&count, sizeof count));
    for (uint64_t i = 0; i < count; ++i) asio::read(client_, asio::buffer(in_));
    return std::chrono::duration<double>(bench_clock::now() - t0).count();
  }

 private:
  asio::io_context io_;
  tcp::acceptor acceptor_;
  tcp::socket client_;
  std::unique_ptr<tcp::socket> server_;
  std::vector<std::byte> reply_, in_;
  std::thread thread_;
};

}  // namespace

void run_serve_bench(const serve_bench_options& o, bench_report& report) {
  const uint64_t rows = o.small ? 20000 : o.keys;
  const double seconds = o.small ? 0.1 : o.seconds_per_case;
  std::vector<uint32_t> batch_sizes = o.batches;
  if (o.small) batch_sizes = {1, 32, 1024};
  const auto [keys, weights] = make_serve_rows(rows, dim);
  const std::vector<uint64_t> versions(rows, make_version(1, 1));

  // The serving node: rows written through the update path, cache sized to
  // hold them all (the steady state of a warm serving node).
  serving::serving_store_config sc;
  sc.table = "bench";
  sc.dim = dim;
  sc.partitions = 4096;
  sc.lmdb_path = o.work_dir / "serve-lmdb";
  sc.dram_bytes = size_t{256} << 20;
  const row_layout layout{dim, optimizer_kind::sgd, false};
  const uint32_t sets = uint32_t(std::max<uint64_t>(64, rows * 2 / 32));
  auto store = serving::serving_store::open(
      sc, std::make_unique<cpu_cache>(layout, cache_geometry{sets, 1}));
  if (!store) throw std::runtime_error(store.err().to_string());
  if (auto ok = (*store)->apply_updates(keys, weights, versions); !ok)
    throw std::runtime_error(ok.err().to_string());
  if (auto ok = (*store)->prefetch(keys); !ok) throw std::runtime_error(ok.err().to_string());
  serving::serving_service service({1u << 20});
  service.add_table(std::move(*store));
  serving::binary_server server(service);
  if (auto ok = server.start("127.0.0.1", 0); !ok) throw std::runtime_error(ok.err().to_string());
  auto client = client::serving_client::connect({{{"127.0.0.1", server.port()}}});
  if (!client) throw std::runtime_error(client.err().to_string());
  // The same lookups over the UCX transport (clients in the cluster), twice:
  //   - `ucx_default`: what a user gets, the bridge's default transports
  //     (loopback TCP on one host, docs/transport.md "No shared memory by
  //     default"; whatever UCX_TLS says if the environment sets it);
  //   - `ucx` (the serve_ucx_* rows): pinned to shared memory, so they
  //     measure one transport. UCX 1.13 sets a client-server connection up
  //     over TCP (without tcp in the list: "Destination is unreachable"),
  //     then moves the data lanes to shared memory (UCX_LOG_LEVEL=info:
  //     ep_cfg am(sysv/memory cma/memory)).
  // Each bridge reads UCX_TLS when it makes its UCX context (at start), so
  // the default pair is made first and the variable is set for the other
  // pair only, then put back as it was.
  transport::bridge_config bc;
  bc.node_name = "bench-serve";
  serving::transport_endpoint ucx_default_endpoint(service);
  if (auto ok = ucx_default_endpoint.start(bc); !ok)
    throw std::runtime_error(ok.err().to_string());
  auto ucx_default = client::ucx_client::connect({"127.0.0.1", ucx_default_endpoint.port()});
  if (!ucx_default) throw std::runtime_error(ucx_default.err().to_string());
  const char* user_tls = ::getenv("UCX_TLS");
  const std::optional<std::string> saved_tls =
      user_tls ? std::optional<std::string>(user_tls) : std::nullopt;
  ::setenv("UCX_TLS", "sm,self,tcp", 1);
  serving::transport_endpoint ucx_endpoint(service);
  auto ucx_started = ucx_endpoint.start(bc);
  auto ucx = ucx_started ? client::ucx_client::connect({"127.0.0.1", ucx_endpoint.port()})
                         : expected<std::unique_ptr<client::ucx_client>>(ucx_started.err());
  if (saved_tls) {
    ::setenv("UCX_TLS", saved_tls->c_str(), 1);
  } else {
    ::unsetenv("UCX_TLS");
  }
  if (!ucx) throw std::runtime_error(ucx.err().to_string());

  // The in-process DRAM tier with the same rows.
  dram_tier_config dc;
  dc.capacity_bytes = dram_tier::budget_for_rows(layout, eviction_policy::lru, rows);
  dram_tier dram(layout, dc);
  {
    row_buffer b(layout), spilled(layout);
    for (uint64_t i = 0; i < rows; ++i) {
      std::byte* r = b.append(keys[i]);
      meta_of(r) = row_meta{versions[i], 0, 0};
      std::memcpy(weights_of(r), &weights[i * dim], dim * 4);
    }
    if (auto ok = dram.store(b.keys(), b.rows(), false, spilled); !ok)
      throw std::runtime_error(ok.err().to_string());
  }

  redis_process redis;
  std::unique_ptr<redis_connection> rc;
  if (start_redis(redis, o.work_dir)) {
    rc = std::make_unique<redis_connection>(redis.port);
    // Load the rows with pipelined SETs (key: the decimal key; value: 256 raw bytes).
    std::string sink;
    size_t n = 0;
    for (uint64_t i = 0; i < rows; ++i) {
      const std::string k = std::to_string(keys[i]);
      rc->append_command(
          {"SET", k, std::string_view(reinterpret_cast<const char*>(&weights[i * dim]), dim * 4)});
      if (i % 1000 == 999 || i + 1 == rows) {
        rc->flush();
        for (uint64_t j = 0; j <= i % 1000; ++j) rc->read_reply(sink, n);
      }
    }
  }

  // Systems alternate in short rounds, so a burst of load from other
  // processes on a shared machine hits all of them alike; keys/s is the
  // median round, latency percentiles pool every request.
  constexpr int rounds = 5;
  for (uint32_t batch : batch_sizes) {
    const std::string b = std::to_string(batch);
    samples served, in_process, red, over_ucx, over_ucx_default, wire_limit, pipelined;
    const auto pipeline_batches = random_batches(rows, batch, 64, batch + 1);
    // A lookup reply's bytes on the socket: frame header, dim and n, then
    // per key its version and weights.
    loopback_stream loopback(24 + 8 + size_t{batch} * (8 + dim * 4));
    uint64_t stream_count = 16;
    uint64_t checksum = 0;
    client::rows got;
    std::vector<std::byte> out(size_t{batch} * layout.record_bytes());
    std::vector<uint32_t> misses;
    std::vector<std::string> names;
    std::string values;
    for (int round = 0; round < rounds; ++round) {
      measure(rows, batch, seconds / rounds, served, [&](const std::vector<uint64_t>& k) {
        auto ok = client->lookup_into("bench", k, got);
        if (!ok) throw std::runtime_error(ok.err().to_string());
        checksum += got.versions.size();
      });
      measure(rows, batch, seconds / rounds, over_ucx, [&](const std::vector<uint64_t>& k) {
        auto ok = (*ucx)->lookup_into("bench", k, got);
        if (!ok) throw std::runtime_error(ok.err().to_string());
        checksum += got.versions.size();
      });
      measure(rows, batch, seconds / rounds, over_ucx_default,
              [&](const std::vector<uint64_t>& k) {
                auto ok = (*ucx_default)->lookup_into("bench", k, got);
                if (!ok) throw std::runtime_error(ok.err().to_string());
                checksum += got.versions.size();
              });
      {  // the same lookups, up to 4 in flight on the connection
        const auto t0 = bench_clock::now();
        uint64_t keys_done = 0;
        do {
          auto ok = client->lookup_pipelined(
              "bench", pipeline_batches,
              [&](size_t, const client::rows& r) -> status {
                checksum += r.versions.size();
                return {};
              },
              4);
          if (!ok) throw std::runtime_error(ok.err().to_string());
          keys_done += uint64_t(batch) * pipeline_batches.size();
        } while (std::chrono::duration<double>(bench_clock::now() - t0).count() <
                 seconds / rounds);
        pipelined.round_rates.push_back(
            double(keys_done) / std::chrono::duration<double>(bench_clock::now() - t0).count());
      }
      {  // about as long as the other rounds: the count follows the last rate
        const double took = loopback.stream(stream_count);
        wire_limit.round_rates.push_back(double(stream_count) * batch / took);
        stream_count = std::max<uint64_t>(
            16, uint64_t(double(stream_count) * (seconds / rounds) / std::max(took, 1e-6)));
      }
      measure(rows, batch, seconds / rounds, in_process, [&](const std::vector<uint64_t>& k) {
        misses.clear();
        (void)dram.lookup(k, rows_span{out.data(), layout.record_bytes()}, misses);
      });
      if (!rc) continue;
      measure(rows, batch, seconds / rounds, red,
              [&](const std::vector<uint64_t>& k) { rc->mget(k, names, values); });
    }
    if (checksum == 0) throw std::runtime_error("serving returned no rows");
    const double p50 = served.percentile(0.5), p99 = served.percentile(0.99);
    report.add(
        {"serve_keys_per_s_b" + b, served.keys_per_s(), "keys/s", "redis_mget", red.keys_per_s()});
    report.add({"serve_keys_per_s_b" + b, served.keys_per_s(), "keys/s", "dram_in_process",
                in_process.keys_per_s()});
    report.add({"serve_keys_per_s_b" + b, served.keys_per_s(), "keys/s", "loopback_stream",
                wire_limit.keys_per_s()});
    report.add({"serve_pipelined_keys_per_s_b" + b, pipelined.keys_per_s(), "keys/s",
                "loopback_stream", wire_limit.keys_per_s()});
    report.add({"serve_p50_us_b" + b, p50, "us", "redis_mget", red.percentile(0.5)});
    report.add({"serve_p99_us_b" + b, p99, "us", "redis_mget", red.percentile(0.99)});
    report.add({"serve_p999_us_b" + b, served.percentile(0.999), "us", "redis_mget",
                red.percentile(0.999)});
    report.add({"serve_p99_over_p50_b" + b, p99 / p50, "x", "target_max", 2.0});
    report.add({"serve_ucx_keys_per_s_b" + b, over_ucx.keys_per_s(), "keys/s", "redis_mget",
                red.keys_per_s()});
    report.add({"serve_ucx_keys_per_s_b" + b, over_ucx.keys_per_s(), "keys/s", "serve_tcp",
                served.keys_per_s()});
    report.add({"serve_ucx_p99_over_p50_b" + b,
                over_ucx.percentile(0.99) / over_ucx.percentile(0.5), "x", "target_max", 2.0});
    report.add({"serve_ucx_default_keys_per_s_b" + b, over_ucx_default.keys_per_s(), "keys/s",
                "serve_tcp", served.keys_per_s()});
    report.add({"serve_ucx_default_keys_per_s_b" + b, over_ucx_default.keys_per_s(), "keys/s",
                "serve_ucx_shm", over_ucx.keys_per_s()});
    report.add({"serve_ucx_default_p99_over_p50_b" + b,
                over_ucx_default.percentile(0.99) / over_ucx_default.percentile(0.5), "x",
                "target_max", 2.0});
  }
  // Several clients at once, each on its own connection and thread (the
  // server answers each connection on a thread of its own), at batch 1024:
  // all clients' keys/s together against one client in the same rounds
  // (what the serving path's locks let through), and against Redis with as
  // many connections. The client threads share this machine's cores with
  // the server's.
  {
    constexpr uint32_t batch = 1024;
    const std::vector<size_t> client_counts = o.small ? std::vector<size_t>{2}
                                                      : std::vector<size_t>{2, 4};
    const size_t most = client_counts.back();
    std::vector<lookup_fn> ours, theirs;
    for (size_t c = 0; c < most; ++c) {
      ours.push_back(serving_lookup(server.port(), "bench"));
      if (!rc) continue;
      auto r = std::make_shared<redis_connection>(redis.port);
      theirs.push_back([r, names = std::vector<std::string>(), values = std::string()](
                           const std::vector<uint64_t>& k) mutable { r->mget(k, names, values); });
    }
    for (size_t clients : client_counts) {
      std::vector<double> one, many, red;
      for (int round = 0; round < rounds; ++round) {
        one.push_back(concurrent_keys_per_s(ours, 1, batch, rows, seconds / rounds));
        many.push_back(concurrent_keys_per_s(ours, clients, batch, rows, seconds / rounds));
        if (!theirs.empty())
          red.push_back(concurrent_keys_per_s(theirs, clients, batch, rows, seconds / rounds));
      }
      const std::string name = "serve_keys_per_s_b1024_clients" + std::to_string(clients);
      report.add({name, samples::median(many), "keys/s", "serve_1_client", samples::median(one)});
      if (!red.empty())
        report.add({name, samples::median(many), "keys/s", "redis_mget_same_clients",
                    samples::median(red)});
    }
  }
  ucx->reset();
  ucx_endpoint.stop();
  ucx_default->reset();
  ucx_default_endpoint.stop();
  server.stop();
  run_serve_misses_bench(rows, seconds, rounds,
                         o.small ? std::vector<size_t>{2} : std::vector<size_t>{2, 4}, o.work_dir,
                         report);
}

}  // namespace strata::bench
