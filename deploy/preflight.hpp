// What a manifest needs on disk, checked before any node starts, so that a
// missing file fails the launch at once, naming the field and the path,
// instead of failing a node after its peers started.
//
// Secret files (the admin token) are created here when the manifest says
// `create_if_missing: true`: random, mode 0600, the path printed. Only the
// files a manifest names are touched; nothing comes from a network message.
#pragma once

#include <filesystem>
#include <ostream>

#include "common/error.hpp"
#include "deploy/manifest.hpp"

namespace strata::deploy {

// Makes sure `file` exists and is not empty. When it is absent and
// `create_if_missing`, writes 32 random hex characters to it (mode 0600,
// created exclusively; its folder is created too) and returns true; when it
// is absent otherwise, an error naming `where` (e.g. "m.yaml: admin.token_file").
expected<bool> ensure_secret_file(const std::filesystem::path& file, bool create_if_missing,
                                  const std::string& where);

// admin.token_file exists (created when admin.create_if_missing, and said
// so on `out`); nothing to do without a token file.
status ensure_admin_token_file(const manifest& m, std::ostream& out);

// cluster_secret.file exists (created when cluster_secret.create_if_missing,
// and said so on `out`) and is readable by its owner alone; nothing to do
// without a cluster_secret section.
status ensure_cluster_secret_file(const manifest& m, std::ostream& out);

// Checks every file the manifest needs before a node starts: the data file
// (or its `data.generate` block; a regular file, not a device or FIFO), the admin token file (created when
// admin.create_if_missing), the cluster secret file (likewise), and the memory every node allocates at start
// against this host's (deploy/host_memory.hpp). Prints what it created to
// `out`.
status check_manifest_files(const manifest& m, std::ostream& out);

}  // namespace strata::deploy
