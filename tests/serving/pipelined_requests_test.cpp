// The binary lookup port with pipelined requests: a client writes several
// frames before it reads any reply, and gets every reply, in order, each
// with its request's id and rows (a failing request in the middle answers
// with its error and the rest still come). And many such clients at once,
// each connection on its own I/O thread, every one getting its own rows.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

#include "client/client.hpp"
#include "client/frame_socket.hpp"
#include "serving/binary_server.hpp"
#include "serving/service.hpp"
#include "tests/serving/serving_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::serving {
namespace {

constexpr uint32_t dim = 8;

using pipelined_node = testing::served_test_table;

// One lookup frame of `keys` in `table`, appended to `out`.
void append_lookup(std::vector<std::byte>& out, uint64_t id, const std::string& table,
                   const std::vector<uint64_t>& keys) {
  std::vector<std::byte> payload;
  wire::encode(payload, wire::key_request{table, keys});
  wire::append_frame(out, wire::frame_type::lookup, id, payload);
}

void expect_rows(const testing::checkpoint_rows& rows, const std::vector<uint64_t>& keys,
                 const wire::rows_reply& r, uint64_t id) {
  ASSERT_EQ(r.dim, dim) << "request " << id;
  ASSERT_EQ(r.versions.size(), keys.size()) << "request " << id;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = rows.weights.find(keys[i]);
    ASSERT_NE(it, rows.weights.end());
    EXPECT_EQ(r.versions[i], rows.versions.at(keys[i])) << "request " << id << " key " << keys[i];
    EXPECT_EQ(std::memcmp(&r.weights[i * dim], it->second.data(), dim * 4), 0)
        << "request " << id << " key " << keys[i];
  }
}

// Writes `depth` lookups (request ids first_id..) in one write, then reads
// the replies; request number `bad` (if < depth) names an unknown table.
void pipeline_round(const pipelined_node& n, wire::frame_socket& s, std::mt19937_64& rng,
                    uint64_t first_id, size_t depth, size_t bad) {
  std::vector<std::vector<uint64_t>> batches(depth);
  std::vector<std::byte> frames;
  for (size_t i = 0; i < depth; ++i) {
    batches[i].resize(1 + rng() % 300);
    for (auto& k : batches[i]) k = n.rows.keys[rng() % n.rows.keys.size()];
    append_lookup(frames, first_id + i, i == bad ? "no_such_table" : "ads", batches[i]);
  }
  ASSERT_TRUE(s.send_raw(frames).has_value());
  wire::frame f;
  wire::rows_reply r;
  for (size_t i = 0; i < depth; ++i) {
    auto ok = s.receive_rows_into(f, r);
    ASSERT_TRUE(ok.has_value()) << "reply " << i << ": " << ok.err().to_string();
    ASSERT_EQ(f.header.request, first_id + i) << "replies out of order";
    if (i == bad) {
      ASSERT_EQ(f.header.type, wire::frame_type::error);
      auto e = wire::decode_error(f.payload);
      ASSERT_TRUE(e.has_value());
      EXPECT_NE(e->message.find("no_such_table"), std::string::npos) << e->message;
      continue;
    }
    ASSERT_EQ(f.header.type, wire::frame_type::rows) << "request " << first_id + i;
    expect_rows(n.rows, batches[i], r, first_id + i);
  }
}

TEST(ServingPipelining, SeveralRequestsWrittenBeforeAnyReplyAreAnsweredInOrder) {
  pipelined_node n(dim);
  auto s = wire::frame_socket::connect({"127.0.0.1", n.binary->port()});
  ASSERT_TRUE(s.has_value()) << s.err().to_string();
  std::mt19937_64 rng(7);
  uint64_t id = 1;
  for (size_t depth : {2, 8, 32}) {
    pipeline_round(n, *s, rng, id, depth, depth);  // all good
    id += depth;
    pipeline_round(n, *s, rng, id, depth, depth / 2);  // one bad in the middle
    id += depth;
  }
  EXPECT_EQ(n.binary->stats().open, 1u);
}

TEST(ServingPipelining, ConcurrentPipelinedClientsEachGetTheirOwnRows) {
  pipelined_node n(dim);
  constexpr int clients = 8;
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      auto s = wire::frame_socket::connect({"127.0.0.1", n.binary->port()});
      ASSERT_TRUE(s.has_value()) << s.err().to_string();
      std::mt19937_64 rng(100 + t);
      uint64_t id = uint64_t(t) << 32;  // ids of one client never match another's
      for (int round = 0; round < 10; ++round) {
        pipeline_round(n, *s, rng, id, 4 + round % 5, round % 3 == 0 ? 1 : 99);
        id += 16;
      }
      ++done;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), clients);
}

// The client's pipelined lookups: every batch's rows, in order, at each
// window depth; a refused batch (over max_request_keys) in the middle
// fails the call naming it, and the client keeps working afterwards.
TEST(ServingPipelining, ClientLookupPipelinedReturnsEveryBatchInOrder) {
  pipelined_node n(dim);
  auto c = client::serving_client::connect({{{"127.0.0.1", n.binary->port()}}});
  ASSERT_TRUE(c.has_value()) << c.err().to_string();
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> batches(40);
  for (auto& b : batches) {
    b.resize(rng() % 1500);  // up to 12 KB a request: the byte window binds too
    for (auto& k : b) k = n.rows.keys[rng() % n.rows.keys.size()];
  }
  for (size_t depth : {1, 2, 8, 64}) {
    size_t next = 0;
    auto ok = c->lookup_pipelined(
        "ads", batches,
        [&](size_t i, const client::rows& r) -> status {
          EXPECT_EQ(i, next++);
          wire::rows_reply copy = r;
          expect_rows(n.rows, batches[i], copy, i);
          return {};
        },
        depth);
    ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
    EXPECT_EQ(next, batches.size()) << "depth " << depth;
  }
  batches[5].assign(5000, n.rows.keys[0]);  // the service allows 4096 keys
  size_t answered = 0;
  auto refused = c->lookup_pipelined(
      "ads", batches, [&](size_t, const client::rows&) -> status {
        ++answered;
        return {};
      }, 8);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.err().message().find("max_request_keys"), std::string::npos)
      << refused.err().message();
  EXPECT_EQ(answered, 5u);
  auto after = c->lookup("ads", batches[0]);
  ASSERT_TRUE(after.has_value()) << after.err().to_string();
  expect_rows(n.rows, batches[0], *after, 0);
}

}  // namespace
}  // namespace strata::serving
