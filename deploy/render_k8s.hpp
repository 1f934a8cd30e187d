// `strata render k8s MANIFEST`: the Kubernetes objects that run a manifest's
// cluster (docs/deploy.md). A pure function of the parsed manifest and its
// text; no cluster access.
//
// Objects, as one multi-document YAML stream:
//   ConfigMap <name>-manifest   the manifest, mounted at /etc/strata, with
//                               every secret taken out: admin.token and
//                               admin.token_file become token_file
//                               /etc/strata/admin/token, cluster_secret.file
//                               /etc/strata/cluster/secret (create_if_missing
//                               dropped: every pod must read the same one)
//   Secret <name>-admin-token   the admin token (key `token`), mounted read
//                               by its owner alone (mode 0400) at
//                               /etc/strata/admin on every node
//   Secret <name>-cluster-secret  the cluster secret (key `secret`), mounted
//                               likewise at /etc/strata/cluster
//   Service <name>              headless (clusterIP: None): stable DNS
//                               names <pod>.<name> for peer discovery
//   StatefulSet <name>-<node>   one per manifest node (one replica; the
//                               first node's role is "coordinator", the
//                               others "node"), running `strata node
//                               --manifest ... --node NODE`, with a
//                               PersistentVolumeClaim template for the SSD
//                               tier mounted at the node's ssd_path and
//                               Prometheus scrape annotations on its pods
// A manifest without a nodes list is one node named after the cluster.
// Secrets only ever go into Secrets (issue 16 item 6). A secret whose value
// is not given (k8s_secrets) is left out of the stream; the pods wait for
// it until it is created (`kubectl create secret generic ...`, docs/deploy.md).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "deploy/manifest.hpp"

namespace strata::deploy {

struct k8s_options {
  std::string image = "strata:latest";  // container image with the strata binary
  std::string namespace_name;           // empty: no metadata.namespace
  std::string ssd_size = "100Gi";       // each SSD volume claim
  std::string storage_class;            // empty: the cluster's default
};

// The secrets' values for their Secrets; nullopt: not rendered.
struct k8s_secrets {
  std::optional<std::string> admin_token;
  std::optional<std::string> cluster_secret;
};

// Where the pods find the secrets (the ConfigMap's manifest points there).
inline constexpr const char* k8s_admin_token_path = "/etc/strata/admin/token";
inline constexpr const char* k8s_cluster_secret_path = "/etc/strata/cluster/secret";

// The secrets of `m` read from this machine: admin.token inline, or
// admin.token_file; cluster_secret.file. A file that is absent is created
// first when the manifest says create_if_missing (as `strata launch` would:
// random, mode 0600, said so on `notes`), else left out with the kubectl
// command that creates its Secret on `notes`. Files readable by others and
// placeholders are refused, naming the field and the file.
expected<k8s_secrets> read_k8s_secrets(const manifest& m, std::ostream& notes);

// `manifest_text` is the file as written; its secrets are taken out before
// it goes into the ConfigMap (errors: YAML the parser accepted cannot fail,
// but a manifest_text that does not parse is refused).
expected<std::string> render_k8s(const manifest& m, const std::string& manifest_text,
                                 const k8s_options& options, const k8s_secrets& secrets = {});

}  // namespace strata::deploy
