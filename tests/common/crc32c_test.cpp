#include "common/crc32c.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace strata {
namespace {

// Check values from RFC 3720 (iSCSI), appendix B.4, and the classic "123456789".
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  std::vector<unsigned char> zeros(32, 0x00);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  std::vector<unsigned char> ones(32, 0xff);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  std::vector<unsigned char> inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(inc.data(), inc.size()), 0x46dd794eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ExtendEqualsOneShot) {
  std::string s = "strata keeps every acknowledged update";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t a = crc32c_extend(0, s.data(), cut);
    a = crc32c_extend(a, s.data() + cut, s.size() - cut);
    EXPECT_EQ(a, crc32c(s.data(), s.size())) << cut;
  }
}

// Buffers of several 12 KiB chunks take the three-chain path in one call;
// extending 5 bytes at a time takes the single-chain path: both agree, for
// every length around the chunk boundaries and with a nonzero start.
TEST(Crc32c, StripedLargeBuffersMatchTheSerialPath) {
  std::vector<unsigned char> data(40000);
  uint32_t x = 12345;
  for (auto& b : data) {
    x = x * 1103515245u + 12345u;
    b = static_cast<unsigned char>(x >> 16);
  }
  for (size_t n : {size_t{12287}, size_t{12288}, size_t{12289}, size_t{24576 + 13}, size_t{40000}}) {
    uint32_t serial = crc32c_extend(0, "seed", 4);
    for (size_t at = 0; at < n; at += 5) serial = crc32c_extend(serial, data.data() + at, std::min<size_t>(5, n - at));
    EXPECT_EQ(crc32c_extend(crc32c_extend(0, "seed", 4), data.data(), n), serial) << n;
  }
}

TEST(Crc32c, DetectsEveryFlippedBit) {
  std::vector<unsigned char> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 37);
  const uint32_t good = crc32c(data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_NE(crc32c(data.data(), data.size()), good) << bit;
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace strata
