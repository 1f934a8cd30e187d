// Hostile clients against a serving node's binary and HTTP ports (issue
// 16): slowloris, hundreds of idle connections, headers that claim
// 256 MiB, payloads beyond the buffer budget, running out of descriptors,
// huge replies, and a plain client sending `updates`. During and after each
// a normal client is answered within 1 s, and the server's own counters
// stay under their caps (tests/serving/hostile_scenarios.hpp).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/binary_server.hpp"
#include "serving/http_server.hpp"
#include "serving/serving_store.hpp"
#include "tests/serving/hostile_scenarios.hpp"
#include "tests/serving/serving_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::serving {
namespace {

using namespace std::chrono_literals;
namespace hostile = testing::hostile;
constexpr uint32_t dim = 8;

connection_settings small_settings() {
  connection_settings s;
  s.max_connections = 64;
  s.idle_timeout = 2500ms;
  s.request_timeout = 500ms;
  s.max_buffered_bytes = 4u << 20;
  return s;
}

// A serving node of one table on a real checkpoint, with both servers.
struct node {
  testing::temp_dir dir;
  testing::checkpoint_rows rows;
  std::unique_ptr<serving_service> service;
  std::unique_ptr<binary_server> binary;
  std::unique_ptr<http_server> http;

  explicit node(service_limits limits = {4096}, connection_settings settings = small_settings(),
                size_t max_body = 16u << 20) {
    rows = testing::write_test_checkpoint(dir.path() / "ckpt", "ads", dim, 500, 1);
    auto store = testing::open_test_store(dir.path(), dim);
    if (!store) throw std::runtime_error("the test store did not open (see above)");
    service = std::make_unique<serving_service>(limits);
    service->add_table(std::move(store));
    binary = std::make_unique<binary_server>(*service, settings);
    EXPECT_TRUE(binary->start("127.0.0.1", 0).has_value());
    http = std::make_unique<http_server>(*service, max_body, settings);
    EXPECT_TRUE(http->start("127.0.0.1", 0).has_value());
  }

  hostile::target binary_target() {
    hostile::target t;
    t.port = binary->port();
    t.stats = [this] { return binary->stats(); };
    t.settings = small_settings();
    const std::vector<uint64_t> keys{rows.keys[0], rows.keys[1]};
    t.client = [port = t.port, keys] {
      return std::make_unique<hostile::binary_client>(port, "ads", keys);
    };
    std::vector<std::byte> frame, payload;
    wire::encode(payload, wire::key_request{"ads", keys});
    wire::append_frame(frame, wire::frame_type::lookup, 7, payload);
    t.slow_request.assign(reinterpret_cast<const char*>(frame.data()), frame.size());
    return t;
  }

  hostile::target http_target() {
    hostile::target t;
    t.port = http->port();
    t.stats = [this] { return http->stats(); };
    t.settings = small_settings();
    t.http = true;
    const std::string body =
        "{\"table\":\"ads\",\"keys\":[" + std::to_string(rows.keys[0]) + "]}";
    t.client = [port = t.port, body] { return std::make_unique<hostile::http_client>(port, body); };
    t.slow_request = hostile::http_lookup_request(body);
    return t;
  }
};

TEST(HostileBinaryPort, SlowlorisIsCutByTheDeadlines) {
  node n;
  hostile::slowloris_is_cut(n.binary_target());
}

TEST(HostileBinaryPort, IdleConnectionsAreCapped) {
  node n;
  hostile::idle_connections_are_capped(n.binary_target());
}

TEST(HostileBinaryPort, HeadersClaiming256MiBAllocateNothing) {
  node n;
  hostile::huge_claims_allocate_nothing(n.binary_target());
}

TEST(HostileBinaryPort, BufferedBytesStayUnderTheBudget) {
  node n;
  hostile::buffered_bytes_stay_under_the_budget(n.binary_target());
}

TEST(HostileBinaryPort, OutOfDescriptorsBacksOffAndRecovers) {
  node n;
  hostile::out_of_descriptors_backs_off(n.binary_target());
}

TEST(HostileHttpPort, SlowlorisIsCutByTheDeadlines) {
  node n;
  hostile::slowloris_is_cut(n.http_target());
}

TEST(HostileHttpPort, IdleConnectionsAreCappedWith503) {
  node n;
  hostile::idle_connections_are_capped(n.http_target());
}

TEST(HostileHttpPort, ContentLengthOf256MiBAllocatesNothing) {
  node n;
  hostile::huge_claims_allocate_nothing(n.http_target());
}

TEST(HostileHttpPort, BufferedBytesStayUnderTheBudget) {
  node n;
  hostile::buffered_bytes_stay_under_the_budget(n.http_target());
}

TEST(HostileHttpPort, OutOfDescriptorsBacksOffAndRecovers) {
  node n;
  hostile::out_of_descriptors_backs_off(n.http_target());
}

// The servers' own counters are in /health, for whoever watches a node.
TEST(HostileHttpPort, HealthListsBothServersCounters) {
  node n;
  auto idle = hostile::open_idle(n.binary->port(), 3);
  for (int w = 0; w < 200 && n.binary->stats().open < 3; ++w) std::this_thread::sleep_for(5ms);
  hostile::raw_connection c(n.http->port());
  ASSERT_TRUE(c.send(std::string("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")));
  const auto res = hostile::read_http_response(c.fd(), 5s);
  ASSERT_EQ(res.rfind("HTTP/1.1 200", 0), 0u) << "[" << res << "]";
  auto j = nlohmann::json::parse(res.substr(res.find("\r\n\r\n") + 4));
  EXPECT_EQ(j["servers"]["binary"]["open"].get<uint64_t>(), 3u) << j.dump();
  EXPECT_EQ(j["servers"]["http"]["open"].get<uint64_t>(), 1u) << j.dump();
  EXPECT_EQ(j["servers"]["binary"]["refused_over_cap"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j["servers"]["http"].contains("buffered_bytes"));
}

// Issue 16 item 2: rows come only from the configured publishers. A plain
// client's `updates` frame is refused, counted, and the row is unchanged.
TEST(HostileBinaryPort, APlainClientCannotChangeAServedRow) {
  node n;
  const uint64_t key = n.rows.keys[3];
  auto s = wire::frame_socket::connect({"127.0.0.1", n.binary->port()}, 5s);
  ASSERT_TRUE(s.has_value());
  std::vector<std::byte> payload;
  wire::encode(payload, wire::update_batch{"ads", 1, 1, dim, {key}, {~uint64_t{0}},
                                           std::vector<float>(dim, 666.0f)});
  ASSERT_TRUE(s->send(wire::frame_type::updates, 9, payload).has_value());
  auto reply = s->receive();
  ASSERT_TRUE(reply.has_value()) << reply.err().to_string();
  ASSERT_EQ(reply->header.type, wire::frame_type::error);
  auto e = wire::decode_error(reply->payload);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("updates are accepted only from the configured publishers "
                            "(serving.subscribe)"),
            std::string::npos)
      << e->message;
  EXPECT_EQ(n.binary->updates_refused(), 1u);

  lookup_result r;
  ASSERT_TRUE(n.service->lookup("ads", std::vector<uint64_t>{key}, r).has_value());
  EXPECT_EQ(r.versions[0], n.rows.versions.at(key));
  EXPECT_EQ(std::vector<float>(r.weights.begin(), r.weights.end()), n.rows.weights.at(key));
  EXPECT_EQ(n.service->stats().at("ads").updates_applied, 0u);
}

// Issue 16 item 8: a lookup of many repeated keys does not build a reply
// of hundreds of MB. 2^20 repeated keys in a 7 MB body (dim 8: the JSON
// reply would be ~150 MB) are refused 413 before the reply is built, and
// the process's peak RSS stays far below what building it took.
TEST(HostileHttpPort, RepeatedKeysCannotAmplifyAReply) {
  connection_settings roomy = small_settings();
  roomy.max_buffered_bytes = uint64_t{1} << 30;
  // A 7 MB body: small_settings' 500 ms request deadline (the slowloris
  // tests') cut it once under ASan on a loaded machine, before the 413.
  roomy.request_timeout = 30s;
  roomy.idle_timeout = 30s;
  node n(service_limits{1u << 20}, roomy);
  const uint64_t hwm_before = hostile::proc_status("VmHWM");
  std::string body = "{\"table\":\"ads\",\"keys\":[";
  const std::string key = std::to_string(n.rows.keys[0]);
  for (size_t i = 0; i < (1u << 20); ++i) body += (i ? "," : "") + key;
  body += "]}";
  hostile::raw_connection c(n.http->port());
  ASSERT_TRUE(c.send(hostile::http_lookup_request(body)));
  const auto res = hostile::read_http_response(c.fd(), 20s);
  EXPECT_EQ(res.rfind("HTTP/1.1 413", 0), 0u) << res.substr(0, 300);
  EXPECT_NE(res.find("max_reply_bytes"), std::string::npos) << res.substr(0, 300);
  const uint64_t grew_mib = (hostile::proc_status("VmHWM") - hwm_before) / 1024;
  EXPECT_LT(grew_mib, 200u) << "peak RSS grew by " << grew_mib << " MiB for one request";
  for (int i = 0; i < 100 && n.http->stats().buffered_bytes != 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(n.http->stats().buffered_bytes, 0u) << "a request's memory was not given back";
  // A normal lookup still answers.
  auto normal = n.http_target().client();
  EXPECT_TRUE(normal->request());
}

// The same bound on the binary port: a reply over max_reply_bytes is
// refused before it is allocated, naming the sizes.
TEST(HostileBinaryPort, RepliesOverTheCapAreRefusedBeforeTheyAreBuilt) {
  service_limits limits{1u << 20};
  limits.max_reply_bytes = 64 * 1024;
  node n(limits);
  auto s = wire::frame_socket::connect({"127.0.0.1", n.binary->port()}, 5s);
  ASSERT_TRUE(s.has_value());
  std::vector<std::byte> payload;
  wire::encode(payload, wire::key_request{"ads", std::vector<uint64_t>(4096, n.rows.keys[0])});
  ASSERT_TRUE(s->send(wire::frame_type::lookup, 3, payload).has_value());
  auto reply = s->receive();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->header.type, wire::frame_type::error);
  auto e = wire::decode_error(reply->payload);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("163840-byte reply, over max_reply_bytes 65536"), std::string::npos)
      << e->message;
  EXPECT_LE(n.binary->stats().buffered_bytes, 64u * 1024) << "the refused reply was charged";
  // Under the cap it answers.
  auto normal = n.binary_target().client();
  EXPECT_TRUE(normal->request());
}

// A listening TCP socket on 127.0.0.1 (a free port; -1 on failure) for a
// test that plays the server by hand, and its port.
int loopback_listener() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

uint16_t port_of(int listener) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  return ntohs(a.sin_port);
}

// The client side of the same rule: a rows reply whose header claims
// 240 MB (counts consistent with its length) and then sends nothing costs
// the client what arrived, not the claim (it used to resize both arrays
// to the claim before reading).
TEST(HostileServer, ARowsHeaderClaiming240MBAllocatesWhatArrives) {
  const int listener = loopback_listener();
  ASSERT_GE(listener, 0);
  auto client = wire::frame_socket::connect({"127.0.0.1", port_of(listener)}, 1500ms);
  ASSERT_TRUE(client.has_value());
  const int server = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  const uint32_t n = 6'000'000, dim = 8;
  auto head = hostile::header_claiming(wire::frame_type::rows, 8 + n * 8 + n * dim * 4);
  uint32_t counts[2] = {dim, n};
  ASSERT_EQ(::send(server, head.data(), head.size(), 0), ssize_t(head.size()));
  ASSERT_EQ(::send(server, counts, sizeof counts, 0), ssize_t(sizeof counts));
  const std::vector<uint64_t> some(1000, 7);  // 8000 bytes of versions, then the end
  ASSERT_EQ(::send(server, some.data(), 8000, 0), 8000);
  ::shutdown(server, SHUT_WR);
  const uint64_t hwm_before = hostile::proc_status("VmHWM");
  wire::frame out;
  wire::rows_reply rows;
  auto got = client->receive_rows_into(out, rows);
  EXPECT_FALSE(got.has_value()) << "the stream ended inside the rows";
  const uint64_t grew_mib = (hostile::proc_status("VmHWM") - hwm_before) / 1024;
  EXPECT_LT(grew_mib, 16u) << "peak RSS grew by " << grew_mib << " MiB for 8 KB that arrived";
  ::close(server);
  ::close(listener);
}

// A client's receive timeout holds against a server that accepts and
// never answers (asio's synchronous read turned SO_RCVTIMEO into an
// endless wait: frame_socket::connect's timeout never fired).
TEST(HostileServer, AClientsReceiveTimeoutFiresAgainstASilentServer) {
  const int listener = loopback_listener();
  ASSERT_GE(listener, 0);
  auto client = wire::frame_socket::connect({"127.0.0.1", port_of(listener)}, 300ms);
  ASSERT_TRUE(client.has_value());
  const int server = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  std::atomic<bool> returned{false};
  std::string why;
  std::thread reader([&] {
    auto got = client->receive();
    why = got ? "a frame" : got.err().message();
    returned = true;
  });
  for (int i = 0; i < 500 && !returned; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(returned) << "receive with a 300 ms timeout still blocked after 5 s";
  if (!returned) client->close();  // unblocks it either way
  reader.join();
  EXPECT_NE(why.find("timed out"), std::string::npos) << why;
  ::close(server);
  ::close(listener);
}

}  // namespace
}  // namespace strata::serving
