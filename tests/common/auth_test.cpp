#include "common/auth.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace strata;

namespace {

fs::path write_file(const std::string& name, const std::string& text, mode_t mode) {
  const auto p = fs::temp_directory_path() / ("strata-auth-test-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p) << text;
  ::chmod(p.c_str(), mode);
  return p;
}

}  // namespace

// RFC 4231 test case 2: key "Jefe", "what do ya want for nothing?".
TEST(Auth, HmacSha256MatchesRfc4231) {
  auth::secret key{{'J', 'e', 'f', 'e'}};
  const std::string msg = "what do ya want for nothing?";
  const auto mac = auth::hmac_sha256(key, std::as_bytes(std::span(msg)));
  const uint8_t want[] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                          0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                          0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  EXPECT_TRUE(std::equal(mac.begin(), mac.end(), std::begin(want)));
}

TEST(Auth, ProofDependsOnEveryField) {
  auth::secret key{std::vector<uint8_t>(32, 7)};
  auto a = auth::fresh_nonce(), b = auth::fresh_nonce();
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  const auto base = auth::prove(key, "hello", "n1", *a, *b);
  EXPECT_TRUE(auth::same_mac(base, auth::prove(key, "hello", "n1", *a, *b)));
  EXPECT_FALSE(auth::same_mac(base, auth::prove(key, "subscribe", "n1", *a, *b)));
  EXPECT_FALSE(auth::same_mac(base, auth::prove(key, "hello", "n2", *a, *b)));
  EXPECT_FALSE(auth::same_mac(base, auth::prove(key, "hello", "n1", *b, *b)));
  // Length prefixes: moving a byte between context and name changes the proof.
  EXPECT_FALSE(auth::same_mac(auth::prove(key, "ab", "c", *a, *b), auth::prove(key, "a", "bc", *a, *b)));
  auth::secret other{std::vector<uint8_t>(32, 8)};
  EXPECT_FALSE(auth::same_mac(base, auth::prove(other, "hello", "n1", *a, *b)));
}

TEST(Auth, SecretFileIsTrimmedAndChecked) {
  const auto good = write_file("good", "  0123456789abcdef0123\n", 0600);
  auto s = auth::read_secret_text(good, "cluster_secret.file");
  ASSERT_TRUE(s) << s.err().message();
  EXPECT_EQ(*s, "0123456789abcdef0123");

  const auto open = write_file("open", "0123456789abcdef0123\n", 0644);
  auto refused = auth::read_secret_file(open, "cluster_secret.file");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message().find("chmod 600"), std::string::npos) << refused.err().message();
  EXPECT_NE(refused.err().message().find(open.string()), std::string::npos);

  const auto shortf = write_file("short", "abc\n", 0600);
  auto too_short = auth::read_secret_file(shortf, "cluster_secret.file");
  ASSERT_FALSE(too_short);
  EXPECT_NE(too_short.err().message().find("at least 16"), std::string::npos);

  auto absent = auth::read_secret_file("/nonexistent/secret", "cluster_secret.file");
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.err().code(), errc::not_found);
  auto device = auth::read_secret_file("/dev/zero", "cluster_secret.file");
  ASSERT_FALSE(device);
  for (const auto& p : {good, open, shortf}) fs::remove(p);
}
