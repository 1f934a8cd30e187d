// `strata render k8s MANIFEST`: the Kubernetes objects that run a manifest's
// cluster (docs/deploy.md). A pure function of the parsed manifest and its
// text; no cluster access.
//
// Objects, as one multi-document YAML stream:
//   ConfigMap <name>-manifest   the manifest file, mounted at /etc/strata
//   Secret <name>-admin-token   the admin token (stringData), mounted at
//                               /etc/strata/admin/token (point
//                               admin.token_file there)
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
#pragma once

#include <string>

#include "deploy/manifest.hpp"

namespace strata::deploy {

struct k8s_options {
  std::string image = "strata:latest";  // container image with the strata binary
  std::string namespace_name;           // empty: no metadata.namespace
  std::string ssd_size = "100Gi";       // each SSD volume claim
  std::string storage_class;            // empty: the cluster's default
};

// `manifest_text` is the file as written (it goes into the ConfigMap).
std::string render_k8s(const manifest& m, const std::string& manifest_text,
                       const k8s_options& options);

}  // namespace strata::deploy
