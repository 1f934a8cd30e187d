// The sanitizer runtime of this (test) process as an `LD_PRELOAD=... `
// prefix for a shell command that starts an uninstrumented interpreter
// (/usr/bin/python3) which loads one of our instrumented modules (the
// strata_client Python module of a sanitizer build, tests/sanitize/run.sh).
// An ASan or TSan runtime must be the first library of a process: a module
// that brings it in by dlopen aborts the interpreter ("ASan runtime does not
// come first in initial library list"). Empty without a sanitizer, so the
// command is unchanged in normal builds. Thread-safe; allocates the string.
#pragma once

#include <link.h>

#include <string>
#include <string_view>

namespace strata::testing {

inline std::string sanitizer_preload() {
  std::string runtime;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string_view name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("/libasan.so") == std::string_view::npos &&
            name.find("/libtsan.so") == std::string_view::npos)
          return 0;
        *static_cast<std::string*>(out) = std::string(name);
        return 1;
      },
      &runtime);
  return runtime.empty() ? std::string() : "LD_PRELOAD=" + runtime + " ";
}

}  // namespace strata::testing
