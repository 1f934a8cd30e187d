// The manifest parser (deploy/manifest.hpp) on fuzzed text: YAML syntax,
// every field's reader, the cross-field rules, then the data split as
// `strata launch` applies it once it has counted the data file's lines
// (the count is taken from the input's length, so it varies too).
#include <string_view>

#include "deploy/manifest.hpp"
#include "tests/fuzz/fuzz_entries.hpp"

int strata_fuzz_manifest(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = strata::deploy::parse_manifest(text, "fuzz.yaml");
  if (!m) return 0;
  if (!m->split_resolved) (void)strata::deploy::apply_data_split(*m, size % 5000);
  return 0;
}
