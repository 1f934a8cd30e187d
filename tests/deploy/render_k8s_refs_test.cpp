// `strata render k8s` output read back as Kubernetes would use it (issue
// 22): every path of the manifest in the ConfigMap is under a volume mount
// of the container; token_file and cluster_secret.file are the files of the
// mounted Secrets' keys; each node's Service ports are the node's manifest
// ports, named by role, and its container's; every host is the DNS name of
// its node's pod; listeners with a port are bound to the pod's address;
// probes hit a port the container has; memory follows the start
// allocations; no admin Secret without an admin section.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "deploy/host_memory.hpp"
#include "deploy/manifest.hpp"
#include "deploy/render_k8s.hpp"

namespace strata::deploy {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string example(const std::string& name) {
  return read(STRATA_SOURCE_DIR "/deploy/examples/" + name + ".yaml");
}

struct rendered {
  manifest source;  // as written
  manifest in_pod;  // the ConfigMap's manifest, parsed
  std::vector<YAML::Node> docs;
  std::map<std::string, YAML::Node> by_name;  // "Kind/name"
};

// Renders `text` with both secrets known, as `strata render k8s` does.
rendered render(const std::string& text, const std::string& label, const k8s_options& o = {}) {
  rendered r;
  auto m = parse_manifest(text, label);
  EXPECT_TRUE(m) << m.err().message();
  if (!m) return r;
  r.source = *m;
  auto out = render_k8s(*m, text, o,
                        {"admin-token-for-reference-tests-01", "cluster-secret-0123456789abcdef"});
  EXPECT_TRUE(out) << out.err().message();
  if (!out) return r;
  r.docs = YAML::LoadAll(*out);
  for (const auto& d : r.docs)
    r.by_name[d["kind"].as<std::string>() + "/" + d["metadata"]["name"].as<std::string>()] = d;
  for (const auto& d : r.docs)
    if (d["kind"].as<std::string>() == "ConfigMap") {
      auto pod = parse_manifest(d["data"]["manifest.yaml"].as<std::string>(), "manifest.yaml");
      EXPECT_TRUE(pod) << pod.err().message();
      if (pod) r.in_pod = *pod;
    }
  return r;
}

std::vector<YAML::Node> of_kind(const rendered& r, const std::string& kind) {
  std::vector<YAML::Node> out;
  for (const auto& d : r.docs)
    if (d["kind"].as<std::string>() == kind) out.push_back(d);
  return out;
}

YAML::Node container_of(const YAML::Node& sts) {
  return sts["spec"]["template"]["spec"]["containers"][0];
}

// `path` is absolute and at or below a mount of `container` (not the
// manifest's own file); returns that mount's volume name, or "".
std::string mount_holding(const YAML::Node& container, const fs::path& path) {
  if (!path.is_absolute()) return "";
  std::string best;
  size_t best_len = 0;
  for (const auto& v : container["volumeMounts"]) {
    const fs::path at = v["mountPath"].as<std::string>();
    if (v["subPath"]) continue;
    const auto rel = path.lexically_normal().lexically_relative(at);
    if (rel.empty() || *rel.begin() == "..") continue;
    if (at.string().size() > best_len) {
      best = v["name"].as<std::string>();
      best_len = at.string().size();
    }
  }
  return best;
}

YAML::Node volume_named(const YAML::Node& sts, const std::string& name) {
  for (const auto& v : sts["spec"]["template"]["spec"]["volumes"])
    if (v["name"].as<std::string>() == name) return v;
  return YAML::Node();
}

bool claim_template_named(const YAML::Node& sts, const std::string& name) {
  for (const auto& c : sts["spec"]["volumeClaimTemplates"])
    if (c["metadata"]["name"].as<std::string>() == name) return true;
  return false;
}

// Every cross-reference of one rendering.
void check_references(const rendered& r, const k8s_options& o = {}) {
  const manifest& src = r.source;
  const manifest& pod = r.in_pod;
  const auto sets = of_kind(r, "StatefulSet");
  ASSERT_EQ(sets.size(), std::max<size_t>(1, src.nodes.size()));

  // The paths the pods use, by field.
  std::vector<std::pair<std::string, fs::path>> paths = {{"shards.ssd_path", pod.ssd_path}};
  for (size_t i = 0; i < pod.cluster.shards.size(); ++i)
    paths.push_back({"shard " + std::to_string(i), pod.cluster.shards[i].lmdb.directory});
  for (const auto& n : pod.nodes)
    if (!n.ssd_path.empty()) paths.push_back({"nodes." + n.name + ".ssd_path", n.ssd_path});
  if (!pod.data.path.empty()) paths.push_back({"data.path", pod.data.path});
  if (pod.cluster.checkpoint.enabled())
    paths.push_back({"checkpoint.dir", pod.cluster.checkpoint.directory});
  if (!pod.admin.token_file.empty()) paths.push_back({"admin.token_file", pod.admin.token_file});
  if (!pod.cluster_secret.file.empty())
    paths.push_back({"cluster_secret.file", pod.cluster_secret.file});
  if (pod.serving.present) {
    paths.push_back({"serving.lmdb_path", pod.serving.lmdb_path});
    if (!pod.serving.checkpoint.empty())
      paths.push_back({"serving.checkpoint", pod.serving.checkpoint});
  }
  EXPECT_EQ(pod.data.path.empty(), src.data.path.empty());
  EXPECT_EQ(pod.cluster.checkpoint.enabled(), src.cluster.checkpoint.enabled());

  for (size_t i = 0; i < sets.size(); ++i) {
    const auto& sts = sets[i];
    const auto container = container_of(sts);
    const std::string sts_name = sts["metadata"]["name"].as<std::string>();
    SCOPED_TRACE(sts_name);
    // Paths: each under a mount backed by a volume or a claim template.
    for (const auto& [field, path] : paths) {
      const std::string volume = mount_holding(container, path);
      EXPECT_NE(volume, "") << field << " " << path << " is under no mount";
      if (volume.empty()) continue;
      EXPECT_TRUE(volume_named(sts, volume) || claim_template_named(sts, volume))
          << field << ": mount " << volume << " has no volume";
    }
    // The shard state lives on a persistent volume of the pod's own.
    EXPECT_EQ(mount_holding(container, pod.ssd_path), "ssd");
    EXPECT_TRUE(claim_template_named(sts, "ssd"));
    // Shared volumes: their claims exist.
    for (const auto& v : sts["spec"]["template"]["spec"]["volumes"])
      if (v["persistentVolumeClaim"])
        EXPECT_TRUE(r.by_name.count("PersistentVolumeClaim/" +
                                    v["persistentVolumeClaim"]["claimName"].as<std::string>()))
            << v["name"];

    // Secrets: the file the manifest reads is a key of the mounted Secret.
    const auto secret_file = [&](const fs::path& file, const std::string& key) {
      const std::string volume = mount_holding(container, file);
      ASSERT_NE(volume, "") << file;
      const auto v = volume_named(sts, volume);
      ASSERT_TRUE(v["secret"]) << volume << " is not a Secret";
      const std::string secret = v["secret"]["secretName"].as<std::string>();
      ASSERT_TRUE(r.by_name.count("Secret/" + secret)) << secret;
      EXPECT_EQ(file.filename().string(), key);
      EXPECT_TRUE(r.by_name.at("Secret/" + secret)["stringData"][key])
          << secret << " has no " << key;
    };
    if (!pod.admin.token_file.empty()) secret_file(pod.admin.token_file, "token");
    if (!pod.cluster_secret.file.empty()) secret_file(pod.cluster_secret.file, "secret");

    // Ports: the node's manifest ports by role, on the Service and the container.
    const std::string service = sts["spec"]["serviceName"].as<std::string>();
    ASSERT_TRUE(r.by_name.count("Service/" + service)) << service;
    const auto svc = r.by_name.at("Service/" + service);
    EXPECT_EQ(svc["spec"]["clusterIP"].as<std::string>(), "None");
    std::map<std::string, uint16_t> want;
    if (src.nodes.empty()) {
      if (src.metrics.port) want["metrics"] = src.metrics.port;
      if (src.admin.port) want["admin"] = src.admin.port;
    } else {
      const auto& n = src.nodes[i];
      if (n.transport_port) want["transport"] = n.transport_port;
      const uint16_t metrics = n.metrics_port ? n.metrics_port : (i == 0 ? src.metrics.port : 0);
      const uint16_t admin = n.admin_port ? n.admin_port : (i == 0 ? src.admin.port : 0);
      if (metrics) want["metrics"] = metrics;
      if (admin) want["admin"] = admin;
    }
    std::map<std::string, uint16_t> service_ports, container_ports;
    for (const auto& p : svc["spec"]["ports"])
      service_ports[p["name"].as<std::string>()] = p["port"].as<uint16_t>();
    for (const auto& p : container["ports"])
      container_ports[p["name"].as<std::string>()] = p["containerPort"].as<uint16_t>();
    EXPECT_EQ(service_ports, want);
    EXPECT_EQ(container_ports, want);
    // The Service selects this pod.
    for (const auto& label : svc["spec"]["selector"])
      EXPECT_EQ(sts["spec"]["template"]["metadata"]["labels"][label.first.as<std::string>()]
                    .as<std::string>(),
                label.second.as<std::string>());
    // Scrape annotations and probes point at ports the container has.
    const auto annotations = sts["spec"]["template"]["metadata"]["annotations"];
    if (want.count("metrics")) {
      EXPECT_EQ(annotations["prometheus.io/port"].as<std::string>(),
                std::to_string(want["metrics"]));
      EXPECT_EQ(pod.metrics.bind_address, "0.0.0.0");
    }
    if (want.count("admin")) {
      EXPECT_EQ(pod.admin.bind_address, "0.0.0.0");
    }
    for (const char* probe : {"readinessProbe", "livenessProbe"}) {
      const auto p = container[probe];
      ASSERT_TRUE(p) << probe;
      const auto target = p["httpGet"] ? p["httpGet"] : p["tcpSocket"];
      ASSERT_TRUE(target) << probe;
      EXPECT_TRUE(container_ports.count(target["port"].as<std::string>())) << probe;
      if (p["httpGet"]) EXPECT_EQ(p["httpGet"]["path"].as<std::string>(), "/metrics");
    }
    // Memory: what the node allocates at start, and more.
    uint64_t allocated = 0;
    for (const auto& item : start_allocations(src, src.nodes.empty() ? "" : src.nodes[i].name))
      allocated += item.bytes;
    for (const char* kind : {"requests", "limits"}) {
      const std::string memory = container["resources"][kind]["memory"].as<std::string>();
      ASSERT_EQ(memory.substr(memory.size() - 2), "Mi") << memory;
      EXPECT_GT(std::stoull(memory) << 20, allocated) << kind << " " << memory;
    }
  }
  // Hosts: the DNS name of the pod of the node's StatefulSet.
  for (size_t i = 0; i < pod.nodes.size(); ++i) {
    const auto& sts = sets[i];
    EXPECT_EQ(container_of(sts)["args"][4].as<std::string>(), pod.nodes[i].name);
    const std::string service = sts["spec"]["serviceName"].as<std::string>();
    std::string host = sts["metadata"]["name"].as<std::string>() + "-0." + service;
    if (!o.namespace_name.empty()) host += "." + o.namespace_name + ".svc";
    EXPECT_EQ(pod.nodes[i].host, host);
  }
  // No admin API: no admin Secret, nothing mounted for it.
  const bool admin = !src.admin.token.empty() || !src.admin.token_file.empty();
  for (const auto& s : of_kind(r, "Secret"))
    if (!admin) EXPECT_EQ(s["stringData"]["token"], YAML::Node()) << s["metadata"]["name"];
  EXPECT_EQ(r.by_name.count("Secret/" + k8s_name(src.cluster.name) + "-admin-token"),
            admin ? 1u : 0u);
}

TEST(RenderK8sReferences, Cluster3) {
  k8s_options o;
  check_references(render(example("cluster3"), "cluster3.yaml", o), o);
  o.namespace_name = "ml";
  check_references(render(example("cluster3"), "cluster3.yaml", o), o);
}

TEST(RenderK8sReferences, LocalHasNoAdminSecret) {
  check_references(render(example("local"), "local.yaml"));
}

TEST(RenderK8sReferences, LargeReadsItsDataFromASharedVolume) {
  const auto r = render(example("large"), "large.yaml");
  check_references(r);
  EXPECT_TRUE(r.by_name.count("PersistentVolumeClaim/large-data"));
  EXPECT_EQ(
      r.by_name.at("PersistentVolumeClaim/large-data")["spec"]["accessModes"][0].as<std::string>(),
      "ReadOnlyMany");
}

// A store (no workers, no data) that serves a checkpoint of its own.
TEST(RenderK8sReferences, StoreWithServing) {
  const std::string store =
      "name: st\nshards:\n  ssd_path: state\nworkers:\n  count: 0\ngateway:\n  port: 7080\n"
      "metrics:\n  port: 9464\ncheckpoint:\n  dir: ck\nserving:\n  checkpoint: ck/ckpt-3\n"
      "  lmdb_path: serving-copy\n";
  const auto r = render(store, "st.yaml");
  check_references(r);
  EXPECT_EQ(r.in_pod.serving.checkpoint, fs::path(k8s_checkpoint_dir) / "ckpt-3");
  // A served checkpoint outside checkpoint.dir is on no volume: refused.
  std::string outside = store;
  outside.replace(outside.find("ck/ckpt-3"), 9, "/elsewhere/ckpt-3");
  auto m = parse_manifest(outside, "st.yaml");
  ASSERT_TRUE(m) << m.err().message();
  auto refused = render_k8s(*m, outside, {}, {});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.err().message().find("st.yaml: serving.checkpoint: not rendered for "
                                         "Kubernetes: /elsewhere/ckpt-3 is not under "
                                         "checkpoint.dir"),
            std::string::npos)
      << refused.err().message();
}

}  // namespace
}  // namespace strata::deploy
