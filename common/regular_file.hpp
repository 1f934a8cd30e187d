// One check for every file strata reads whole (data files, checkpoint
// files, files a manifest names): it must be a regular file. A device
// (/dev/zero), a FIFO or a socket never ends or blocks on open, so a scan
// of it would run forever; a directory cannot be read as one. Symbolic links
// are followed: what counts is the file they reach.
//
// Thread-safety: plain functions.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace strata {

// Ok when `path` is a regular file. Errors name `what` (e.g. "data file",
// "checkpoint file") and the path: not_found when it is absent,
// invalid_argument for another kind of file ("... is a character device,
// not a regular file").
status check_regular_file(const std::filesystem::path& path, std::string_view what);

// Opens `path` for reading (O_RDONLY | O_CLOEXEC) if it is a regular file;
// the descriptor is the caller's to close. Opened without blocking (a FIFO
// would block on open) and checked with fstat on the descriptor itself, so
// the file checked is the file read. Errors as check_regular_file.
expected<int> open_regular_file(const std::filesystem::path& path, std::string_view what);

}  // namespace strata
