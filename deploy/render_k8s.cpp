#include "deploy/render_k8s.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/auth.hpp"
#include "deploy/host_memory.hpp"
#include "deploy/placeholder_secret.hpp"
#include "deploy/preflight.hpp"

namespace strata::deploy {
namespace {

struct node_view {
  std::string name;
  std::string role;
  std::string memory_node;  // for start_allocations: "" (everything) without a nodes list
  // The container's ports by role, as the Service names them.
  std::vector<std::pair<std::string, uint16_t>> ports;
  uint16_t metrics_port = 0;
};

bool loopback(const std::string& address) {
  return address == "127.0.0.1" || address == "localhost" || address == "::1";
}

std::vector<node_view> nodes_of(const manifest& m) {
  std::vector<node_view> out;
  // The gateway has no authentication: a port only when the manifest binds
  // it beyond loopback itself (k8s_pod_manifest leaves it as written).
  const uint16_t gateway = loopback(m.gateway.bind_address) ? 0 : m.gateway.port;
  const auto add = [&](node_view v, uint16_t transport, uint16_t metrics, uint16_t admin,
                       uint16_t gw) {
    for (const auto& [role, number] : {std::pair<const char*, uint16_t>{"transport", transport},
                                       {"metrics", metrics},
                                       {"admin", admin},
                                       {"gateway", gw}})
      if (number) v.ports.emplace_back(role, number);
    v.metrics_port = metrics;
    out.push_back(std::move(v));
  };
  if (m.nodes.empty()) {
    add({m.metrics.node.empty() ? m.cluster.name : m.metrics.node, "coordinator", "", {}, 0}, 0,
        m.metrics.port, m.admin.port, gateway);
    return out;
  }
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const auto& n = m.nodes[i];
    add({n.name, i == 0 ? "coordinator" : "node", n.name, {}, 0}, n.transport_port,
        n.metrics_port ? n.metrics_port : (i == 0 ? m.metrics.port : uint16_t{0}),
        n.admin_port ? n.admin_port : (i == 0 ? m.admin.port : uint16_t{0}),
        i == 0 ? gateway : uint16_t{0});
  }
  return out;
}

void metadata(YAML::Emitter& y, const std::string& name, const k8s_options& o,
              const std::string& cluster) {
  y << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << name;
  if (!o.namespace_name.empty()) y << YAML::Key << "namespace" << YAML::Value << o.namespace_name;
  y << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "app.kubernetes.io/name" << YAML::Value << "strata";
  y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster;
  y << YAML::EndMap << YAML::EndMap;
}

void port(YAML::Emitter& y, const std::string& name, uint16_t number, bool container) {
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << name;
  y << YAML::Key << (container ? "containerPort" : "port") << YAML::Value << number;
  y << YAML::Key << "protocol" << YAML::Value << "TCP" << YAML::EndMap;
}

void secret_volume(YAML::Emitter& y, const std::string& name, const std::string& secret) {
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << name;
  y << YAML::Key << "secret" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "secretName" << YAML::Value << secret;
  y << YAML::Key << "defaultMode" << YAML::Value << 0400;
  y << YAML::EndMap << YAML::EndMap;
}

bool has_admin_token(const manifest& m) {
  return !m.admin.token.empty() || !m.admin.token_file.empty();
}
bool has_cluster_secret(const manifest& m) { return !m.cluster_secret.file.empty(); }

void secret_doc(YAML::Emitter& y, const std::string& name, const std::string& key,
                const std::string& value, const k8s_options& o, const std::string& cluster) {
  y << YAML::BeginDoc << YAML::BeginMap;
  y << YAML::Key << "apiVersion" << YAML::Value << "v1";
  y << YAML::Key << "kind" << YAML::Value << "Secret";
  metadata(y, name, o, cluster);
  y << YAML::Key << "type" << YAML::Value << "Opaque";
  y << YAML::Key << "stringData" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
  y << YAML::EndMap << YAML::EndMap << YAML::EndDoc;
}

// One secret file for read_k8s_secrets: nullopt when absent and not to be
// created (the note says how to create its Secret).
expected<std::optional<std::string>> secret_file(const manifest& m,
                                                 const std::filesystem::path& file,
                                                 bool create_if_missing, const std::string& field,
                                                 const std::string& secret_name,
                                                 const std::string& key, std::ostream& notes) {
  const std::string where = m.file.string() + ": " + field;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec) && !create_if_missing) {
    notes << "strata render k8s: " << where << ": " << file.string()
          << " is not on this machine, so Secret " << secret_name
          << " is not rendered; create it before the pods can start:\n"
          << "  kubectl create secret generic " << secret_name << " --from-file=" << key
          << "=FILE\n";
    return std::optional<std::string>{};
  }
  auto created = ensure_secret_file(file, create_if_missing, where);
  if (!created) return created.err();
  if (*created)
    notes << "strata render k8s: created " << file.string() << " (mode 0600), the value of Secret "
          << secret_name << "\n";
  auto text = auth::read_secret_text(file, where);
  if (!text) return text.err();
  if (looks_like_placeholder(*text))
    return error(errc::invalid_argument, placeholder_refusal(where + ": " + file.string()));
  return std::optional<std::string>(std::move(*text));
}

}  // namespace

expected<k8s_secrets> read_k8s_secrets(const manifest& m, std::ostream& notes) {
  const std::string cluster = k8s_name(m.cluster.name);
  k8s_secrets out;
  if (!m.admin.token.empty()) {
    if (looks_like_placeholder(m.admin.token))
      return error(errc::invalid_argument, placeholder_refusal(m.file.string() + ": admin.token"));
    out.admin_token = m.admin.token;
  } else if (!m.admin.token_file.empty()) {
    auto token = secret_file(m, m.admin.token_file, m.admin.create_if_missing, "admin.token_file",
                             cluster + "-admin-token", "token", notes);
    if (!token) return token.err();
    out.admin_token = std::move(*token);
  }
  if (has_cluster_secret(m)) {
    auto secret = secret_file(m, m.cluster_secret.file, m.cluster_secret.create_if_missing,
                              "cluster_secret.file", cluster + "-cluster-secret", "secret", notes);
    if (!secret) return secret.err();
    out.cluster_secret = std::move(*secret);
  }
  return out;
}

namespace {

// A claim: per pod (a StatefulSet's template) or shared (its own object).
void claim_spec(YAML::Emitter& y, const char* access, const std::string& storage_class,
                const std::string& size) {
  y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "accessModes" << YAML::Value << YAML::Flow << YAML::BeginSeq << access
    << YAML::EndSeq;
  if (!storage_class.empty()) y << YAML::Key << "storageClassName" << YAML::Value << storage_class;
  y << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "requests" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "storage" << YAML::Value << size;
  y << YAML::EndMap << YAML::EndMap << YAML::EndMap;
}

void shared_claim(YAML::Emitter& y, const std::string& name, const char* access,
                  const std::string& size, const k8s_options& o, const std::string& cluster) {
  y << YAML::BeginDoc << YAML::BeginMap;
  y << YAML::Key << "apiVersion" << YAML::Value << "v1";
  y << YAML::Key << "kind" << YAML::Value << "PersistentVolumeClaim";
  metadata(y, name, o, cluster);
  claim_spec(y, access, o.shared_storage_class, size);
  y << YAML::EndMap << YAML::EndDoc;
}

void mount(YAML::Emitter& y, const std::string& name, const std::string& path, bool read_only,
           const std::string& sub_path = "") {
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << name;
  y << YAML::Key << "mountPath" << YAML::Value << path;
  if (!sub_path.empty()) y << YAML::Key << "subPath" << YAML::Value << sub_path;
  if (read_only) y << YAML::Key << "readOnly" << YAML::Value << true;
  y << YAML::EndMap;
}

void claim_volume(YAML::Emitter& y, const std::string& name, const std::string& claim) {
  y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << name;
  y << YAML::Key << "persistentVolumeClaim" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "claimName" << YAML::Value << claim << YAML::EndMap << YAML::EndMap;
}

// What the pod may use: its start allocations and the overhead, in MiB.
std::string memory_of(const manifest& m, const node_view& n) {
  uint64_t bytes = k8s_memory_overhead;
  for (const auto& item : start_allocations(m, n.memory_node)) bytes += item.bytes;
  return std::to_string((bytes + (uint64_t{1} << 20) - 1) >> 20) + "Mi";
}

// /metrics needs no token and is served from before training starts; a
// node without metrics is checked by connecting to its first port.
void probe(YAML::Emitter& y, const char* key, const node_view& n, int initial_delay, int failures) {
  if (!n.metrics_port && n.ports.empty()) return;
  y << YAML::Key << key << YAML::Value << YAML::BeginMap;
  if (n.metrics_port) {
    y << YAML::Key << "httpGet" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "path" << YAML::Value << "/metrics";
    y << YAML::Key << "port" << YAML::Value << "metrics" << YAML::EndMap;
  } else {
    y << YAML::Key << "tcpSocket" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "port" << YAML::Value << n.ports.front().first << YAML::EndMap;
  }
  y << YAML::Key << "initialDelaySeconds" << YAML::Value << initial_delay;
  y << YAML::Key << "periodSeconds" << YAML::Value << 10;
  y << YAML::Key << "failureThreshold" << YAML::Value << failures;
  y << YAML::EndMap;
}

}  // namespace

expected<std::string> render_k8s(const manifest& m, const std::string& manifest_text,
                                 const k8s_options& o, const k8s_secrets& secrets) {
  const std::string cluster = k8s_name(m.cluster.name);
  const auto nodes = nodes_of(m);
  const std::string config_map = cluster + "-manifest", secret = cluster + "-admin-token",
                    cluster_secret = cluster + "-cluster-secret", data_claim = cluster + "-data",
                    checkpoint_claim = cluster + "-checkpoints";
  auto text = k8s_pod_manifest(m, manifest_text, o);
  if (!text) return text.err();
  const bool has_data = !m.data.path.empty();
  const bool data_per_pod = has_data && m.generate.has_value();  // each pod generates its copy
  const bool has_checkpoints = m.cluster.checkpoint.enabled();
  YAML::Emitter y;

  // The manifest the pods read.
  y << YAML::BeginDoc << YAML::BeginMap;
  y << YAML::Key << "apiVersion" << YAML::Value << "v1";
  y << YAML::Key << "kind" << YAML::Value << "ConfigMap";
  metadata(y, config_map, o, cluster);
  y << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "manifest.yaml" << YAML::Value << YAML::Literal << *text;
  y << YAML::EndMap << YAML::EndMap << YAML::EndDoc;

  // The secrets whose values are known here; the others are created with
  // kubectl (read_k8s_secrets said how).
  if (has_admin_token(m) && secrets.admin_token)
    secret_doc(y, secret, "token", *secrets.admin_token, o, cluster);
  if (has_cluster_secret(m) && secrets.cluster_secret)
    secret_doc(y, cluster_secret, "secret", *secrets.cluster_secret, o, cluster);

  // The volumes every pod shares.
  if (has_data && !data_per_pod)
    shared_claim(y, data_claim, "ReadOnlyMany", o.data_size, o, cluster);
  if (has_checkpoints)
    shared_claim(y, checkpoint_claim, "ReadWriteMany", o.checkpoint_size, o, cluster);

  for (const auto& n : nodes) {
    const std::string name = k8s_node_object(m, n.name);
    // Headless: the pod's stable DNS name, which the ConfigMap's hosts are.
    y << YAML::BeginDoc << YAML::BeginMap;
    y << YAML::Key << "apiVersion" << YAML::Value << "v1";
    y << YAML::Key << "kind" << YAML::Value << "Service";
    metadata(y, name, o, cluster);
    y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "clusterIP" << YAML::Value << "None";
    // Peers join before any pod is ready.
    y << YAML::Key << "publishNotReadyAddresses" << YAML::Value << true;
    y << YAML::Key << "selector" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster;
    y << YAML::Key << "strata/node" << YAML::Value << k8s_name(n.name) << YAML::EndMap;
    y << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq;
    for (const auto& [role, number] : n.ports) port(y, role, number, false);
    y << YAML::EndSeq << YAML::EndMap << YAML::EndMap << YAML::EndDoc;

    y << YAML::BeginDoc << YAML::BeginMap;
    y << YAML::Key << "apiVersion" << YAML::Value << "apps/v1";
    y << YAML::Key << "kind" << YAML::Value << "StatefulSet";
    metadata(y, name, o, cluster);
    y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "serviceName" << YAML::Value << name;
    y << YAML::Key << "replicas" << YAML::Value << 1;
    y << YAML::Key << "podManagementPolicy" << YAML::Value << "Parallel";
    y << YAML::Key << "selector" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "matchLabels" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster;
    y << YAML::Key << "strata/node" << YAML::Value << k8s_name(n.name);
    y << YAML::EndMap << YAML::EndMap;
    y << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "app.kubernetes.io/name" << YAML::Value << "strata";
    y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster;
    y << YAML::Key << "strata/node" << YAML::Value << k8s_name(n.name);
    y << YAML::Key << "strata/role" << YAML::Value << n.role;
    y << YAML::EndMap;
    if (n.metrics_port) {
      y << YAML::Key << "annotations" << YAML::Value << YAML::BeginMap;
      // Annotation values are strings: quoted, or YAML reads a bool and a number.
      y << YAML::Key << "prometheus.io/scrape" << YAML::Value << YAML::DoubleQuoted << "true";
      y << YAML::Key << "prometheus.io/port" << YAML::Value << YAML::DoubleQuoted
        << std::to_string(n.metrics_port);
      y << YAML::Key << "prometheus.io/path" << YAML::Value << "/metrics";
      y << YAML::EndMap;
    }
    y << YAML::EndMap;  // template.metadata
    y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    y << YAML::Key << "name" << YAML::Value << "strata";
    y << YAML::Key << "image" << YAML::Value << o.image;
    y << YAML::Key << "args" << YAML::Value << YAML::Flow << YAML::BeginSeq << "node"
      << "--manifest"
      << "/etc/strata/manifest.yaml"
      << "--node" << n.name << YAML::EndSeq;
    y << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq;
    for (const auto& [role, number] : n.ports) port(y, role, number, true);
    y << YAML::EndSeq;
    // Memory as the node allocates it at start; requests = limits, so the
    // scheduler places the pod where it fits and nothing overcommits it.
    const std::string memory = memory_of(m, n);
    y << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
    for (const char* kind : {"requests", "limits"}) {
      y << YAML::Key << kind << YAML::Value << YAML::BeginMap;
      y << YAML::Key << "memory" << YAML::Value << memory << YAML::EndMap;
    }
    y << YAML::EndMap;
    probe(y, "readinessProbe", n, 5, 3);
    // Generous: a loaded node must not be restarted mid-training.
    probe(y, "livenessProbe", n, 30, 6);
    y << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq;
    mount(y, "manifest", "/etc/strata/manifest.yaml", true, "manifest.yaml");
    if (has_admin_token(m)) mount(y, "admin-token", "/etc/strata/admin", true);
    if (has_cluster_secret(m)) mount(y, "cluster-secret", "/etc/strata/cluster", true);
    mount(y, "ssd", k8s_ssd_path, false);
    if (has_data) mount(y, "data", k8s_data_dir, !data_per_pod);
    if (has_checkpoints) mount(y, "checkpoints", k8s_checkpoint_dir, false);
    y << YAML::EndSeq;
    y << YAML::EndMap << YAML::EndSeq;  // containers
    y << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq;
    y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "manifest";
    y << YAML::Key << "configMap" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "name" << YAML::Value << config_map << YAML::EndMap << YAML::EndMap;
    // Secret files readable by their owner alone: strata refuses others
    // (auth::read_secret_text), and Kubernetes' default mode is 0644.
    if (has_admin_token(m)) secret_volume(y, "admin-token", secret);
    if (has_cluster_secret(m)) secret_volume(y, "cluster-secret", cluster_secret);
    if (has_data && !data_per_pod) claim_volume(y, "data", data_claim);
    if (has_checkpoints) claim_volume(y, "checkpoints", checkpoint_claim);
    y << YAML::EndSeq;
    y << YAML::EndMap << YAML::EndMap;  // template.spec, template
    // Per pod: the SSD tier, and generated data.
    y << YAML::Key << "volumeClaimTemplates" << YAML::Value << YAML::BeginSeq;
    y << YAML::BeginMap << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "name" << YAML::Value << "ssd" << YAML::EndMap;
    claim_spec(y, "ReadWriteOnce", o.storage_class, o.ssd_size);
    y << YAML::EndMap;
    if (data_per_pod) {
      y << YAML::BeginMap << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
      y << YAML::Key << "name" << YAML::Value << "data" << YAML::EndMap;
      claim_spec(y, "ReadWriteOnce", o.storage_class, o.data_size);
      y << YAML::EndMap;
    }
    y << YAML::EndSeq;
    y << YAML::EndMap << YAML::EndMap << YAML::EndDoc;
  }
  return std::string(y.c_str()) + "\n";
}

}  // namespace strata::deploy
