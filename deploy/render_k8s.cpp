#include "deploy/render_k8s.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "common/auth.hpp"
#include "deploy/placeholder_secret.hpp"
#include "deploy/preflight.hpp"

namespace strata::deploy {
namespace {

// DNS-1123 labels: lower case alphanumerics and '-'.
std::string dns_name(std::string s) {
  for (char& c : s) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  while (!s.empty() && s.front() == '-') s.erase(s.begin());
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "strata" : s;
}

struct node_view {
  std::string name;
  std::string role;
  uint16_t transport_port = 0, metrics_port = 0, admin_port = 0;
  std::string ssd_path;
};

std::vector<node_view> nodes_of(const manifest& m) {
  std::vector<node_view> out;
  const std::string ssd = m.ssd_path.string();
  if (m.nodes.empty()) {
    out.push_back({m.metrics.node.empty() ? m.cluster.name : m.metrics.node, "coordinator", 0,
                   m.metrics.port, m.admin.port, ssd});
    return out;
  }
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const auto& n = m.nodes[i];
    node_view v{n.name,
                i == 0 ? "coordinator" : "node",
                n.transport_port,
                n.metrics_port ? n.metrics_port : (i == 0 ? m.metrics.port : uint16_t{0}),
                n.admin_port ? n.admin_port : (i == 0 ? m.admin.port : uint16_t{0}),
                n.ssd_path.empty() ? ssd : n.ssd_path.string()};
    out.push_back(v);
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

// The manifest for the ConfigMap: the secrets replaced by the files their
// Secrets are mounted as. Comments do not survive the round trip.
expected<std::string> without_secrets(const manifest& m, const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return error(errc::invalid_argument, m.file.string() + ": " + e.msg);
  }
  if (!root.IsMap()) return error(errc::invalid_argument, m.file.string() + ": not a mapping");
  if (root["admin"] && root["admin"].IsMap()) {
    YAML::Node admin = root["admin"];
    admin.remove("token");
    admin.remove("create_if_missing");
    if (has_admin_token(m)) admin["token_file"] = k8s_admin_token_path;
  }
  if (root["cluster_secret"] && root["cluster_secret"].IsMap()) {
    YAML::Node secret = root["cluster_secret"];
    // Every pod reads the one Secret: none may create a secret of its own.
    secret.remove("create_if_missing");
    secret["file"] = k8s_cluster_secret_path;
  }
  YAML::Emitter out;
  out << YAML::Comment("rendered by strata render k8s from " + m.file.filename().string() +
                       "; the secrets are in Secrets")
      << YAML::Newline << root;
  if (!out.good())
    return error(errc::invalid_argument, m.file.string() + ": " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

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
  const std::string cluster = dns_name(m.cluster.name);
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

expected<std::string> render_k8s(const manifest& m, const std::string& manifest_text,
                                 const k8s_options& o, const k8s_secrets& secrets) {
  const std::string cluster = dns_name(m.cluster.name);
  const auto nodes = nodes_of(m);
  const std::string config_map = cluster + "-manifest", secret = cluster + "-admin-token",
                    cluster_secret = cluster + "-cluster-secret";
  auto text = without_secrets(m, manifest_text);
  if (!text) return text.err();
  YAML::Emitter y;

  // The manifest itself, without its secrets.
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

  // Headless service: every pod gets <pod>.<cluster> in DNS.
  y << YAML::BeginDoc << YAML::BeginMap;
  y << YAML::Key << "apiVersion" << YAML::Value << "v1";
  y << YAML::Key << "kind" << YAML::Value << "Service";
  metadata(y, cluster, o, cluster);
  y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "clusterIP" << YAML::Value << "None";
  y << YAML::Key << "publishNotReadyAddresses" << YAML::Value << true;
  y << YAML::Key << "selector" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster << YAML::EndMap;
  y << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq;
  std::vector<std::pair<std::string, uint16_t>> service_ports;
  for (const auto& n : nodes) {
    if (n.transport_port) service_ports.emplace_back("transport", n.transport_port);
    if (n.metrics_port) service_ports.emplace_back("metrics", n.metrics_port);
    if (n.admin_port) service_ports.emplace_back("admin", n.admin_port);
  }
  if (service_ports.empty()) service_ports.emplace_back("transport", 13337);
  // Names must be unique: the first of each kind keeps its name.
  std::vector<std::string> used;
  for (size_t i = 0; i < service_ports.size(); ++i) {
    std::string name = service_ports[i].first;
    if (std::count(used.begin(), used.end(), name)) name += "-" + std::to_string(i);
    used.push_back(name);
    port(y, name, service_ports[i].second, false);
  }
  y << YAML::EndSeq << YAML::EndMap << YAML::EndMap << YAML::EndDoc;

  // One StatefulSet per node.
  for (const auto& n : nodes) {
    const std::string name = cluster + "-" + dns_name(n.name);
    y << YAML::BeginDoc << YAML::BeginMap;
    y << YAML::Key << "apiVersion" << YAML::Value << "apps/v1";
    y << YAML::Key << "kind" << YAML::Value << "StatefulSet";
    metadata(y, name, o, cluster);
    y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "serviceName" << YAML::Value << cluster;
    y << YAML::Key << "replicas" << YAML::Value << 1;
    y << YAML::Key << "podManagementPolicy" << YAML::Value << "Parallel";
    y << YAML::Key << "selector" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "matchLabels" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster;
    y << YAML::Key << "strata/node" << YAML::Value << dns_name(n.name);
    y << YAML::EndMap << YAML::EndMap;
    y << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "app.kubernetes.io/name" << YAML::Value << "strata";
    y << YAML::Key << "app.kubernetes.io/instance" << YAML::Value << cluster;
    y << YAML::Key << "strata/node" << YAML::Value << dns_name(n.name);
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
    if (n.transport_port) port(y, "transport", n.transport_port, true);
    if (n.metrics_port) port(y, "metrics", n.metrics_port, true);
    if (n.admin_port) port(y, "admin", n.admin_port, true);
    y << YAML::EndSeq;
    y << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq;
    y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "manifest";
    y << YAML::Key << "mountPath" << YAML::Value << "/etc/strata/manifest.yaml";
    y << YAML::Key << "subPath" << YAML::Value << "manifest.yaml" << YAML::EndMap;
    if (has_admin_token(m)) {
      y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "admin-token";
      y << YAML::Key << "mountPath" << YAML::Value << "/etc/strata/admin";
      y << YAML::Key << "readOnly" << YAML::Value << true << YAML::EndMap;
    }
    if (has_cluster_secret(m)) {
      y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "cluster-secret";
      y << YAML::Key << "mountPath" << YAML::Value << "/etc/strata/cluster";
      y << YAML::Key << "readOnly" << YAML::Value << true << YAML::EndMap;
    }
    y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << "ssd";
    y << YAML::Key << "mountPath" << YAML::Value << n.ssd_path << YAML::EndMap;
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
    y << YAML::EndSeq;
    y << YAML::EndMap << YAML::EndMap;  // template.spec, template
    // The SSD tier: one persistent volume per pod.
    y << YAML::Key << "volumeClaimTemplates" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    y << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "name" << YAML::Value << "ssd" << YAML::EndMap;
    y << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "accessModes" << YAML::Value << YAML::Flow << YAML::BeginSeq
      << "ReadWriteOnce" << YAML::EndSeq;
    if (!o.storage_class.empty())
      y << YAML::Key << "storageClassName" << YAML::Value << o.storage_class;
    y << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "requests" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "storage" << YAML::Value << o.ssd_size;
    y << YAML::EndMap << YAML::EndMap << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
    y << YAML::EndMap << YAML::EndMap << YAML::EndDoc;
  }
  return std::string(y.c_str()) + "\n";
}

}  // namespace strata::deploy
