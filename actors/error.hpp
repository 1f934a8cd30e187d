// strata errors across actor messages: carried as caf::error with the
// runtime_error code and the full "code: message" text as context.
#pragma once

#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <string>

#include "common/error.hpp"

namespace strata::actors {

inline caf::error to_caf(const error& e) {
  return caf::make_error(caf::sec::runtime_error, e.to_string());
}
}  // namespace strata::actors
