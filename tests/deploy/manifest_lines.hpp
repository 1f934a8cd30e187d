// The small valid manifest the manifest tests edit line by line (1-based,
// so the expected line numbers are plain to see), and the parse of an
// edited text as "m.yaml".
#pragma once

#include <string>
#include <vector>

#include "deploy/manifest.hpp"

namespace strata::deploy::manifest_lines {

inline const std::vector<std::string> base_lines = {
    "name: t",                 // 1
    "mode: async",             // 2
    "shards:",                 // 3
    "  count: 2",              // 4
    "  dram_bytes: 64MiB",     // 5
    "  ssd_path: /tmp/state",  // 6
    "caches:",                 // 7
    "  count: 1",              // 8
    "  staleness: 8",          // 9
    "workers:",                // 10
    "  count: 2",              // 11
    "  prefetch_depth: 2",     // 12
    "  max_in_flight: 2",      // 13
    "data:",                   // 14
    "  path: /tmp/d.tsv",      // 15
};

inline std::string text_of(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Parses `text` as "m.yaml" and returns the error message ("" if it parsed).
inline std::string error_of(const std::string& text) {
  auto m = parse_manifest(text, "m.yaml");
  return m ? std::string() : m.err().message();
}

}  // namespace strata::deploy::manifest_lines
