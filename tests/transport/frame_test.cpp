// The wire format and the payload codec: round trips of every message type
// and rejection of malformed, truncated, oversized and corrupted frames.
#include "transport/frame.hpp"

#include <gtest/gtest.h>

#include "actors/protocol.hpp"
#include "actors/training_protocol.hpp"
#include "transport/codec.hpp"
#include "transport/frame_payload.hpp"
#include "transport/payloads.hpp"

namespace strata::transport {
namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

frame_header request_header() {
  frame_header h;
  h.type = frame_type::shard_pull;
  h.sender = 0x1122334455667788ull;
  h.seq = 9;
  h.request_id = 42;
  h.target = 3;
  return h;
}

TEST(Frame, HeaderRoundTripsEveryField) {
  const auto payload = encode_payload(std::vector<uint64_t>{1, 2, 3});
  const auto frame = make_frame(request_header(), payload);
  ASSERT_EQ(frame.size(), frame_header_bytes + payload.size());
  auto h = decode_frame(frame);
  ASSERT_TRUE(h) << h.err().to_string();
  EXPECT_EQ(h->type, frame_type::shard_pull);
  EXPECT_EQ(h->sender, 0x1122334455667788ull);
  EXPECT_EQ(h->seq, 9u);
  EXPECT_EQ(h->request_id, 42u);
  EXPECT_EQ(h->target, 3u);
  EXPECT_EQ(h->payload_bytes, payload.size());
  EXPECT_TRUE(check_payload_value(*h, std::span(frame).subspan(frame_header_bytes)));
}

TEST(Frame, HeaderLayoutIsFixedLittleEndian) {
  auto frame = make_frame(request_header(), {});
  // magic "STRF", version 3, type 16 (docs/wire-format.md).
  EXPECT_EQ(static_cast<char>(frame[0]), 'S');
  EXPECT_EQ(static_cast<char>(frame[3]), 'F');
  EXPECT_EQ(static_cast<uint8_t>(frame[4]), 3);
  EXPECT_EQ(static_cast<uint8_t>(frame[6]), 16);
  EXPECT_EQ(static_cast<uint8_t>(frame[16]), 9);  // seq
}

TEST(Frame, RejectsTruncatedHeader) {
  auto frame = make_frame(request_header(), {});
  auto h = decode_frame(std::span(frame).first(frame_header_bytes - 1));
  ASSERT_FALSE(h);
  EXPECT_NE(h.err().message().find("truncated frame header"), std::string::npos);
}

TEST(Frame, RejectsBadMagicVersionTypeAndReserved) {
  auto base = make_frame(request_header(), {});
  auto magic = base;
  magic[0] = std::byte{'X'};
  EXPECT_NE(decode_frame(magic).err().message().find("magic"), std::string::npos);
  auto version = base;
  version[4] = std::byte{1};
  auto v = decode_frame(version);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.err().code(), errc::format_mismatch);
  auto type = base;
  type[6] = std::byte{200};
  EXPECT_NE(decode_frame(type).err().message().find("unknown frame type 200"), std::string::npos);
  auto reserved = base;
  reserved[44] = std::byte{1};
  EXPECT_NE(decode_frame(reserved).err().message().find("reserved"), std::string::npos);
}

TEST(Frame, RejectsOversizedBeforeReadingThePayload) {
  frame_header h = request_header();
  h.payload_bytes = 1000;
  std::array<std::byte, frame_header_bytes> bytes;
  encode_header(h, bytes);
  auto r = decode_header(bytes, 999);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message().find("oversized frame"), std::string::npos);
  EXPECT_TRUE(decode_header(bytes, 1000));
}

TEST(Frame, RejectsTruncatedPayloadAndEveryFlippedBit) {
  const auto payload = encode_payload(std::vector<uint64_t>{7, 8});
  const auto frame = make_frame(request_header(), payload);
  auto cut = decode_frame(std::span(frame).first(frame.size() - 1));
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.err().message().find("header says"), std::string::npos);
  for (size_t byte = 0; byte < frame.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = frame;
      bad[byte] ^= std::byte(1u << bit);
      EXPECT_FALSE(decode_frame(bad)) << "flip of byte " << byte << " bit " << bit;
    }
  }
}

TEST(Frame, ControlFramesHaveNoSeqAndDataFramesHaveOne) {
  frame_header h;
  h.type = frame_type::heartbeat;
  h.seq = 5;
  EXPECT_FALSE(decode_frame(make_frame(h, {})));
  h.type = frame_type::shard_tick;
  h.seq = 0;
  EXPECT_FALSE(decode_frame(make_frame(h, {})));
}

// Every message type of actors/protocol.hpp and training_protocol.hpp.
template <class T>
T round_trip(const T& value) {
  const auto bytes = encode_payload(value);
  T back{};
  auto s = decode_payload(bytes, back);
  EXPECT_TRUE(s) << s.err().to_string();
  return back;
}

TEST(Codec, EveryMessageTypeRoundTrips) {
  using namespace actors;
  row_batch rows{{1, 2, 3}, {9, 8, 7, 6, 5, 4}};
  auto rb = round_trip(rows);
  EXPECT_EQ(rb.keys, rows.keys);
  EXPECT_EQ(rb.records, rows.records);
  pull_reply pr{rows, {1, 0, 1}};
  EXPECT_EQ(round_trip(pr).admitted, pr.admitted);
  push_request push{{5, 6}, {1.5f, -2.f, 3.f, 4.f}, 77, 0xabcdef0123ull};
  auto pb = round_trip(push);
  EXPECT_EQ(pb.grads, push.grads);
  EXPECT_EQ(pb.epoch, 77u);
  EXPECT_EQ(pb.id, 0xabcdef0123ull);  // the push id crosses nodes (version 2)
  EXPECT_EQ(round_trip(push_reply{rows}).rows.records, rows.records);
  EXPECT_EQ(round_trip(push_ack{{3, 4}}).versions, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(round_trip(lookup_reply{rows}).rows.keys, rows.keys);
  dense_weights dw{12, {0.5f, 0.25f}};
  EXPECT_EQ(round_trip(dw).weights, dw.weights);
  tier_stats ts;
  ts.name = "shard 1";
  ts.hits = 99;
  ts.chain_hits = {1, 2, 3};
  ts.latencies.push_back(latency_snapshot{"pull", {1, 2}, 0.5});
  auto tb = round_trip(ts);
  EXPECT_EQ(tb.name, "shard 1");
  EXPECT_EQ(tb.hits, 99u);
  ASSERT_EQ(tb.latencies.size(), 1u);
  EXPECT_EQ(tb.latencies[0].counts, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(round_trip(actor_stats{"dense", 1, 5}).mailbox_depth, 5u);
  EXPECT_EQ(round_trip(progress_report{2, 3, 4, 1.5}).loss_sum, 1.5);
  worker_result wr{1, 2, 3, 4.5, 6, true};
  EXPECT_TRUE(round_trip(wr).finished);
  EXPECT_EQ(round_trip(training_summary{1, 2, 3.5, 0.25, 4, 5, 6, "ckpt-7", true}).passes, 5u);
  EXPECT_EQ(round_trip(training_summary{1, 2, 3.5, 0.25, 4, 5, 6, "ckpt-7", true}).last_checkpoint,
            "ckpt-7");
}

// A gathered payload (frame_payload.hpp) is encode_payload's bytes, its
// checksum the one seal computes over them, and its large arrays are sent
// from the message's own buffers (no copy).
TEST(Codec, GatheredPayloadIsTheEncodedBytesSentFromTheMessage) {
  using namespace actors;
  pull_reply pr;
  for (uint64_t k = 0; k < 1000; ++k) pr.rows.keys.push_back(k * 3 + 1);
  pr.rows.records.assign(1000 * 24, uint8_t{7});
  pr.admitted.assign(1000, 1);
  pr.admitted[5] = 0;
  const auto expected = encode_payload(pr);
  const void* records = pr.rows.records.data();
  const void* keys = pr.rows.keys.data();
  auto payload = gather_payload(std::move(pr));
  EXPECT_EQ(payload.size(), expected.size());
  EXPECT_EQ(payload.flatten(), expected);
  bool keys_referenced = false, records_referenced = false;
  payload.for_each_piece([&](const std::byte* p, size_t) {
    keys_referenced |= p == keys;
    records_referenced |= p == records;
  });
  EXPECT_TRUE(keys_referenced && records_referenced) << "an array was copied";
  frame_header a = request_header(), b = request_header();
  seal_pieces(a, payload);
  seal(b, expected);
  EXPECT_EQ(a.crc, b.crc);
  EXPECT_EQ(a.payload_bytes, b.payload_bytes);
  // Small arrays go inline; a value without arrays is one piece.
  auto small = gather_payload(push_request{{1, 2}, {0.5f}, 1, 2});
  EXPECT_TRUE(small.contiguous());
  EXPECT_EQ(small.flatten(), encode_payload(push_request{{1, 2}, {0.5f}, 1, 2}));
}

TEST(Codec, RejectsCountsBeyondThePayload) {
  auto bytes = encode_payload(std::vector<uint64_t>{1, 2});
  bytes[0] = std::byte{0xff};  // count 255 + high bytes: far more than 16 bytes left
  std::vector<uint64_t> keys;
  auto s = decode_payload(bytes, keys);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message().find("exceeds"), std::string::npos);
  EXPECT_LE(keys.capacity(), 2u);  // nothing allocated for the bogus count
}

TEST(Codec, RejectsTrailingBytesTruncationAndBadBools) {
  auto bytes = encode_payload(uint32_t{5});
  bytes.push_back(std::byte{0});
  uint32_t v = 0;
  EXPECT_NE(decode_payload(bytes, v).err().message().find("trailing"), std::string::npos);
  bytes.resize(2);
  EXPECT_NE(decode_payload(bytes, v).err().message().find("truncated"), std::string::npos);
  actors::training_summary ts;  // ends with a bool (stopped)
  auto wb = encode_payload(ts);
  wb.back() = std::byte{2};
  EXPECT_NE(decode_payload(wb, ts).err().message().find("bool"), std::string::npos);
}

TEST(Payloads, TypeRulesRejectMismatchedValues) {
  frame_header h = request_header();
  h.type = frame_type::shard_tick;
  EXPECT_TRUE(check_payload_value(h, encode_payload(uint32_t{3})));
  EXPECT_FALSE(check_payload_value(h, encode_payload(uint64_t{3})));
  h.type = frame_type::reply_error;
  EXPECT_TRUE(check_payload_value(h, encode_payload(std::string("node 'a': boom"))));
  EXPECT_FALSE(check_payload_value(h, bytes_of("xy")));
}

}  // namespace
}  // namespace strata::transport
