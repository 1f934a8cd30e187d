// The serving node over real loopback sockets: the binary protocol with
// several concurrent clients, the HTTP/JSON endpoint and its 4xx answers,
// updates frames on the lookup port, and `strata serve` as
// real processes, one killed mid-load while the client fails over.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "client/client.hpp"
#include "client/ucx_client.hpp"
#include "serving/binary_server.hpp"
#include "serving/http_server.hpp"
#include "serving/service.hpp"
#include "serving/transport_endpoint.hpp"
#include "serving/update_stream.hpp"
#include "tests/serving/serving_test_util.hpp"
#include "tests/sanitize/runtime_preload.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::serving {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr uint32_t dim = 8;

// Polls `done` until it holds or the deadline passes (no fixed sleeps).
template <class F>
bool eventually(F&& done, std::chrono::milliseconds deadline = 20s) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

struct node : testing::served_test_table {
  std::unique_ptr<http_server> http;

  node() : served_test_table(dim) {
    http = std::make_unique<http_server>(*service, 64 * 1024);
    EXPECT_TRUE(http->start("127.0.0.1", 0).has_value());
  }

  client::serving_client connect() {
    auto c = client::serving_client::connect({{{"127.0.0.1", binary->port()}}});
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.err().to_string());
    return std::move(*c);
  }
};

void expect_rows(const testing::checkpoint_rows& rows, std::span<const uint64_t> keys,
                 const client::rows& r) {
  ASSERT_EQ(r.dim, dim);
  ASSERT_EQ(r.versions.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = rows.weights.find(keys[i]);
    if (it == rows.weights.end()) {
      EXPECT_EQ(r.versions[i], 0u);
      for (uint32_t d = 0; d < dim; ++d) EXPECT_EQ(r.weights[i * dim + d], 0.0f);
    } else {
      EXPECT_EQ(r.versions[i], rows.versions.at(keys[i]));
      EXPECT_EQ(std::memcmp(&r.weights[i * dim], it->second.data(), dim * 4), 0) << keys[i];
    }
  }
}

TEST(ServingServer, SeveralConcurrentClientsGetTheCheckpointRows) {
  node n;
  std::vector<std::thread> threads;
  std::atomic<int> lookups{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto c = n.connect();
      std::mt19937_64 rng(t);
      for (size_t batch : {0, 1, 16, 1024, 7, 300}) {
        for (int rep = 0; rep < 3; ++rep) {
          std::vector<uint64_t> keys(batch);
          for (auto& k : keys)
            k = rng() % 10 == 0 ? rng() : n.rows.keys[rng() % n.rows.keys.size()];
          auto r = c.lookup("ads", keys);
          ASSERT_TRUE(r.has_value()) << r.err().to_string();
          expect_rows(n.rows, keys, *r);
          ++lookups;
        }
      }
      ASSERT_TRUE(c.prefetch("ads", std::vector<uint64_t>{n.rows.keys[0]}).has_value());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(lookups.load(), 4 * 6 * 3);
}

// Clients in the cluster look up over UCX (serving.transport_port): the
// same rows bit for bit as over TCP, from several threads on one client
// and from two clients; errors name the problem; pushes are refused.
TEST(ServingServer, LookupsOverTheUcxTransportMatchTheCheckpoint) {
  node n;
  transport_endpoint ucx(*n.service);
  transport::bridge_config bc;
  bc.node_name = "serving-test";
  ASSERT_TRUE(ucx.start(bc).has_value());
  auto a = client::ucx_client::connect({"127.0.0.1", ucx.port()});
  ASSERT_TRUE(a.has_value()) << a.err().to_string();
  auto b = client::ucx_client::connect({"127.0.0.1", ucx.port()});
  ASSERT_TRUE(b.has_value()) << b.err().to_string();
  EXPECT_EQ((*a)->server(), "serving-test");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto& c = t % 2 ? **a : **b;
      std::mt19937_64 rng(100 + t);
      client::rows r;
      for (size_t batch : {0, 1, 16, 1024, 7, 300}) {
        std::vector<uint64_t> keys(batch);
        for (auto& k : keys)
          k = rng() % 10 == 0 ? rng() : n.rows.keys[rng() % n.rows.keys.size()];
        auto ok = c.lookup_into("ads", keys, r);
        ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
        expect_rows(n.rows, keys, r);
      }
      ASSERT_TRUE(c.prefetch("ads", std::vector<uint64_t>{n.rows.keys[1]}).has_value());
    });
  }
  for (auto& t : threads) t.join();
  client::rows r;
  auto unknown = (*a)->lookup_into("nope", std::vector<uint64_t>{1}, r);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.err().message().find("unknown table"), std::string::npos)
      << unknown.err().message();
  auto push = (*a)->push("ads", std::vector<uint64_t>{1}, std::vector<float>(dim, 1.0f));
  ASSERT_FALSE(push.has_value());
  EXPECT_NE(push.err().message().find("takes no gradients"), std::string::npos)
      << push.err().message();
}

// The client reads rows replies straight into its buffers; a reply
// damaged on the way (a flipped bit after the checksum) or lying about its
// row count is rejected with the reason, never returned as rows.
TEST(ServingClient, DamagedRowsRepliesAreRejected) {
  using boost::asio::ip::tcp;
  boost::asio::io_context io;
  tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  std::thread fake([&] {
    // A damaged reply is a broken connection to the client: it reconnects
    // and retries once (one replica). Two replies with a flipped weight
    // bit, then two claiming 3 rows.
    for (int reply = 0; reply < 4; ++reply) {
      tcp::socket s(io);
      acceptor.accept(s);
      std::array<std::byte, wire::header_bytes> head;
      boost::asio::read(s, boost::asio::buffer(head));
      uint32_t length = 0;
      uint64_t request = 0;
      std::memcpy(&length, head.data() + 8, 4);
      std::memcpy(&request, head.data() + 16, 8);
      std::vector<std::byte> body(length);
      boost::asio::read(s, boost::asio::buffer(body));
      std::vector<std::byte> payload, frame;
      const std::vector<uint64_t> versions = {7};
      const std::vector<float> weights = {1.0f, 2.0f};
      wire::encode_rows(payload, 2, versions, weights);
      if (reply >= 2) payload[4] = std::byte{3};  // n = 3, with the bytes of one row
      wire::append_frame(frame, wire::frame_type::rows, request, payload);
      if (reply < 2) frame.back() ^= std::byte{1};
      boost::asio::write(s, boost::asio::buffer(frame));
    }
  });
  client::client_options o;
  o.replicas = {{"127.0.0.1", port}};
  auto c = client::serving_client::connect(o);
  ASSERT_TRUE(c.has_value());
  client::rows r;
  auto flipped = c->lookup_into("ads", std::vector<uint64_t>{1}, r);
  ASSERT_FALSE(flipped.has_value());
  EXPECT_NE(flipped.err().message().find("CRC32C mismatch"), std::string::npos)
      << flipped.err().message();
  auto lying = c->lookup_into("ads", std::vector<uint64_t>{1}, r);
  ASSERT_FALSE(lying.has_value());
  EXPECT_NE(lying.err().message().find("3 rows of dim 2 need"), std::string::npos)
      << lying.err().message();
  fake.join();
}

TEST(ServingServer, BinaryErrorsNameTheProblem) {
  node n;
  auto c = n.connect();
  auto unknown = c.lookup("clicks", std::vector<uint64_t>{1});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.err().code(), errc::not_found);
  EXPECT_NE(unknown.err().message().find("unknown table 'clicks' (served: ads)"),
            std::string::npos);
  auto big = c.lookup("ads", std::vector<uint64_t>(5000, 1));
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.err().code(), errc::capacity_exceeded);
  // The connection stays usable after an error reply.
  auto ok = c.lookup("ads", std::vector<uint64_t>{n.rows.keys[1]});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(c.failovers(), 0u);
}

// --- HTTP ---------------------------------------------------------------------

struct http_reply {
  int status = 0;
  std::string body;
};

http_reply http_call(uint16_t port, boost::beast::http::verb verb, const std::string& target,
                     const std::string& body) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  beast::error_code ec;
  http::read(socket, buffer, res, ec);
  return {ec ? -1 : int(res.result_int()), res.body()};
}

TEST(ServingHttp, LookupAndHealth) {
  using boost::beast::http::verb;
  node n;
  const uint64_t k = n.rows.keys[3];
  auto r = http_call(n.http->port(), verb::post, "/lookup",
                     R"({"table":"ads","keys":[)" + std::to_string(k) + R"(,"5",")" +
                         std::to_string(k) + R"("]})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["dim"], dim);
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["versions"][0].get<uint64_t>(), n.rows.versions.at(k));
  EXPECT_EQ(j["versions"][1].get<uint64_t>(), 0u);  // unknown key: default
  for (uint32_t d = 0; d < dim; ++d) {
    EXPECT_EQ(j["rows"][0][d].get<float>(), n.rows.weights.at(k)[d]);
    EXPECT_EQ(j["rows"][2][d].get<float>(), n.rows.weights.at(k)[d]);
  }
  auto h = http_call(n.http->port(), verb::get, "/health", "");
  ASSERT_EQ(h.status, 200);
  auto hj = json::parse(h.body);
  EXPECT_EQ(hj["status"], "ok");
  EXPECT_EQ(hj["tables"]["ads"]["loaded_rows"].get<uint64_t>(), 2000u);
  EXPECT_GE(hj["tables"]["ads"]["keys"].get<uint64_t>(), 3u);
  // Key k (asked twice) came from LMDB through one read handle, which no
  // lookup waited for.
  EXPECT_EQ(hj["tables"]["ads"]["lmdb_hits"].get<uint64_t>(), 2u);
  EXPECT_EQ(hj["tables"]["ads"]["lmdb_read_handles"].get<uint64_t>(), 1u);
  EXPECT_EQ(hj["tables"]["ads"]["lmdb_read_waits"].get<uint64_t>(), 0u);
}

TEST(ServingHttp, MalformedRequestsGetClear4xx) {
  using boost::beast::http::verb;
  node n;
  const uint16_t p = n.http->port();
  struct bad_case {
    verb method;
    std::string target, body;
    int status;
    std::string says;
  };
  const std::vector<bad_case> cases = {
      {verb::post, "/lookup", "{not json", 400, "not valid JSON"},
      {verb::post, "/lookup", "[1,2]", 400, "must be a JSON object"},
      {verb::post, "/lookup", R"({"keys":[1]})", 400, "'table'"},
      {verb::post, "/lookup", R"({"table":"ads"})", 400, "'keys'"},
      {verb::post, "/lookup", R"({"table":"ads","keys":[-1]})", 400, "keys[0]"},
      {verb::post, "/lookup", R"({"table":"ads","keys":[1,"x"]})", 400, "keys[1]"},
      {verb::post, "/lookup", R"({"table":"ads","keys":[1],"k":2})", 400, "unknown field 'k'"},
      {verb::post, "/lookup", R"({"table":"clicks","keys":[1]})", 404, "unknown table 'clicks'"},
      {verb::get, "/lookup", "", 405, "POST"},
      {verb::get, "/nope", "", 404, "no such path"},
      {verb::post, "/lookup", R"({"table":"ads","keys":[)" + std::string(70000, '1') + "]}", 413,
       "max_http_body_bytes"},
  };
  for (const auto& c : cases) {
    auto r = http_call(p, c.method, c.target, c.body);
    EXPECT_EQ(r.status, c.status) << c.target << " " << c.body.substr(0, 60) << " -> " << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << r.body;
  }
  std::string many = R"({"table":"ads","keys":[)";
  for (int i = 0; i < 5000; ++i) many += (i ? ",1" : "1");
  many += "]}";
  auto r = http_call(p, verb::post, "/lookup", many);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("max_request_keys"), std::string::npos);
}

// --- online updates (the publisher/subscriber stream: update_stream_test.cpp) ----

// Updates reach a node only through its subscriber (the lookup port
// refuses them: tests/serving/hostile_servers_test.cpp), which applies
// each batch with apply_updates, as here.
TEST(OnlineUpdates, ReorderedUpdateBatchesNeverMoveAVersionBackwards) {
  node n;
  const uint64_t key = n.rows.keys[20];
  const uint64_t base = n.rows.versions.at(key);
  std::vector<uint64_t> order;
  for (uint64_t v = 1; v <= 30; ++v) order.push_back(base + v);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  auto c = n.connect();
  uint64_t seen = base;
  for (uint64_t v : order) {
    ASSERT_TRUE(n.service
                    ->apply_updates("ads", std::vector<uint64_t>{key},
                                    std::vector<float>(dim, float(v - base)),
                                    std::vector<uint64_t>{v})
                    .has_value());
    auto r = c.lookup("ads", std::vector<uint64_t>{key});
    ASSERT_TRUE(r.has_value());
    ASSERT_GE(r->versions[0], seen);
    seen = r->versions[0];
    ASSERT_EQ(r->weights[0], float(seen - base));
  }
  EXPECT_EQ(seen, base + 30);
}

// --- the Python module ------------------------------------------------------------

TEST(PythonClient, ImportsLooksUpAndTrainsATorchModelThroughStrata) {
  if (!fs::exists(STRATA_PYTHON_MODULE_DIR))
    GTEST_SKIP() << "the Python module was not built (pybind11-dev or python3-dev missing)";
  node n;
  json expected = json::object();
  for (size_t i = 0; i < 300; ++i) {
    const uint64_t k = n.rows.keys[i];
    expected[std::to_string(k)] = {n.rows.versions.at(k), n.rows.weights.at(k)};
  }
  std::ofstream(n.dir.path() / "expected.json") << expected.dump();
  const std::string command =
      testing::sanitizer_preload() +
      "PYTHONPATH=" STRATA_PYTHON_MODULE_DIR " /usr/bin/python3 " STRATA_SOURCE_DIR
      "/tests/serving/python_client_test.py 127.0.0.1:" +
      std::to_string(n.binary->port()) + " ads " + (n.dir.path() / "expected.json").string() +
      " > " + (n.dir.path() / "py.log").string() + " 2>&1";
  const int rc = std::system(command.c_str());
  std::ostringstream log;
  log << std::ifstream(n.dir.path() / "py.log").rdbuf();
  ASSERT_TRUE(WIFEXITED(rc)) << log.str();
  if (WEXITSTATUS(rc) == 77) GTEST_SKIP() << log.str();
  EXPECT_EQ(WEXITSTATUS(rc), 0) << log.str();
  EXPECT_NE(log.str().find("torch training through strata passed"), std::string::npos) << log.str();
}

// --- real processes ---------------------------------------------------------------

pid_t spawn_serve(const fs::path& manifest, const fs::path& port_file, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    ::execl(STRATA_BINARY, STRATA_BINARY, "serve", manifest.c_str(), "--port-file",
            port_file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

uint16_t read_port(const fs::path& port_file) {
  std::ifstream in(port_file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("binary=", 0) == 0) return static_cast<uint16_t>(std::stoi(line.substr(7)));
  return 0;
}

TEST(ServingProcesses, KillingAReplicaMidLoadFailsTheClientOverToAnother) {
  testing::temp_dir dir;
  // The checkpoint root holds only checkpoints (serve refuses an
  // lmdb_path inside it).
  auto rows = testing::write_test_checkpoint(dir.path() / "ckpts" / "ckpt-000000000001", "ads",
                                             dim, 3000, 2);
  std::vector<pid_t> pids;
  std::vector<uint16_t> ports;
  for (int i = 0; i < 2; ++i) {
    const fs::path state = dir.path() / ("replica-" + std::to_string(i));
    fs::create_directories(state);
    // A checkpoint root: serve picks its latest complete checkpoint.
    std::ofstream(state / "serve.yaml")
        << testing::serving_manifest("ads", dim, dir.path() / "ckpts", state, 64,
                                     "  warmup_keys: 100\n");
    pids.push_back(spawn_serve(state / "serve.yaml", state / "ports", state / "log"));
  }
  for (int i = 0; i < 2; ++i) {
    const fs::path state = dir.path() / ("replica-" + std::to_string(i));
    bool exited = false;
    ASSERT_TRUE(eventually(
                    [&] {
                      exited = exited || ::waitpid(pids[i], nullptr, WNOHANG) == pids[i];
                      return exited || fs::exists(state / "ports");
                    },
                    60s) &&
                !exited)
        << "replica " << i << " did not start; log:\n"
        << std::ifstream(state / "log").rdbuf();
    ports.push_back(read_port(state / "ports"));
    ASSERT_NE(ports.back(), 0);
  }
  auto c =
      client::serving_client::connect({{{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}}, 5s});
  ASSERT_TRUE(c.has_value());
  std::mt19937_64 rng(1);
  int after_kill = 0;
  for (int i = 0; i < 200; ++i) {
    if (i == 50) {  // mid-load: the replica in use dies without warning
      ASSERT_EQ(c->current_replica(), "127.0.0.1:" + std::to_string(ports[0]));
      ::kill(pids[0], SIGKILL);
      ::waitpid(pids[0], nullptr, 0);
    }
    std::vector<uint64_t> keys(64);
    for (auto& k : keys) k = rows.keys[rng() % rows.keys.size()];
    auto r = c->lookup("ads", keys);
    ASSERT_TRUE(r.has_value()) << "lookup " << i << ": " << r.err().to_string();
    expect_rows(rows, keys, *r);
    if (i >= 50) ++after_kill;
  }
  EXPECT_EQ(after_kill, 150);
  EXPECT_GE(c->failovers(), 1u);
  EXPECT_EQ(c->current_replica(), "127.0.0.1:" + std::to_string(ports[1]));
  ::kill(pids[1], SIGTERM);
  int status = 0;
  ::waitpid(pids[1], &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace strata::serving
