// strata errors across actor messages: carried as caf::error with the
// runtime_error code and the full "code: message" text as context; and
// back, for people (describe) and for callers that react to the code
// (code_of).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace strata::actors {

inline caf::error to_caf(const error& e) {
  return caf::make_error(caf::sec::runtime_error, e.to_string());
}

// The text of a caf::error for people: the context strings of an error of
// CAF's own category (a strata error carried by to_caf is its "code:
// message"), or the code's name where there is none ("request_timeout");
// anything else as CAF renders it. Never CAF's
// "system_error(runtime_error, (...))" wrapper.
inline std::string describe(caf::actor_system& system, const caf::error& err) {
  if (err.category() != caf::atom("system")) return system.render(err);
  const caf::message& context = err.context();
  std::string text;
  for (size_t i = 0; i < context.size(); ++i) {
    if (!context.match_element<std::string>(i)) continue;
    if (!text.empty()) text += "; ";
    text += context.get_as<std::string>(i);
  }
  if (!text.empty()) return text;
  return caf::to_string(static_cast<caf::sec>(err.code()));
}

// The strata code an error carried by to_caf has ("disk_full: ..."), so
// that it survives the trip through an actor; `fallback` otherwise.
inline errc code_of(caf::actor_system& system, const caf::error& err, errc fallback) {
  const std::string text = describe(system, err);
  for (errc c :
       {errc::invalid_argument, errc::io_error, errc::disk_full, errc::corrupt_data,
        errc::format_mismatch, errc::not_found, errc::capacity_exceeded, errc::unavailable}) {
    const std::string_view name = to_string(c);
    if (text.size() > name.size() + 1 && text.compare(0, name.size(), name) == 0 &&
        text[name.size()] == ':')
      return c;
  }
  return fallback;
}
}  // namespace strata::actors
