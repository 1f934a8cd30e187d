// Internals of the checkpoint functions shared by checkpoint.cpp (format,
// listing, pruning, verification) and checkpoint_restore.cpp (restore and
// the incarnation record). See checkpoint.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "actors/checkpoint.hpp"
#include "common/error.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors::checkpoint_impl {

namespace fs = std::filesystem;

// disk_full for ENOSPC/EDQUOT, else io_error.
errc code_of(int err);
// fsync of a file or directory through the io_env seam; errors name it.
expected<void> fsync_file(const fs::path& p, bool directory);
expected<std::vector<uint8_t>> read_whole(const fs::path& file);

struct shard_state_file {
  uint32_t tick = 0;
  std::vector<uint16_t> sketch;
};
// A shard copy's shard.state; errors name the file.
expected<shard_state_file> read_shard_state(const fs::path& shard_dir);

// A shard copy opened read-only (maps only the committed pages).
lmdb_tier_config read_only_config(const fs::path& dir, const checkpoint_meta& meta);
row_layout layout_of(const checkpoint_meta& meta);

}  // namespace strata::actors::checkpoint_impl
