// A directory's file list with sizes and CRC32C checksums: what makes a
// checkpoint complete and checkable (issue: checkpoints).
//
// write_file_manifest() lists every regular file under `dir` (recursively,
// the list itself excluded) into `dir/FILES`, written last and atomically:
// FILES.tmp is written and fsynced, then renamed, then the directory is
// fsynced. A directory without FILES is an incomplete checkpoint.
// verify_file_manifest() re-reads every file and checks it against the
// list. Errors name the file and the problem (missing list, truncated list,
// missing file, size or checksum mismatch).
//
// Format (text): "strata-files 1", then one line per file
// "<crc32c hex> <bytes> <relative path>", then "end <count>".
// Thread-safety: plain functions; files must not change while they run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace strata {

inline constexpr const char* file_manifest_name = "FILES";

struct manifest_entry {
  std::string path;  // relative to the directory, '/'-separated
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

expected<std::vector<manifest_entry>> write_file_manifest(const std::filesystem::path& dir);
expected<std::vector<manifest_entry>> verify_file_manifest(const std::filesystem::path& dir);

// CRC32C of a whole file; errors name the path.
expected<uint32_t> file_crc32c(const std::filesystem::path& file, uint64_t* bytes = nullptr);

}  // namespace strata
