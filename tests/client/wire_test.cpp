// The binary protocol's frames: round trips, and every kind of damage
// rejected with an error naming the field (never trusted).
#include "client/wire.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace strata::wire {
namespace {

std::vector<std::byte> frame_of(frame_type type, const std::vector<std::byte>& payload) {
  std::vector<std::byte> out;
  append_frame(out, type, 42, payload);
  return out;
}

expected<frame_header> header_of(const std::vector<std::byte>& bytes) {
  return parse_header(std::span<const std::byte, header_bytes>(bytes.data(), header_bytes));
}

TEST(Wire, LookupAndRowsRoundTrip) {
  std::vector<std::byte> payload;
  encode(payload, key_request{"ads", {1, 2, ~uint64_t{0}}});
  auto bytes = frame_of(frame_type::lookup, payload);
  auto h = header_of(bytes);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->type, frame_type::lookup);
  EXPECT_EQ(h->request, 42u);
  const std::span<const std::byte> body(bytes.data() + header_bytes, h->length);
  ASSERT_TRUE(check_payload(*h, body).has_value());
  auto req = decode_key_request(body);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->table, "ads");
  EXPECT_EQ(req->keys, (std::vector<uint64_t>{1, 2, ~uint64_t{0}}));

  std::vector<std::byte> rows;
  encode(rows, rows_reply{2, {7, 9}, {1.5f, -0.0f, 3.0f, 4.0f}});
  auto r = decode_rows(rows);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->dim, 2u);
  EXPECT_EQ(r->versions, (std::vector<uint64_t>{7, 9}));
  EXPECT_TRUE(std::signbit(r->weights[1]));
}

TEST(Wire, UpdatesAndSubscribeRoundTrip) {
  std::vector<std::byte> payload;
  encode(payload, update_batch{"ads", 5, 77, 1, {3, 4}, {10, 11}, {0.5f, 0.25f}});
  auto u = decode_updates(payload);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->stream, 5u);
  EXPECT_EQ(u->seq, 77u);
  EXPECT_EQ(u->keys, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(u->weights, (std::vector<float>{0.5f, 0.25f}));
  payload.clear();
  encode(payload, subscribe_request{"ads", 5, 76});
  auto s = decode_subscribe(payload);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->after_seq, 76u);
}

// The subscribe handshake's frames (docs/serving.md, "Online updates"): the
// nonces and proofs round trip; a subscribe without its nonce (a subscriber
// from before authentication) and a short proof are errors naming the field.
TEST(Wire, SubscribeHandshakeFramesRoundTripAndRefuseMissingBytes) {
  auth_bytes a{}, b{};
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = uint8_t(i);
    b[i] = uint8_t(255 - i);
  }
  std::vector<std::byte> payload;
  encode(payload, subscribe_request{"ads", 5, 76, a});
  auto s = decode_subscribe(payload);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->nonce, a);
  payload.resize(payload.size() - 32);  // the old layout: no nonce
  auto old = decode_subscribe(payload);
  ASSERT_FALSE(old.has_value());
  EXPECT_NE(old.err().message().find("nonce"), std::string::npos) << old.err().message();
  payload.clear();
  encode(payload, challenge_frame{a, b});
  auto c = decode_challenge(payload);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->nonce, a);
  EXPECT_EQ(c->proof, b);
  payload.clear();
  encode(payload, proof_frame{b});
  auto p = decode_proof(payload);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->proof, b);
  payload.pop_back();
  auto short_proof = decode_proof(payload);
  ASSERT_FALSE(short_proof.has_value());
  EXPECT_NE(short_proof.err().message().find("proof"), std::string::npos);
  payload.clear();
  encode(payload, proof_frame{b});
  payload.push_back(std::byte{0});
  EXPECT_FALSE(decode_proof(payload).has_value());  // trailing bytes
}

TEST(Wire, DamagedHeadersAreRejectedNamingTheField) {
  std::vector<std::byte> payload;
  encode(payload, key_request{"ads", {1}});
  auto good = frame_of(frame_type::lookup, payload);
  {
    auto bad = good;
    bad[0] = std::byte{0};
    auto h = header_of(bad);
    ASSERT_FALSE(h.has_value());
    EXPECT_NE(h.err().message().find("magic"), std::string::npos);
  }
  {
    auto bad = good;
    bad[4] = std::byte{9};
    auto h = header_of(bad);
    ASSERT_FALSE(h.has_value());
    EXPECT_EQ(h.err().code(), errc::format_mismatch);
    EXPECT_NE(h.err().message().find("wire version 9"), std::string::npos);
  }
  {
    auto bad = good;
    bad[6] = std::byte{99};
    auto h = header_of(bad);
    ASSERT_FALSE(h.has_value());
    EXPECT_NE(h.err().message().find("unknown frame type 99"), std::string::npos);
  }
  {
    auto h = parse_header(std::span<const std::byte, header_bytes>(good.data(), header_bytes), 4);
    ASSERT_FALSE(h.has_value());
    EXPECT_EQ(h.err().code(), errc::capacity_exceeded);
  }
}

TEST(Wire, FlippedPayloadBitFailsTheChecksum) {
  std::vector<std::byte> payload;
  encode(payload, key_request{"ads", {1, 2}});
  auto bytes = frame_of(frame_type::lookup, payload);
  bytes[header_bytes + 7] ^= std::byte{0x10};
  auto h = header_of(bytes);
  ASSERT_TRUE(h.has_value());
  auto ok = check_payload(*h, std::span<const std::byte>(bytes).subspan(header_bytes));
  ASSERT_FALSE(ok.has_value());
  EXPECT_NE(ok.err().message().find("CRC32C"), std::string::npos);
}

TEST(Wire, PushRoundTripAndDamageIsRejected) {
  const std::vector<uint64_t> keys = {5, 6};
  const std::vector<float> grads = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<std::byte> payload;
  encode_push(payload, "ads", 2, keys, grads);
  auto bytes = frame_of(frame_type::push, payload);
  auto h = header_of(bytes);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->type, frame_type::push);
  auto p = decode_push(payload);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->table, "ads");
  EXPECT_EQ(p->dim, 2u);
  EXPECT_EQ(p->keys, keys);
  EXPECT_EQ(p->grads, grads);
  // Fewer gradients than n x dim: refused naming the field.
  auto cut = decode_push(std::span<const std::byte>(payload).first(payload.size() - 4));
  ASSERT_FALSE(cut.has_value());
  EXPECT_NE(cut.err().message().find("'grads'"), std::string::npos) << cut.err().message();
}

// The optional push id (issue 15 item 5): 8 bytes after the gradients;
// without them (older clients) the id is 0, "none".
TEST(Wire, APushCarriesItsIdOrNone) {
  const std::vector<uint64_t> keys = {5, 6};
  const std::vector<float> grads = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<std::byte> plain, with_id;
  encode_push(plain, "ads", 2, keys, grads);
  encode_push(with_id, "ads", 2, keys, grads, 0x1122334455667788ull);
  ASSERT_EQ(with_id.size(), plain.size() + 8);
  auto p = decode_push(plain);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->id, 0u);
  auto q = decode_push(with_id);
  ASSERT_TRUE(q.has_value()) << q.err().message();
  EXPECT_EQ(q->id, 0x1122334455667788ull);
  EXPECT_EQ(q->keys, keys);
  EXPECT_EQ(q->grads, grads);
  // An id of 0 written out, a short id, or bytes after it: refused by name.
  auto zero = plain;
  zero.resize(plain.size() + 8, std::byte{0});
  auto z = decode_push(zero);
  ASSERT_FALSE(z.has_value());
  EXPECT_NE(z.err().message().find("'id"), std::string::npos) << z.err().message();
  auto s = decode_push(std::span<const std::byte>(with_id).first(with_id.size() - 3));
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.err().message().find("'id'"), std::string::npos) << s.err().message();
  auto longer = with_id;
  longer.push_back(std::byte{1});
  auto l = decode_push(longer);
  ASSERT_FALSE(l.has_value());
  EXPECT_NE(l.err().message().find("'end'"), std::string::npos) << l.err().message();
}

TEST(Wire, TruncatedOrOverlongPayloadsAreRejected) {
  std::vector<std::byte> payload;
  encode(payload, key_request{"ads", {1, 2, 3}});
  auto cut = decode_key_request(std::span<const std::byte>(payload).first(payload.size() - 3));
  ASSERT_FALSE(cut.has_value());
  EXPECT_NE(cut.err().message().find("'keys'"), std::string::npos);
  auto longer = payload;
  longer.push_back(std::byte{0});
  auto extra = decode_key_request(longer);
  ASSERT_FALSE(extra.has_value());
  EXPECT_NE(extra.err().message().find("'end'"), std::string::npos);
  // A key count far beyond the bytes present is refused, not allocated.
  std::vector<std::byte> lying;
  writer w(lying);
  w.text16("ads");
  w.u32(0xffffffffu);
  auto huge = decode_key_request(lying);
  ASSERT_FALSE(huge.has_value());
}

}  // namespace
}  // namespace strata::wire
