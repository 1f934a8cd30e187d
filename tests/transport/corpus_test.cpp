// Replays the frame-decoder regression corpus (tests/fuzz/corpus/frame/,
// written by tests/fuzz/make_seeds.py, extended by fuzzer findings): every
// malformed frame is rejected with an error, every valid-* seed accepted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/transport/frame_check.hpp"

namespace strata::transport {
namespace {

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
