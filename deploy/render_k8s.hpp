// `strata render k8s MANIFEST`: the Kubernetes objects that run a manifest's
// cluster (docs/deploy.md). A pure function of the parsed manifest and its
// text; no cluster access.
//
// Objects, as one multi-document YAML stream:
//   ConfigMap <name>-manifest   the manifest the pods read (k8s_pod_manifest),
//                               mounted at /etc/strata/manifest.yaml
//   Secret <name>-admin-token   the admin token (key `token`), mounted read
//                               by its owner alone (mode 0400) at
//                               /etc/strata/admin; only with an admin token
//   Secret <name>-cluster-secret  the cluster secret (key `secret`), mounted
//                               likewise at /etc/strata/cluster
//   PersistentVolumeClaim <name>-data         data.path's folder, shared
//                               read-only by every pod (ReadOnlyMany; the
//                               file is copied in once). With data.generate
//                               each pod generates its own copy into a
//                               volume of its own instead (a claim template).
//   PersistentVolumeClaim <name>-checkpoints  checkpoint.dir, written by
//                               every node (ReadWriteMany)
//   Service <name>-<node>       headless, one per node: the stable DNS name
//                               <name>-<node>-0.<name>-<node>[.<ns>.svc] of
//                               its pod; ports named by role (transport,
//                               metrics, admin)
//   StatefulSet <name>-<node>   one per manifest node (one replica; the
//                               first node's role is "coordinator", the
//                               others "node"), running `strata node
//                               --manifest ... --node NODE`: a claim
//                               template for the SSD tier at /var/lib/strata/ssd,
//                               memory requests and limits from the node's
//                               start allocations (deploy/host_memory.hpp)
//                               plus k8s_memory_overhead, readiness and
//                               liveness probes on /metrics (a TCP check of
//                               a port without one), scrape annotations
// A manifest without a nodes list is one node named after the cluster.
// Secrets only ever go into Secrets (issue 16 item 6). A secret whose value
// is not given (k8s_secrets) is left out of the stream; the pods wait for
// it until it is created (`kubectl create secret generic ...`, docs/deploy.md).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "deploy/manifest.hpp"

namespace strata::deploy {

struct k8s_options {
  std::string image = "strata:latest";    // container image with the strata binary
  std::string namespace_name;             // empty: no metadata.namespace
  std::string ssd_size = "100Gi";         // each SSD volume claim
  std::string storage_class;              // empty: the cluster's default
  std::string data_size = "100Gi";        // the data volume (shared, or each pod's)
  std::string checkpoint_size = "100Gi";  // the shared checkpoint volume
  // Storage class of the shared volumes (ReadOnlyMany / ReadWriteMany:
  // e.g. NFS or CephFS); empty: the cluster's default.
  std::string shared_storage_class;
};

// The secrets' values for their Secrets; nullopt: not rendered.
struct k8s_secrets {
  std::optional<std::string> admin_token;
  std::optional<std::string> cluster_secret;
};

// Where the pods find the secrets (the ConfigMap's manifest points there).
inline constexpr const char* k8s_admin_token_path = "/etc/strata/admin/token";
inline constexpr const char* k8s_cluster_secret_path = "/etc/strata/cluster/secret";
// Where the pods mount their volumes; the ConfigMap's paths point there.
inline constexpr const char* k8s_ssd_path = "/var/lib/strata/ssd";
inline constexpr const char* k8s_data_dir = "/var/lib/strata/data";
inline constexpr const char* k8s_checkpoint_dir = "/var/lib/strata/checkpoints";
// Memory a pod gets beyond its start allocations: the process, LMDB's
// page cache it touches, buffers bounded by batch sizes.
inline constexpr uint64_t k8s_memory_overhead = uint64_t{512} << 20;

// A DNS-1123 label made of `s` (lower case alphanumerics and '-').
std::string k8s_name(std::string s);
// The StatefulSet and headless Service of `node`: <cluster>-<node>.
std::string k8s_node_object(const manifest& m, const std::string& node);
// The stable DNS name of `node`'s pod.
std::string k8s_node_host(const manifest& m, const std::string& node, const k8s_options& o);

// The manifest as the pods read it: nodes[].host the pods' DNS names,
// shards.ssd_path (and every node's) k8s_ssd_path, data.path in
// k8s_data_dir, checkpoint.dir k8s_checkpoint_dir (serving.checkpoint under
// it, or refused: the pods mount no other checkpoint), serving.lmdb_path
// dropped (its default is in the SSD volume), metrics and admin bound to
// 0.0.0.0 (admin needs its token, metrics are read-only), admin.token and
// the files of the secrets replaced by the Secrets' mounted files.
// Comments do not survive. Errors name the manifest and the field.
expected<std::string> k8s_pod_manifest(const manifest& m, const std::string& manifest_text,
                                       const k8s_options& options);

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
