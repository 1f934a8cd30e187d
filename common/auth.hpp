// Membership proofs from a shared secret (issue 16; docs/deploy.md, "The
// cluster secret"): HMAC-SHA256 and fresh nonces from OpenSSL's libcrypto,
// and the one way strata reads a secret file.
//
// A challenge-response runs on top of these: the verifier sends a fresh
// nonce, the prover answers prove(secret, context, name, challenge, own)
// with a fresh nonce of its own, the verifier recomputes it. A replayed
// answer fails because the challenge differs; `context` separates the uses
// of one secret (node hello, publisher subscribe) so that an answer taken
// from one protocol proves nothing in another.
//
// Thread-safety: plain functions (OpenSSL 3's HMAC and RAND are thread-safe).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace strata::auth {

inline constexpr size_t nonce_size = 32;
inline constexpr size_t mac_size = 32;
inline constexpr size_t min_secret_bytes = 16;

using nonce = std::array<uint8_t, nonce_size>;
using mac = std::array<uint8_t, mac_size>;

// A secret's bytes (the file's text with surrounding whitespace trimmed).
struct secret {
  std::vector<uint8_t> bytes;
  bool empty() const { return bytes.empty(); }
};

// 32 bytes from the system's CSPRNG (RAND_bytes); internal error when it
// cannot deliver.
expected<nonce> fresh_nonce();

mac hmac_sha256(const secret& key, std::span<const std::byte> message);

// Constant-time comparison (CRYPTO_memcmp).
bool same_mac(const mac& a, const mac& b);

// HMAC(secret, context | name | challenge | own), each field length-prefixed
// so that no two different tuples hash the same bytes.
mac prove(const secret& key, std::string_view context, std::string_view name,
          const nonce& challenge, const nonce& own);

// Reads a secret file. Refused, with errors naming `where` and the path:
// absent (not_found), not a regular file, readable or writable by group or
// others (invalid_argument: "chmod 600 PATH"), shorter than
// min_secret_bytes after trimming (invalid_argument).
expected<secret> read_secret_file(const std::filesystem::path& file, const std::string& where);

// The same checks for a text secret (e.g. the admin token), returned as text.
expected<std::string> read_secret_text(const std::filesystem::path& file, const std::string& where);

}  // namespace strata::auth
