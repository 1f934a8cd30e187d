// What a manifest that parses may still get wrong at start, said as
// warnings (`strata validate`, `strata launch`): files it names that are
// not on this machine (validating on another host than the one that runs
// it is plausible, so not errors; launch refuses them, deploy/preflight.hpp),
// and a store whose rows the next launch removes.
//
// Pure reads of the file system; no file is created or changed.
#pragma once

#include <string>
#include <vector>

#include "deploy/manifest.hpp"

namespace strata::deploy {

// The files that must exist when the cluster starts and are absent here,
// each "FILE: FIELD: PATH does not exist on this machine (...)": data.path
// without data.generate, admin.token_file and cluster_secret.file without
// create_if_missing, serving.checkpoint. A path that exists but is not a
// regular file (data.path) is named too.
std::vector<std::string> missing_file_warnings(const manifest& m);

// A store (workers.count 0) without checkpoint.dir: every launch starts
// fresh and removes the rows under its ssd_path, so clients' pushes are
// lost at the next start. Empty when that is not the case.
std::string store_without_checkpoint_warning(const manifest& m);

// Both of the above, in that order.
std::vector<std::string> manifest_warnings(const manifest& m);

}  // namespace strata::deploy
