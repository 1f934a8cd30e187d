// A node's data and shard state before training (`strata node`, and
// `strata launch` for the data of several nodes; not a public API): the
// generated data file, the data windows, the previous run's LMDB
// environments, and the checkpoints a resume tries. Plain functions on the
// caller's thread; they print what they do on stdout.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "deploy/manifest.hpp"

namespace strata::cli::detail {

// Generates the manifest's `data.generate` data into its data.path, with a
// progress line on stderr. Requires m.generate.
expected<void> generate_data(const deploy::manifest& m);

// Removes the LMDB environments a previous run left in the shard
// directories. Only directories that hold nothing but LMDB's two files are
// removed: anything else there is not ours to delete.
// `hosted`: the shards of this node (empty: all).
expected<void> clear_shard_state(const deploy::manifest& m, const std::vector<bool>& hosted);

// The checkpoints to try, in order: DIR itself if it is one, else the
// complete checkpoints under it, newest first (a damaged newest one falls
// back to the one before).
expected<std::vector<std::filesystem::path>> resume_candidates(const std::filesystem::path& dir);

// What the launcher says after a node failed and the cluster stopped: the
// `--resume` command only when a resume could work (the data file is there,
// or can be generated, and a complete checkpoint under checkpoint.dir
// verifies, newest first as a resume tries them); otherwise what stands in
// the way. `path`: the manifest as given on the command line.
std::string resume_hint(const deploy::manifest& m, const std::string& path);

// Generates the data if asked and absent, and cuts the training and
// held-out windows (printed).
// Data absent on a node that does not run the coordinator is an error.
expected<void> prepare_data(deploy::manifest& m, const std::string& path, const std::string& node,
                            bool coordinator_here);

}  // namespace strata::cli::detail
