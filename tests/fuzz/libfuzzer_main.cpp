// libFuzzer's entry point for one fuzz target (fuzz build only): the
// target's CMake definition names its entry as STRATA_FUZZ_ENTRY.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_entries.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return STRATA_FUZZ_ENTRY(data, size);
}
