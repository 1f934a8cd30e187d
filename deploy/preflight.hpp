// What a manifest needs on disk, checked before any node starts, so that a
// missing file fails the launch at once, naming the field and the path,
// instead of failing a node after its peers started.
//
// Secret files (the admin token) are created here when the manifest says
// `create_if_missing: true`: random, mode 0600, the path printed. Only the
// files a manifest names are touched; nothing comes from a network message.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

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

// A TCP port a node listens on, named by the manifest field that sets it.
struct port_use {
  std::string field;    // "metrics.port", "nodes[n1].admin_port"
  std::string address;  // the bind address
  uint16_t port = 0;
};

// The ports node `node` of `m` listens on (metrics, admin API, gateway,
// update publisher; 0s left out): on a node of several, the coordinator's
// node (the first) takes the cluster-wide ports, every node its nodes[]
// ports. `node`: "" or the name of a one-node manifest means the one node.
std::vector<port_use> node_ports(const manifest& m, const std::string& node);

// Each of node_ports(m, node) is free to bind; a port in use is an error
// naming its field, port and address (checked before a node starts, where
// the servers' own errors name neither, e.g. the metrics library's "null
// context when constructing CivetServer").
status check_ports_free(const manifest& m, const std::string& node);

// Whether `address`:`port` can be bound now: an error naming `field` when
// it is in use (EADDRINUSE) or cannot be bound; ok when the address does
// not resolve (the server names that itself).
status check_port_free(const std::string& field, const std::string& address, uint16_t port);

}  // namespace strata::deploy
