#include "common/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "common/regular_file.hpp"

namespace strata::auth {

expected<nonce> fresh_nonce() {
  nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    return error(errc::unavailable, "no random bytes from the system (RAND_bytes failed)");
  return n;
}

mac hmac_sha256(const secret& key, std::span<const std::byte> message) {
  mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.bytes.data(), static_cast<int>(key.bytes.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &len);
  return out;
}

bool same_mac(const mac& a, const mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

mac prove(const secret& key, std::string_view context, std::string_view name,
          const nonce& challenge, const nonce& own) {
  std::vector<std::byte> msg;
  auto put = [&](const void* p, size_t n) {
    const uint32_t len = static_cast<uint32_t>(n);
    const auto* l = reinterpret_cast<const std::byte*>(&len);
    msg.insert(msg.end(), l, l + sizeof len);
    const auto* b = static_cast<const std::byte*>(p);
    msg.insert(msg.end(), b, b + n);
  };
  put(context.data(), context.size());
  put(name.data(), name.size());
  put(challenge.data(), challenge.size());
  put(own.data(), own.size());
  return hmac_sha256(key, msg);
}

expected<std::string> read_secret_text(const std::filesystem::path& file, const std::string& where) {
  auto fd = open_regular_file(file, where);
  if (!fd) return fd.err();
  struct stat st{};
  if (::fstat(*fd, &st) != 0 || (st.st_mode & 077) != 0) {
    ::close(*fd);
    return error(errc::invalid_argument,
                 where + ": " + file.string() +
                     " is readable or writable by others; a secret must be the owner's alone "
                     "(chmod 600 " + file.string() + ")");
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(*fd, buf, sizeof buf);
    if (n < 0) {
      const int saved = errno;
      ::close(*fd);
      return error(errc::io_error,
                   where + ": cannot read " + file.string() + ": " + std::strerror(saved));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > 64 * 1024) {
      ::close(*fd);
      return error(errc::invalid_argument,
                   where + ": " + file.string() + " is over 64 KiB; a secret is a short line");
    }
  }
  ::close(*fd);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t first = 0;
  while (first < text.size() && std::isspace(static_cast<unsigned char>(text[first]))) ++first;
  text.erase(0, first);
  if (text.size() < min_secret_bytes)
    return error(errc::invalid_argument,
                 where + ": " + file.string() + " holds " + std::to_string(text.size()) +
                     " characters; a secret needs at least " + std::to_string(min_secret_bytes) +
                     " (e.g. `openssl rand -hex 32 > " + file.string() + "`)");
  return text;
}

expected<secret> read_secret_file(const std::filesystem::path& file, const std::string& where) {
  auto text = read_secret_text(file, where);
  if (!text) return text.err();
  secret s;
  s.bytes.assign(text->begin(), text->end());
  return s;
}

}  // namespace strata::auth
