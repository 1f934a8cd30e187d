// Replays the frame-decoder regression corpus (tests/fuzz/corpus/frame/,
// written by tests/fuzz/make_seeds.py, extended by fuzzer findings): every
// malformed frame is rejected with an error, every valid-* seed accepted.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/transport/frame_check.hpp"
#include "transport/codec.hpp"

namespace strata::transport {
namespace {

// A message element 8 bytes on the wire but 80 bytes in memory.
struct wide_element {
  uint64_t key = 0;
  std::string name;                   // 8 bytes when empty
  std::vector<float> values;          // 8 bytes when empty
  std::array<uint64_t, 5> padding{};  // not encoded: memory only
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wide_element& x) {
  return f(x.key, x.name, x.values);
}

TEST(Codec, CraftedStructCountAllocatesNoMoreThanThePayloadCouldFill) {
  // A count of 4096 elements with 4096 bytes behind it: each element takes
  // at least 24 bytes, so the count cannot fit; rejected before resize
  // allocates 4096 * sizeof(wide_element).
  std::vector<std::byte> payload(8 + 4096);
  const uint64_t count = 4096;
  std::memcpy(payload.data(), &count, sizeof count);
  std::vector<wide_element> out;
  auto s = decode_payload(payload, out);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message().find("count 4096 at offset 0 exceeds the 4096 bytes left"),
            std::string::npos)
      << s.err().message();
  EXPECT_EQ(out.capacity(), 0u);
  // Strings in a vector: 8 bytes each at least.
  std::vector<std::string> names;
  EXPECT_FALSE(decode_payload(payload, names));
  EXPECT_EQ(names.capacity(), 0u);
  // A count that fits still decodes.
  std::vector<wide_element> two(2);
  two[1].name = "k";
  two[1].values = {1.5f};
  std::vector<wide_element> back;
  ASSERT_TRUE(decode_payload(encode_payload(two), back));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].name, "k");
  EXPECT_EQ(back[1].values, std::vector<float>{1.5f});
}

std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Not memcpy: an empty file's data() is null, and memcpy(null, null, 0)
  // is undefined (UBSan, make asan).
  const auto* bytes = reinterpret_cast<const std::byte*>(chars.data());
  return std::vector<std::byte>(bytes, bytes + chars.size());
}

TEST(FrameCorpus, MalformedFramesAreRejectedValidSeedsAccepted) {
  size_t malformed = 0, valid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(STRATA_FRAME_CORPUS)) {
    const auto name = entry.path().filename().string();
    const auto result = check_whole_frame(read_file(entry.path()));
    if (name.rfind("valid-", 0) == 0) {
      EXPECT_TRUE(result) << name << ": " << result.err().to_string();
      ++valid;
    } else {
      EXPECT_FALSE(result) << name << " was accepted";
      if (!result) {
        EXPECT_FALSE(result.err().message().empty()) << name;
      }
      ++malformed;
    }
  }
  EXPECT_GE(malformed, 16u);
  EXPECT_GE(valid, 4u);
}

}  // namespace
}  // namespace strata::transport
