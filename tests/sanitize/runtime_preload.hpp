// The sanitizer runtime of this (test) process as an `LD_PRELOAD=... `
// prefix for a shell command that starts an uninstrumented interpreter
// (/usr/bin/python3) which loads one of our instrumented modules (the
// strata_client Python module of a sanitizer build, tests/sanitize/run.sh).
// An ASan or TSan runtime must be the first library of a process: a module
// that brings it in by dlopen aborts the interpreter ("ASan runtime does not
// come first in initial library list"). Empty without a sanitizer, so the
// command is unchanged in normal builds. Under ASan the interpreter's
// LeakSanitizer is off: CPython and numpy do not free their heap at exit, so
// it would report thousands of allocations that are not ours (the module's
// own leaks are then not checked there; its C++ code is checked by the other
// tests through the client library). Thread-safe; allocates the string.
#pragma once

#include <link.h>

#include <string>
#include <string_view>

namespace strata::testing {

inline std::string sanitizer_preload() {
  // The runtime, and libstdc++ after it: the runtime resolves its
  // __cxa_throw interceptor at start-up, before the interpreter (a C
  // program) would load libstdc++ with the module.
  struct libraries {
    std::string runtime, cxx;
  } found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string_view name = info->dlpi_name ? info->dlpi_name : "";
        auto& f = *static_cast<libraries*>(out);
        if (name.find("/libasan.so") != std::string_view::npos ||
            name.find("/libtsan.so") != std::string_view::npos)
          f.runtime = name;
        else if (name.find("/libstdc++.so") != std::string_view::npos)
          f.cxx = name;
        return 0;
      },
      &found);
  const std::string& runtime = found.runtime;
  if (runtime.empty()) return {};
  std::string prefix = "LD_PRELOAD=" + runtime + (found.cxx.empty() ? "" : ":" + found.cxx) + " ";
  if (runtime.find("/libasan.so") != std::string::npos)
    prefix += "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" ";
  return prefix;
}

}  // namespace strata::testing
