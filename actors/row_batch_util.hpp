// Conversions between tier-side row_buffer / strided records and the
// message-side row_batch (bytes). Plain functions, no actor code.
#pragma once

#include <cstring>

#include "actors/protocol.hpp"
#include "tiers/row_store.hpp"

namespace strata::actors {

inline row_batch to_batch(const row_buffer& rows) {
  row_batch out;
  out.keys.assign(rows.keys().begin(), rows.keys().end());
  const size_t bytes = rows.layout().record_bytes() * rows.size();
  out.records.resize(bytes);
  if (bytes > 0) std::memcpy(out.records.data(), rows.record(0), bytes);
  return out;
}

inline const_rows_span rows_of(const row_batch& b, const row_layout& layout) {
  return {reinterpret_cast<const std::byte*>(b.records.data()), layout.record_bytes()};
}
inline rows_span rows_of(row_batch& b, const row_layout& layout) {
  return {reinterpret_cast<std::byte*>(b.records.data()), layout.record_bytes()};
}

// True if the batch's byte count matches its keys for this layout (a
// malformed message is rejected, never trusted).
inline bool well_formed(const row_batch& b, const row_layout& layout) {
  return b.records.size() == b.keys.size() * layout.record_bytes();
}

}  // namespace strata::actors
