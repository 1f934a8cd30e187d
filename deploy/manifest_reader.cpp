#include "deploy/manifest_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

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

namespace {

// Optimal string alignment distance (Levenshtein with adjacent swaps).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_key(std::string_view key, const std::set<std::string, std::less<>>& known) {
  const size_t limit = std::min<size_t>(2, std::max<size_t>(1, key.size() / 3));
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& k : known) {  // sorted: of equally close keys, the first
    const size_t d = edit_distance(key, k);
    if (d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  return best;
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
