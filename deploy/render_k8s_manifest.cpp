// The manifest as the pods read it (deploy/render_k8s.hpp): every path made
// one of the volumes the pods mount, every host a StatefulSet pod's stable
// DNS name, the listeners a scrape or a peer reaches bound to the pod's
// address, the secrets replaced by their Secrets' files.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>

#include "deploy/render_k8s.hpp"

namespace strata::deploy {

std::string k8s_name(std::string s) {
  for (char& c : s) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  while (!s.empty() && s.front() == '-') s.erase(s.begin());
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "strata" : s;
}

std::string k8s_node_object(const manifest& m, const std::string& node) {
  return k8s_name(m.cluster.name) + "-" + k8s_name(node);
}

std::string k8s_node_host(const manifest& m, const std::string& node, const k8s_options& o) {
  // Pod 0 of the node's StatefulSet under its headless Service; within the
  // namespace the short form resolves through the pod's search path.
  const std::string object = k8s_node_object(m, node);
  std::string host = object + "-0." + object;
  if (!o.namespace_name.empty()) host += "." + o.namespace_name + ".svc";
  return host;
}

namespace {

namespace fs = std::filesystem;

// `inner` is `outer` or below it (both made absolute, lexically).
bool within(const fs::path& inner, const fs::path& outer) {
  const auto a = fs::absolute(inner).lexically_normal();
  const auto b = fs::absolute(outer).lexically_normal();
  const auto rel = a.lexically_relative(b);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

expected<std::string> k8s_pod_manifest(const manifest& m, const std::string& text,
                                       const k8s_options& o) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return error(errc::invalid_argument, m.file.string() + ": " + e.msg);
  }
  if (!root.IsMap()) return error(errc::invalid_argument, m.file.string() + ": not a mapping");
  const auto refuse = [&](const std::string& field, const std::string& why) {
    return error(errc::invalid_argument,
                 m.file.string() + ": " + field + ": not rendered for Kubernetes: " + why);
  };

  // Hosts: the pods' stable names. The transport listens on every address
  // of the pod when its host is a name (deploy/multi_node.cpp).
  if (root["nodes"] && root["nodes"].IsSequence()) {
    YAML::Node nodes = root["nodes"];
    for (size_t i = 0; i < nodes.size() && i < m.nodes.size(); ++i) {
      YAML::Node n = nodes[i];
      n["host"] = k8s_node_host(m, m.nodes[i].name, o);
      // Each pod has its own SSD volume at the one mount path.
      n.remove("ssd_path");
    }
  }
  root["shards"]["ssd_path"] = k8s_ssd_path;

  // Data: one file in the data volume, under its own name.
  if (root["data"] && root["data"].IsMap() && !m.data.path.empty())
    root["data"]["path"] = (fs::path(k8s_data_dir) / m.data.path.filename()).string();

  // Checkpoints: the shared checkpoint volume; a served checkpoint must be
  // one of them.
  if (root["checkpoint"] && root["checkpoint"].IsMap() && m.cluster.checkpoint.enabled())
    root["checkpoint"]["dir"] = k8s_checkpoint_dir;
  if (root["serving"] && root["serving"].IsMap()) {
    YAML::Node serving = root["serving"];
    // The serving copy lives in the SSD volume (its default, ssd_path/serving).
    serving.remove("lmdb_path");
    if (!m.serving.checkpoint.empty()) {
      const fs::path dir = m.cluster.checkpoint.directory;
      if (dir.empty() || !within(m.serving.checkpoint, dir))
        return refuse("serving.checkpoint",
                      m.serving.checkpoint.string() +
                          " is not under checkpoint.dir, the one checkpoint volume the pods "
                          "mount; name a checkpoint under it or leave serving.checkpoint out");
      const auto rel = fs::absolute(m.serving.checkpoint)
                           .lexically_normal()
                           .lexically_relative(fs::absolute(dir).lexically_normal());
      serving["checkpoint"] = (fs::path(k8s_checkpoint_dir) / rel).lexically_normal().string();
    }
  }

  // Listeners a scrape or a client outside the pod reaches: the pod's
  // address. Admin requires its token and metrics are read-only; the
  // gateway has no authentication and stays on loopback (docs/deploy.md).
  if (m.metrics.port != 0 || std::any_of(m.nodes.begin(), m.nodes.end(),
                                         [](const auto& n) { return n.metrics_port != 0; }))
    root["metrics"]["bind_address"] = "0.0.0.0";
  if (root["admin"] && root["admin"].IsMap()) {
    YAML::Node admin = root["admin"];
    admin.remove("token");
    admin.remove("create_if_missing");
    if (!m.admin.token.empty() || !m.admin.token_file.empty())
      admin["token_file"] = k8s_admin_token_path;
    if (m.admin.port != 0 || std::any_of(m.nodes.begin(), m.nodes.end(),
                                         [](const auto& n) { return n.admin_port != 0; }))
      admin["bind_address"] = "0.0.0.0";
  }
  if (root["cluster_secret"] && root["cluster_secret"].IsMap()) {
    YAML::Node secret = root["cluster_secret"];
    // Every pod reads the one Secret: none may create a secret of its own.
    secret.remove("create_if_missing");
    secret["file"] = k8s_cluster_secret_path;
  }
  YAML::Emitter out;
  out << YAML::Comment("rendered by strata render k8s from " + m.file.filename().string() +
                       ": paths are the pods' volumes, hosts their DNS names; the secrets are "
                       "in Secrets")
      << YAML::Newline << root;
  if (!out.good())
    return error(errc::invalid_argument, m.file.string() + ": " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace strata::deploy
