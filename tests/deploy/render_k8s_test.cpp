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
#include <fstream>
#include <sstream>

#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string rendered(const std::string& example, const k8s_options& o = {}) {
  const std::string path = STRATA_SOURCE_DIR "/deploy/examples/" + example + ".yaml";
  auto m = load_manifest(path);
  EXPECT_TRUE(m) << (m ? "" : m.err().message());
  return m ? render_k8s(*m, read(path), o) : "";
}

TEST(RenderK8s, Cluster3HasTheExpectedObjects) {
  k8s_options o;
  o.namespace_name = "ml";
  o.ssd_size = "500Gi";
  const std::string text = rendered("cluster3", o);
  const auto docs = YAML::LoadAll(text);
  ASSERT_EQ(docs.size(), 6u) << text;
  EXPECT_EQ(docs[0]["kind"].as<std::string>(), "ConfigMap");
  EXPECT_NE(docs[0]["data"]["manifest.yaml"].as<std::string>().find("name: cluster3"),
            std::string::npos);
  EXPECT_EQ(docs[1]["kind"].as<std::string>(), "Secret");
  EXPECT_EQ(docs[2]["kind"].as<std::string>(), "Service");
  EXPECT_EQ(docs[2]["spec"]["clusterIP"].as<std::string>(), "None");
  const char* nodes[] = {"n0", "n1", "n2"};
  for (int i = 0; i < 3; ++i) {
    const auto& sts = docs[3 + i];
    EXPECT_EQ(sts["kind"].as<std::string>(), "StatefulSet");
    EXPECT_EQ(sts["metadata"]["name"].as<std::string>(), std::string("cluster3-") + nodes[i]);
    EXPECT_EQ(sts["metadata"]["namespace"].as<std::string>(), "ml");
    EXPECT_EQ(sts["spec"]["serviceName"].as<std::string>(), "cluster3");
    const auto pod = sts["spec"]["template"];
    EXPECT_EQ(pod["metadata"]["labels"]["strata/role"].as<std::string>(),
              i == 0 ? "coordinator" : "node");
    EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/scrape"].as<std::string>(), "true");
    EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(),
              std::to_string(9471 + i));
    const auto args = pod["spec"]["containers"][0]["args"];
    EXPECT_EQ(args[args.size() - 1].as<std::string>(), nodes[i]);
    EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][2]["mountPath"].as<std::string>(),
              std::string("data/cluster3/") + nodes[i]);
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
      GTEST_SKIP() << "kubernetes-models not available (deploy/install-deps.sh installs it into .ci/tools): "
                   << result;
    EXPECT_EQ(rc, 0) << example << ": " << result;
    EXPECT_EQ(result.rfind("ok: ConfigMap/", 0), 0u) << result;
  }
}

}  // namespace
}  // namespace strata::deploy
