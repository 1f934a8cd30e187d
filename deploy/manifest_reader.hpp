// The YAML reading layer of the manifest parser (deploy/manifest.cpp and
// its manifest_*.cpp pieces; not a public API): `diagnostics` collects every
// error of one file as "file:line: field.path: what", and `section` reads
// the fields of one YAML mapping by name, reporting bad values and, in
// finish(), every key no reader asked for.
//
// A section borrows its diagnostics (which must outlive it) and holds
// yaml-cpp nodes by value (they share the parsed document). Plain objects
// of one parse on one thread; not thread-safe.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "deploy/manifest.hpp"

namespace strata::deploy::detail {

// `s` in double quotes, for messages.
std::string in_quotes(std::string_view s);

// What a node holds, for "expected X, got Y" messages.
std::string describe(const YAML::Node& node);

// "parent.key" ("key" at the top).
std::string join_path(const std::string& parent, std::string_view key);

// Collects every error of one file; remembers where each field was written
// so cross-field rules can point at it.
class diagnostics {
 public:
  explicit diagnostics(std::string file) : file_(std::move(file)) {}

  void fail(const YAML::Mark& mark, const std::string& path, const std::string& what) {
    if (checking_rules_ && about_a_failed_field(path, what)) return;
    if (!checking_rules_) failed_fields_.push_back(path);
    std::string line = file_;
    line += ":" + std::to_string(mark.is_null() ? 1 : mark.line + 1) + ": ";
    if (!path.empty()) line += path + ": ";
    line += what;
    errors_.emplace_back(mark.is_null() ? 0 : mark.line, std::move(line));
  }
  // Fails at the field `path` if it was written, else at its closest
  // written parent section.
  void fail_at(const std::string& path, const std::string& what) {
    fail(mark_of(path), path, what);
  }

  void remember(const std::string& path, const YAML::Mark& mark) { marks_.emplace(path, mark); }
  bool written(const std::string& path) const { return marks_.count(path) != 0; }
  YAML::Mark mark_of(std::string path) const {
    for (;;) {
      if (auto it = marks_.find(path); it != marks_.end()) return it->second;
      const auto dot = path.rfind('.');
      if (dot == std::string::npos) return marks_.count("") ? marks_.at("") : YAML::Mark();
      path.resize(dot);
    }
  }
  bool ok() const { return errors_.empty(); }

  // From here on, errors are the rules between fields, reported in the same
  // run as the field errors. A rule error at a field that failed to parse,
  // or naming one, is left out: the rule saw that field's default, not
  // what the file says.
  void begin_rules() { checking_rules_ = true; }
  error to_error() const {
    auto sorted = errors_;  // by line, then in the order found
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string message;
    for (const auto& [line, text] : sorted) {
      if (!message.empty()) message += '\n';
      message += text;
    }
    return error(errc::invalid_argument, message);
  }

 private:
  // `path` is a failed field, inside one or holds one; or `what` names one.
  bool about_a_failed_field(const std::string& path, const std::string& what) const {
    const auto nested = [](const std::string& inner, const std::string& outer) {
      return inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
             (inner[outer.size()] == '.' || inner[outer.size()] == '[');
    };
    for (const auto& f : failed_fields_) {
      if (f.empty() || path == f || nested(path, f) || nested(f, path)) return true;
      if (f.find('.') != std::string::npos && what.find(f) != std::string::npos) return true;
    }
    return false;
  }

  std::string file_;
  bool checking_rules_ = false;
  std::vector<std::string> failed_fields_;  // paths of the field errors
  std::vector<std::pair<int, std::string>> errors_;  // (0-based line, message)
  std::map<std::string, YAML::Mark> marks_;
};

// A whole number (YAML-style digit groups allowed: 400_000); nullopt if not.
std::optional<uint64_t> parse_uint(std::string_view text);
// A finite real number; nullopt if not.
std::optional<double> parse_real(std::string_view text);

// The key of `known` a typo of `key` most likely meant: the one fewest
// edits away (insertions, deletions, substitutions, swaps of neighbours),
// if that is at most 2 and at most a third of the key; "" otherwise.
std::string closest_key(std::string_view key, const std::set<std::string, std::less<>>& known);

template <class E>
using choices = std::vector<std::pair<std::string_view, E>>;

template <class E>
std::string list_choices(const choices<E>& options) {
  std::string out;
  for (const auto& [name, value] : options) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

// One YAML mapping of the manifest. Fields are read by name; whatever key
// was never asked for is reported by finish() as unknown.
class section {
 public:
  section(diagnostics& diag, YAML::Node node, std::string path, YAML::Mark mark)
      : diag_(diag), path_(std::move(path)), mark_(mark) {
    if (!node.IsDefined() || node.IsNull()) return;
    if (!node.IsMap()) {
      diag_.fail(node.Mark(), path_, "expected a mapping of fields, got " + describe(node));
      return;
    }
    node_ = node;
    is_map_ = true;
    std::set<std::string> seen;
    for (const auto& entry : node_) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        diag_.fail(key.Mark(), path_, "keys must be plain names, got " + describe(key));
        continue;
      }
      if (!seen.insert(key.Scalar()).second)
        diag_.fail(key.Mark(), join_path(path_, key.Scalar()), "duplicate key");
    }
  }

  diagnostics& diag() { return diag_; }
  std::string path_of(std::string_view key) const { return join_path(path_, key); }

  // The value of `key` and the mark of the key, or nullopt if absent.
  std::optional<std::pair<YAML::Node, YAML::Mark>> find(std::string_view key) {
    known_.emplace(key);
    if (!is_map_) return std::nullopt;
    for (const auto& entry : node_) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) {
        diag_.remember(path_of(key), entry.first.Mark());
        return std::make_pair(entry.second, entry.first.Mark());
      }
    }
    return std::nullopt;
  }
  bool has(std::string_view key) {
    known_.emplace(key);
    return find(key).has_value();
  }
  void require(std::string_view key) {
    if (!has(key)) diag_.fail(mark_, path_of(key), "required field missing");
  }

  section child(std::string_view key) {
    auto found = find(key);
    if (!found) return section(diag_, YAML::Node(), path_of(key), mark_);
    return section(diag_, found->first, path_of(key), found->second);
  }

  // Each reader leaves `out` alone when the key is absent or the value is
  // bad (and reports the latter).
  template <class T>
  void unsigned_int(std::string_view key, T& out, uint64_t min = 0,
                    uint64_t max = std::numeric_limits<T>::max()) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      const auto value = parse_uint(text);
      if (!value) {
        diag_.fail(mark, path, "expected a whole number, got " + in_quotes(text));
      } else if (*value < min || *value > max) {
        diag_.fail(
            mark, path,
            "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + text);
      } else {
        out = static_cast<T>(*value);
      }
    });
  }

  // A real number in [min, max] (or (min, max] when min_exclusive).
  template <class T>
  void real(std::string_view key, T& out, double min, double max, bool min_exclusive = false,
            bool max_exclusive = false) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      const auto value = parse_real(text);
      if (!value) {
        diag_.fail(mark, path, "expected a number, got " + in_quotes(text));
        return;
      }
      const bool low = min_exclusive ? *value <= min : *value < min;
      const bool high = max_exclusive ? *value >= max : *value > max;
      if (low || high) {
        std::ostringstream range;
        range << (min_exclusive ? "(" : "[") << min << ", " << max << (max_exclusive ? ")" : "]");
        diag_.fail(mark, path, "must be in " + range.str() + ", got " + text);
        return;
      }
      out = static_cast<T>(*value);
    });
  }

  void size(std::string_view key, size_t& out) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      auto value = parse_size(text);
      if (!value)
        diag_.fail(mark, path, "expected a size like 64MiB, got " + in_quotes(text));
      else
        out = static_cast<size_t>(*value);
    });
  }

  void boolean(std::string_view key, bool& out) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      if (text == "true")
        out = true;
      else if (text == "false")
        out = false;
      else
        diag_.fail(mark, path, "expected true or false, got " + in_quotes(text));
    });
  }

  void text(std::string_view key, std::string& out) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      if (text.empty())
        diag_.fail(mark, path, "must not be empty");
      else
        out = text;
    });
  }

  void path_value(std::string_view key, std::filesystem::path& out) {
    std::string s;
    text(key, s);
    if (!s.empty()) out = s;
  }

  template <class E>
  void choice(std::string_view key, E& out, const choices<E>& options) {
    scalar(key, [&](const std::string& text, const YAML::Mark& mark, const std::string& path) {
      for (const auto& [name, value] : options)
        if (name == text) {
          out = value;
          return;
        }
      diag_.fail(mark, path,
                 "expected one of " + list_choices(options) + ", got " + in_quotes(text));
    });
  }

  // A list of scalars, each parsed by `item(text, mark, path) -> bool`.
  template <class F>
  bool list(std::string_view key, F&& item) {
    auto found = find(key);
    if (!found) return false;
    const auto& [node, mark] = *found;
    const std::string path = path_of(key);
    if (!node.IsSequence()) {
      diag_.fail(mark, path, "expected a list like [a, b], got " + describe(node));
      return false;
    }
    bool all_ok = true;
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      if (!node[i].IsScalar()) {
        diag_.fail(node[i].Mark(), item_path, "expected a value, got " + describe(node[i]));
        all_ok = false;
        continue;
      }
      all_ok = item(node[i].Scalar(), node[i].Mark(), item_path) && all_ok;
    }
    return all_ok;
  }

  // A list of mappings: `item(section, index)` for each (a section of its
  // own, so unknown keys are named with their index).
  template <class F>
  bool sections(std::string_view key, F&& item) {
    auto found = find(key);
    if (!found) return false;
    const auto& [node, mark] = *found;
    const std::string path = path_of(key);
    if (!node.IsSequence()) {
      diag_.fail(mark, path, "expected a list of mappings, got " + describe(node));
      return false;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      item(section(diag_, node[i], item_path, node[i].Mark()), i, node[i].Mark());
    }
    return true;
  }
  // The raw node of `key` (marked as known), for values of several shapes.
  std::optional<std::pair<YAML::Node, YAML::Mark>> raw(std::string_view key) { return find(key); }

  // Reports every key that no reader asked for.
  void finish() {
    if (!is_map_) return;
    for (const auto& entry : node_) {
      if (!entry.first.IsScalar() || known_.count(entry.first.Scalar())) continue;
      std::string expected;
      for (const auto& k : known_) expected += (expected.empty() ? "" : ", ") + k;
      // A typo names the key it most likely meant, ahead of the full list.
      const std::string near = closest_key(entry.first.Scalar(), known_);
      diag_.fail(entry.first.Mark(), path_of(entry.first.Scalar()),
                 "unknown key" + (near.empty() ? "" : ", did you mean '" + near + "'?") +
                     " (expected one of: " + expected + ")");
    }
  }

 private:
  template <class F>
  void scalar(std::string_view key, F&& parse) {
    auto found = find(key);
    if (!found) return;
    const auto& [node, mark] = *found;
    const std::string path = path_of(key);
    if (!node.IsScalar()) {
      diag_.fail(mark, path, "expected a value, got " + describe(node));
      return;
    }
    parse(node.Scalar(), mark, path);
  }

  diagnostics& diag_;
  YAML::Node node_;
  bool is_map_ = false;
  std::string path_;
  YAML::Mark mark_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace strata::deploy::detail
