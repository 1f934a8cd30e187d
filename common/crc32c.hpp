// CRC32C (Castagnoli), the checksum of every persisted row.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at
// run time) and a table-driven software loop otherwise; both give the same
// value. Abseil 2022-06 in Debian has no public CRC32C, hence our own ~40
// lines. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

// Extends `crc` (0 to start) over `size` bytes at `data`.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

inline uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

}  // namespace strata
