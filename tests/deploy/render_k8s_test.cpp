// `strata render k8s`: the objects a manifest renders to (one StatefulSet
// per node with an SSD volume claim and scrape annotations, a headless
// Service, the manifest in a ConfigMap, the token in a Secret), read back
// as YAML; and the whole stream validated offline against Kubernetes'
// schemas by the npm package kubernetes-models (tests/deploy/k8s_check.js;
// skipped with the reason when node or the package is missing).
#include "deploy/render_k8s.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "deploy/placeholder_secret.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Secrets as read_k8s_secrets would give them (the examples' files are not
// on this machine).
const k8s_secrets test_secrets{"admin-token-for-render-tests-0123",
                               "cluster-secret-for-render-0123"};

std::string rendered(const std::string& example, const k8s_options& o = {}) {
  const std::string path = STRATA_SOURCE_DIR "/deploy/examples/" + example + ".yaml";
  auto m = load_manifest(path);
  EXPECT_TRUE(m) << (m ? "" : m.err().message());
  if (!m) return "";
  auto text = render_k8s(*m, read(path), o, test_secrets);
  EXPECT_TRUE(text) << (text ? "" : text.err().message());
  return text ? *text : "";
}

// The volume mount of `pod` named `name` (a null node when there is none).
YAML::Node mount_of(const YAML::Node& pod, const std::string& name) {
  for (const auto& v : pod["spec"]["containers"][0]["volumeMounts"])
    if (v["name"].as<std::string>() == name) return v;
  return YAML::Node();
}
YAML::Node volume_of(const YAML::Node& pod, const std::string& name) {
  for (const auto& v : pod["spec"]["volumes"])
    if (v["name"].as<std::string>() == name) return v;
  return YAML::Node();
}

TEST(RenderK8s, Cluster3HasTheExpectedObjects) {
  k8s_options o;
  o.namespace_name = "ml";
  o.ssd_size = "500Gi";
  const std::string text = rendered("cluster3", o);
  const auto docs = YAML::LoadAll(text);
  // ConfigMap, 2 Secrets, the checkpoint claim, and a Service and a
  // StatefulSet per node (data.generate: each pod's data is its own).
  ASSERT_EQ(docs.size(), 10u) << text;
  EXPECT_EQ(docs[0]["kind"].as<std::string>(), "ConfigMap");
  EXPECT_NE(docs[0]["data"]["manifest.yaml"].as<std::string>().find("name: cluster3"),
            std::string::npos);
  EXPECT_EQ(docs[1]["kind"].as<std::string>(), "Secret");
  EXPECT_EQ(docs[1]["metadata"]["name"].as<std::string>(), "cluster3-admin-token");
  EXPECT_EQ(docs[2]["kind"].as<std::string>(), "Secret");
  EXPECT_EQ(docs[2]["metadata"]["name"].as<std::string>(), "cluster3-cluster-secret");
  EXPECT_EQ(docs[3]["kind"].as<std::string>(), "PersistentVolumeClaim");
  EXPECT_EQ(docs[3]["metadata"]["name"].as<std::string>(), "cluster3-checkpoints");
  const char* nodes[] = {"n0", "n1", "n2"};
  for (int i = 0; i < 3; ++i) {
    const auto& svc = docs[4 + 2 * i];
    EXPECT_EQ(svc["kind"].as<std::string>(), "Service");
    EXPECT_EQ(svc["metadata"]["name"].as<std::string>(), std::string("cluster3-") + nodes[i]);
    EXPECT_EQ(svc["spec"]["clusterIP"].as<std::string>(), "None");
    const auto& sts = docs[5 + 2 * i];
    EXPECT_EQ(sts["kind"].as<std::string>(), "StatefulSet");
    EXPECT_EQ(sts["metadata"]["name"].as<std::string>(), std::string("cluster3-") + nodes[i]);
    EXPECT_EQ(sts["metadata"]["namespace"].as<std::string>(), "ml");
    EXPECT_EQ(sts["spec"]["serviceName"].as<std::string>(), std::string("cluster3-") + nodes[i]);
    const auto pod = sts["spec"]["template"];
    EXPECT_EQ(pod["metadata"]["labels"]["strata/role"].as<std::string>(),
              i == 0 ? "coordinator" : "node");
    EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/scrape"].as<std::string>(), "true");
    EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(),
              std::to_string(9471 + i));
    const auto args = pod["spec"]["containers"][0]["args"];
    EXPECT_EQ(args[args.size() - 1].as<std::string>(), nodes[i]);
    EXPECT_EQ(mount_of(pod, "ssd")["mountPath"].as<std::string>(), k8s_ssd_path);
    // Every node pod reads both secrets, owner-only.
    EXPECT_EQ(mount_of(pod, "cluster-secret")["mountPath"].as<std::string>(),
              "/etc/strata/cluster");
    EXPECT_EQ(mount_of(pod, "admin-token")["mountPath"].as<std::string>(), "/etc/strata/admin");
    EXPECT_EQ(volume_of(pod, "cluster-secret")["secret"]["secretName"].as<std::string>(),
              "cluster3-cluster-secret");
    EXPECT_EQ(volume_of(pod, "cluster-secret")["secret"]["defaultMode"].as<int>(), 0400);
    EXPECT_EQ(volume_of(pod, "admin-token")["secret"]["defaultMode"].as<int>(), 0400);
    const auto claim = sts["spec"]["volumeClaimTemplates"][0];
    EXPECT_EQ(claim["metadata"]["name"].as<std::string>(), "ssd");
    EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"].as<std::string>(), "500Gi");
  }
}

TEST(RenderK8s, ValidKubernetesObjectsOffline) {
  strata::testing::temp_dir dir;
  for (const char* example : {"local", "cluster3", "large"}) {
    const std::string out = (dir.path() / (std::string(example) + ".yaml")).string();
    std::ofstream(out) << rendered(example);
    const std::string cmd = "NODE_PATH=" STRATA_SOURCE_DIR
                            "/.ci/tools/node_modules node " STRATA_SOURCE_DIR
                            "/tests/deploy/k8s_check.js '" +
                            out + "' 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string result;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, pipe)) result += buf;
    const int status = ::pclose(pipe);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 2 || rc == 127)
      GTEST_SKIP()
          << "kubernetes-models not available (deploy/install-deps.sh installs it into .ci/tools): "
          << result;
    EXPECT_EQ(rc, 0) << example << ": " << result;
    EXPECT_EQ(result.rfind("ok: ConfigMap/", 0), 0u) << result;
  }
}

// Issue 16 item 6: the raw manifest, inline admin.token included, went into
// the ConfigMap. Secrets go only into Secrets; the ConfigMap's manifest
// reads them from the mounted files and still parses.
TEST(RenderK8s, InlineTokenAndClusterSecretGoOnlyIntoSecrets) {
  strata::testing::temp_dir dir;
  const std::string path = STRATA_SOURCE_DIR "/deploy/examples/cluster3.yaml";
  std::string text = read(path);
  const std::string token = "inline-admin-token-abcdef0123456789";
  const auto at = text.find("  token_file: data/cluster3.token");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("  token_file: data/cluster3.token").size(), "  token: " + token);
  const auto create = text.find("  create_if_missing: true  # the first launch writes");
  ASSERT_NE(create, std::string::npos);
  text.erase(create, text.find('\n', create) + 1 - create);
  // The cluster secret's file, as launch creates it.
  const auto secret_file = dir.path() / "cluster3.secret";
  const std::string secret_value = "cluster-secret-value-0123456789abcdef";
  {
    std::ofstream(secret_file) << secret_value << "\n";
    std::filesystem::permissions(
        secret_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  const auto file_at = text.find("  file: data/cluster3.secret");
  ASSERT_NE(file_at, std::string::npos);
  text.replace(file_at, std::string("  file: data/cluster3.secret").size(),
               "  file: " + secret_file.string());
  auto m = parse_manifest(text, "cluster3.yaml");
  ASSERT_TRUE(m) << m.err().message();
  ASSERT_EQ(m->admin.token, token);
  std::ostringstream notes;
  auto secrets = read_k8s_secrets(*m, notes);
  ASSERT_TRUE(secrets) << secrets.err().message();
  auto out = render_k8s(*m, text, {}, *secrets);
  ASSERT_TRUE(out) << out.err().message();
  int secrets_with_token = 0, secrets_with_secret = 0;
  for (const auto& doc : YAML::LoadAll(*out)) {
    const std::string kind = doc["kind"].as<std::string>();
    std::ostringstream one;
    one << doc;
    if (kind == "Secret") {
      secrets_with_token += one.str().find(token) != std::string::npos;
      secrets_with_secret += one.str().find(secret_value) != std::string::npos;
      continue;
    }
    EXPECT_EQ(one.str().find(token), std::string::npos) << kind << " holds the token:\n"
                                                        << one.str();
    EXPECT_EQ(one.str().find(secret_value), std::string::npos) << kind << ":\n" << one.str();
    if (kind != "ConfigMap") continue;
    // The manifest the pods read: its secrets are the mounted files.
    const std::string manifest_text = doc["data"]["manifest.yaml"].as<std::string>();
    auto in_pod = parse_manifest(manifest_text, "manifest.yaml");
    ASSERT_TRUE(in_pod) << in_pod.err().message() << "\n" << manifest_text;
    EXPECT_TRUE(in_pod->admin.token.empty());
    EXPECT_EQ(in_pod->admin.token_file, k8s_admin_token_path);
    EXPECT_FALSE(in_pod->admin.create_if_missing);
    EXPECT_EQ(in_pod->cluster_secret.file, k8s_cluster_secret_path);
    EXPECT_FALSE(in_pod->cluster_secret.create_if_missing);
    EXPECT_EQ(in_pod->cluster.name, "cluster3");
    EXPECT_EQ(in_pod->nodes.size(), 3u);
  }
  EXPECT_EQ(secrets_with_token, 1) << *out;
  EXPECT_EQ(secrets_with_secret, 1) << *out;
  // No placeholder anywhere: nothing that works as a token everyone knows.
  EXPECT_EQ(out->find(k8s_token_placeholder), std::string::npos);
}

// `tables:` (issue 20) passes into the pods' manifest as written: the
// ConfigMap's copy parses to the same table, width and slot mapping.
TEST(RenderK8s, ATablesListReachesThePodsManifest) {
  std::string text = read(STRATA_SOURCE_DIR "/deploy/examples/cluster3.yaml");
  const std::string from = "table:\n  name: ctr\n";
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "tables:\n- name: ctr\n  dim: 13\n");
  // The rest of the table's fields move under the list entry.
  for (const char* field : {"  seed: 7\n", "  optimizer:\n", "    kind: adagrad\n",
                            "    learning_rate: 0.1\n", "  initializer:\n", "    kind: normal\n",
                            "    stddev: 0.01\n"}) {
    const auto f = text.find(field, at);
    ASSERT_NE(f, std::string::npos) << field;
  }
  const auto model = text.find("model:\n");
  ASSERT_NE(model, std::string::npos);
  text.insert(model + 7, "  slot_tables: {C1: ctr}\n");
  auto m = parse_manifest(text, "cluster3.yaml");
  ASSERT_TRUE(m) << m.err().message() << "\n" << text;
  EXPECT_EQ(m->cluster.table.name, "ctr");
  EXPECT_EQ(m->cluster.table.layout.dim, 13u);
  EXPECT_EQ(m->cluster.table.optimizer.kind, optimizer_kind::adagrad);
  auto out = render_k8s(*m, text, {}, test_secrets);
  ASSERT_TRUE(out) << out.err().message();
  bool seen = false;
  for (const auto& doc : YAML::LoadAll(*out)) {
    if (doc["kind"].as<std::string>() != "ConfigMap") continue;
    const std::string manifest_text = doc["data"]["manifest.yaml"].as<std::string>();
    auto in_pod = parse_manifest(manifest_text, "manifest.yaml");
    ASSERT_TRUE(in_pod) << in_pod.err().message() << "\n" << manifest_text;
    EXPECT_EQ(in_pod->cluster.table.name, "ctr");
    EXPECT_EQ(in_pod->cluster.table.layout.dim, 13u);
    EXPECT_EQ(in_pod->cluster.model.embedding_dim, 12u);
    EXPECT_NE(manifest_text.find("slot_tables"), std::string::npos) << manifest_text;
    seen = true;
  }
  EXPECT_TRUE(seen) << *out;
}

manifest with_admin(const std::string& admin_lines) {
  const std::string path = STRATA_SOURCE_DIR "/deploy/examples/local.yaml";
  auto m = parse_manifest(read(path) + "admin:\n  port: 7070\n" + admin_lines, "local.yaml");
  EXPECT_TRUE(m) << m.err().message();
  return m ? *m : manifest{};
}

TEST(RenderK8s, SecretFilesReadableByOthersOrPlaceholdersAreRefused) {
  strata::testing::temp_dir dir;
  const auto file = dir.path() / "admin.token";
  std::ofstream(file) << "a-real-looking-token-0123456789\n";
  std::filesystem::permissions(file, std::filesystem::perms(0644));
  const auto m = with_admin("  token_file: " + file.string() + "\n");
  std::ostringstream notes;
  auto open = read_k8s_secrets(m, notes);
  ASSERT_FALSE(open);
  EXPECT_NE(open.err().message().find("local.yaml: admin.token_file"), std::string::npos)
      << open.err().message();
  EXPECT_NE(open.err().message().find("chmod 600 " + file.string()), std::string::npos)
      << open.err().message();
  // The node refuses it the same way at start.
  auto at_start = admin_token(m);
  ASSERT_FALSE(at_start);
  EXPECT_NE(at_start.err().message().find("chmod 600 " + file.string()), std::string::npos)
      << at_start.err().message();

  // The placeholder an older render wrote into the Secret: refused at start.
  std::filesystem::remove(file);
  std::ofstream(file) << k8s_token_placeholder << "\n";
  std::filesystem::permissions(file, std::filesystem::perms(0600));
  for (auto r : {admin_token(m), [&] {
                   auto s = read_k8s_secrets(m, notes);
                   return s ? expected<std::string>(std::string()) : expected<std::string>(s.err());
                 }()}) {
    ASSERT_FALSE(r);
    EXPECT_NE(r.err().message().find("local.yaml: admin.token_file: " + file.string() +
                                     " holds a placeholder"),
              std::string::npos)
        << r.err().message();
  }
  for (const char* inline_token :
       {"REPLACE-WITH-THE-ADMIN-TOKEN", "changeme", "<token>", "xxxxxxxxxxxxxxxxxxxx"}) {
    auto r = admin_token(with_admin(std::string("  token: \"") + inline_token + "\"\n"));
    ASSERT_FALSE(r) << inline_token;
    EXPECT_NE(r.err().message().find("local.yaml: admin.token holds a placeholder"),
              std::string::npos)
        << r.err().message();
  }
  auto real = admin_token(with_admin("  token: s3cret-token-for-tests\n"));
  ASSERT_TRUE(real) << real.err().message();
}

TEST(RenderK8s, AbsentSecretFilesAreCreatedOrLeftToKubectl) {
  strata::testing::temp_dir dir;
  const auto file = dir.path() / "sub" / "admin.token";
  // Absent, not to be created: no Secret, the note says how to make it.
  std::ostringstream notes;
  auto left = read_k8s_secrets(with_admin("  token_file: " + file.string() + "\n"), notes);
  ASSERT_TRUE(left) << left.err().message();
  EXPECT_FALSE(left->admin_token);
  EXPECT_NE(notes.str().find("kubectl create secret generic demo-admin-token --from-file=token="),
            std::string::npos)
      << notes.str();
  EXPECT_FALSE(std::filesystem::exists(file));
  // create_if_missing: created here (0600), as launch would, and rendered.
  auto made = read_k8s_secrets(
      with_admin("  token_file: " + file.string() + "\n  create_if_missing: true\n"), notes);
  ASSERT_TRUE(made) << made.err().message();
  ASSERT_TRUE(made->admin_token);
  EXPECT_GE(made->admin_token->size(), 16u);
  EXPECT_EQ(std::filesystem::status(file).permissions() & std::filesystem::perms::all,
            std::filesystem::perms(0600));
}

}  // namespace
}  // namespace strata::deploy
