#include "deploy/manifest_reader.hpp"

#include <charconv>
#include <cmath>

namespace strata::deploy::detail {

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return in_quotes(node.Scalar());
}

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::optional<uint64_t> parse_uint(std::string_view text) {
  std::string digits;
  for (char c : text)
    if (c != '_') digits += c;  // YAML-style digit groups: 400_000
  if (digits.empty() || text.front() == '_' || text.back() == '_') return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_real(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value))
    return std::nullopt;
  return value;
}

}  // namespace strata::deploy::detail
