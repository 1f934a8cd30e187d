#include "common/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace strata {

std::string_view to_string(errc code) {
  switch (code) {
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::io_error:
      return "io_error";
    case errc::disk_full:
      return "disk_full";
    case errc::corrupt_data:
      return "corrupt_data";
    case errc::format_mismatch:
      return "format_mismatch";
    case errc::not_found:
      return "not_found";
    case errc::capacity_exceeded:
      return "capacity_exceeded";
    case errc::unavailable:
      return "unavailable";
  }
  return "unknown";
}

std::string error::to_string() const {
  std::string out{strata::to_string(code_)};
  out += ": ";
  out += message_;
  return out;
}

void assertion_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "strata: invariant violated at %s:%d: %s (%s)\n", file, line, msg, expr);
  std::abort();
}

}  // namespace strata
