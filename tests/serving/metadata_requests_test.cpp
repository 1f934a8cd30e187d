// What a user needs before the first lookup (issue 22): the tables a
// serving node holds and a few of its stored keys, over the binary
// protocol (tables, list_keys) and offline from a checkpoint; and hostile
// list_keys requests (a huge or zero limit, an unknown table, a truncated
// payload) answered with an error frame on a connection that stays usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "client/client.hpp"
#include <nlohmann/json.hpp>

#include "serving/binary_server.hpp"
#include "serving/http_api.hpp"
#include "serving/metadata_requests.hpp"
#include "serving/service.hpp"
#include "tests/serving/serving_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::serving {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uint32_t dim = 8;

struct node : testing::served_test_table {
  node() : served_test_table(dim) {}
  client::serving_client connect() {
    auto c = client::serving_client::connect({{{"127.0.0.1", binary->port()}}});
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.err().to_string());
    return std::move(*c);
  }
};

TEST(MetadataRequests, ClientListsTablesAndKeysThatLookUpToStoredRows) {
  node n;
  auto c = n.connect();
  auto tables = c.tables();
  ASSERT_TRUE(tables.has_value()) << tables.err().to_string();
  ASSERT_EQ(tables->size(), 1u);
  EXPECT_EQ((*tables)[0].name, "ads");
  EXPECT_EQ((*tables)[0].dim, dim);

  for (uint32_t limit : {1u, 10u, wire::max_list_keys}) {
    auto keys = c.list_keys("ads", limit);
    ASSERT_TRUE(keys.has_value()) << keys.err().to_string();
    ASSERT_EQ(keys->size(), limit);
    EXPECT_EQ(std::set<uint64_t>(keys->begin(), keys->end()).size(), limit) << "repeated keys";
    // Every listed key is a stored row: its lookup gives the checkpoint's
    // version and weights, not the default vector.
    auto got = c.lookup("ads", *keys);
    ASSERT_TRUE(got.has_value()) << got.err().to_string();
    for (size_t i = 0; i < keys->size(); ++i) {
      const uint64_t k = (*keys)[i];
      ASSERT_TRUE(n.rows.versions.count(k)) << k << " is not a key of the checkpoint";
      EXPECT_EQ(got->versions[i], n.rows.versions[k]) << k;
      EXPECT_TRUE(std::equal(n.rows.weights[k].begin(), n.rows.weights[k].end(),
                             got->weights.begin() + i * dim))
          << k;
    }
  }
  // The client checks the limit before sending.
  auto over = c.list_keys("ads", wire::max_list_keys + 1);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.err().code(), errc::invalid_argument);
  EXPECT_NE(over.err().message().find("limit 1001 is outside 1..1000"), std::string::npos)
      << over.err().message();
  auto unknown = c.list_keys("nope", 5);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.err().code(), errc::not_found);
  EXPECT_NE(unknown.err().message().find("unknown table 'nope' (served: ads)"), std::string::npos)
      << unknown.err().message();
}

// A raw list_keys frame; returns the reply frame.
wire::frame ask(wire::frame_socket& s, wire::frame_type type, const std::vector<std::byte>& payload,
                uint64_t id) {
  EXPECT_TRUE(s.send(type, id, payload).has_value());
  wire::frame reply;
  auto ok = s.receive_into(reply);
  EXPECT_TRUE(ok.has_value()) << (ok ? "" : ok.err().to_string());
  EXPECT_EQ(reply.header.request, id);
  return reply;
}

std::vector<std::byte> list_keys_payload(const std::string& table, uint32_t limit) {
  std::vector<std::byte> p;
  wire::encode(p, wire::list_keys_request{table, limit});
  return p;
}

void expect_error(const wire::frame& reply, errc code, const std::string& text) {
  ASSERT_EQ(reply.header.type, wire::frame_type::error);
  auto e = wire::decode_error(reply.payload);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, static_cast<uint16_t>(code)) << e->message;
  EXPECT_NE(e->message.find(text), std::string::npos) << e->message;
}

TEST(MetadataRequests, HostileRequestsGetAnErrorAndTheConnectionStays) {
  node n;
  auto s = wire::frame_socket::connect({"127.0.0.1", n.binary->port()}, 5000ms);
  ASSERT_TRUE(s.has_value()) << s.err().to_string();
  uint64_t id = 1;
  // A limit the server would have to build a 32 GiB reply for.
  expect_error(ask(*s, wire::frame_type::list_keys, list_keys_payload("ads", UINT32_MAX), id++),
               errc::invalid_argument, "limit 4294967295 is outside 1..1000");
  expect_error(ask(*s, wire::frame_type::list_keys, list_keys_payload("ads", 0), id++),
               errc::invalid_argument, "limit 0 is outside 1..1000");
  expect_error(ask(*s, wire::frame_type::list_keys, list_keys_payload("nope", 10), id++),
               errc::not_found, "unknown table 'nope' (served: ads)");
  auto truncated = list_keys_payload("ads", 10);
  truncated.resize(truncated.size() - 2);
  expect_error(ask(*s, wire::frame_type::list_keys, truncated, id++), errc::corrupt_data,
               "list_keys payload: bad or truncated field 'limit'");
  auto longer = list_keys_payload("ads", 10);
  longer.push_back(std::byte{0});
  expect_error(ask(*s, wire::frame_type::list_keys, longer, id++), errc::corrupt_data, "list_keys payload: bad or truncated field 'end'");
  expect_error(ask(*s, wire::frame_type::tables, {std::byte{1}}, id++), errc::invalid_argument,
               "tables payload: 1 bytes, expected none");
  // Replies sent to the server are not requests.
  expect_error(ask(*s, wire::frame_type::key_list, {}, id++), errc::invalid_argument,
               "frame type 14 is not a request");
  // The same connection still answers.
  auto tables = ask(*s, wire::frame_type::tables, {}, id++);
  ASSERT_EQ(tables.header.type, wire::frame_type::table_list);
  auto list = wire::decode_table_list(tables.payload);
  ASSERT_TRUE(list.has_value()) << list.err().to_string();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "ads");
  auto keys = ask(*s, wire::frame_type::list_keys, list_keys_payload("ads", 3), id++);
  ASSERT_EQ(keys.header.type, wire::frame_type::key_list);
  auto got = wire::decode_key_list(keys.payload);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->size(), 3u);
}

TEST(MetadataRequests, KeyListDecoderRefusesMoreKeysThanTheLimit) {
  std::vector<uint64_t> many(wire::max_list_keys + 1, 7);
  std::vector<std::byte> p;
  wire::encode_key_list(p, many);
  auto got = wire::decode_key_list(p);
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.err().message().find("1001 keys, more than the limit of 1000"), std::string::npos)
      << got.err().message();
  // A table_list claiming 4 billion entries fails at the first missing one
  // (nothing is reserved from the count).
  std::vector<std::byte> lie;
  wire::writer(lie).u32(UINT32_MAX);
  auto tables = wire::decode_table_list(lie);
  ASSERT_FALSE(tables.has_value());
  EXPECT_NE(tables.err().message().find("table_list payload: bad or truncated field 'name'"), std::string::npos)
      << tables.err().message();
}

http_response get(serving_service& service, const std::string& target,
                  boost::beast::http::verb verb = boost::beast::http::verb::get) {
  http_request req{verb, target, 11};
  return handle_http_request(service, req);
}

TEST(MetadataRequests, HttpListsKeysAsStringsThatLookUpToStoredRows) {
  node n;
  auto ok = get(*n.service, "/keys?table=ads&limit=5");
  ASSERT_EQ(ok.result_int(), 200) << ok.body();
  auto body = nlohmann::json::parse(ok.body());
  EXPECT_EQ(body["table"], "ads");
  ASSERT_EQ(body["keys"].size(), 5u) << ok.body();
  for (const auto& k : body["keys"]) {
    ASSERT_TRUE(k.is_string()) << ok.body();  // exact in readers with doubles (jq, JavaScript)
    EXPECT_TRUE(n.rows.versions.count(std::stoull(k.get<std::string>()))) << k;
  }
  auto fallback = get(*n.service, "/keys?table=ads");
  ASSERT_EQ(fallback.result_int(), 200);
  EXPECT_EQ(nlohmann::json::parse(fallback.body())["keys"].size(), 10u);  // the default limit

  struct refused {
    std::string target;
    int status;
    std::string text;
  };
  for (const auto& r : {refused{"/keys", 400, "query parameter 'table' is required"},
                        refused{"/keys?table=ads&limit=0", 400, "'limit' must be 1..1000, not '0'"},
                        refused{"/keys?table=ads&limit=4294967296", 400, "not '4294967296'"},
                        refused{"/keys?table=ads&limit=1001", 400, "not '1001'"},
                        refused{"/keys?table=ads&limit=x", 400, "not 'x'"},
                        refused{"/keys?table=ads&sort=1", 400, "unknown query parameter 'sort'"},
                        refused{"/keys?table=nope", 404, "unknown table 'nope' (served: ads)"}}) {
    auto res = get(*n.service, r.target);
    EXPECT_EQ(res.result_int(), r.status) << r.target << ": " << res.body();
    EXPECT_NE(res.body().find(r.text), std::string::npos) << r.target << ": " << res.body();
  }
  auto post = get(*n.service, "/keys?table=ads", boost::beast::http::verb::post);
  EXPECT_EQ(post.result_int(), 405) << post.body();
}

TEST(MetadataRequests, CheckpointKeysAreReadOfflineFromACheckpointOrItsRoot) {
  testing::temp_dir dir;
  const fs::path root = dir.path() / "ckpts";
  const fs::path ckpt = root / "ckpt-000000000001";
  auto rows = testing::write_test_checkpoint(ckpt, "ads", dim, 50, 2);
  for (const fs::path& at : {ckpt, root}) {
    auto keys = checkpoint_keys(at, "ads", 10);
    ASSERT_TRUE(keys.has_value()) << keys.err().to_string();
    ASSERT_EQ(keys->size(), 10u);
    for (uint64_t k : *keys) EXPECT_TRUE(rows.versions.count(k)) << k;
  }
  // A limit over the rows gives every row of both shard copies once.
  auto all = checkpoint_keys(ckpt, "ads", 1000);
  ASSERT_TRUE(all.has_value()) << all.err().to_string();
  EXPECT_EQ(std::set<uint64_t>(all->begin(), all->end()),
            std::set<uint64_t>(rows.keys.begin(), rows.keys.end()));
  EXPECT_EQ(all->size(), rows.keys.size());

  auto wrong = checkpoint_keys(ckpt, "clicks", 10);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_NE(wrong.err().message().find("unknown table 'clicks' (the checkpoint holds: ads)"),
            std::string::npos)
      << wrong.err().message();
  auto empty = checkpoint_keys(dir.path() / "nothing", "ads", 10);
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.err().message().find("nothing: not a checkpoint, and no complete checkpoint"),
            std::string::npos)
      << empty.err().message();
}

}  // namespace
}  // namespace strata::serving
