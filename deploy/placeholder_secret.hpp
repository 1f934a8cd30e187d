// Secrets that are not secrets: the placeholder an older `strata render k8s`
// put into the admin token's Secret, and values that plainly are one
// ("changeme", "<token>", "xxxxxxxx"). A node refuses them at start (issue
// 16 item 6): a placeholder that works as a token is a token everyone knows.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace strata::deploy {

// What `strata render k8s` wrote before it took tokens from the manifest's
// files; a Secret rendered then may still hold it.
inline constexpr const char* k8s_token_placeholder = "REPLACE-WITH-THE-ADMIN-TOKEN";

// True for a value that is a placeholder, not a secret.
inline bool looks_like_placeholder(std::string_view value) {
  std::string letters;  // lower-case letters and digits only: "Change-Me" -> "changeme"
  for (char c : value)
    if (std::isalnum(static_cast<unsigned char>(c)))
      letters += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (letters.empty()) return true;
  for (const char* word : {"replacewith", "changeme", "placeholder", "yourtoken", "yoursecret",
                           "tokenhere", "secrethere", "insert", "todo", "fixme"})
    if (letters.find(word) != std::string::npos) return true;
  if (value.size() >= 2 && value.front() == '<' && value.back() == '>') return true;
  // One character repeated ("xxxxxxxxxxxxxxxx", "0000...").
  return letters.find_first_not_of(letters.front()) == std::string::npos;
}

// The refusal, naming the field: "m.yaml: admin.token_file: /x holds a
// placeholder ...".
inline std::string placeholder_refusal(const std::string& where) {
  return where +
         " holds a placeholder, not a secret; anyone could use it. Put a random one there "
         "(e.g. `openssl rand -hex 32`)";
}

}  // namespace strata::deploy
