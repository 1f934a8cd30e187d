// The admin API end to end with real processes: `strata node` serves it on
// the manifest's admin port (a free loopback port, token from a file);
// `strata status`, `scale`, `checkpoint create` and `stop` talk to it; a
// request without the token is refused (401); the node stops gracefully
// and exits 0. Polls with deadlines; no fixed sleeps.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

// A one-node manifest with the admin API on `port`, its token in `token`.
fs::path write_node_manifest(const fs::path& d, uint16_t port, const fs::path& token,
                             int epochs) {
  const fs::path manifest = d / "node.yaml";
  std::ofstream(manifest)
      << "name: admincli\nmode: async\npartitions: 64\nthreads: 2\n"
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: 2\n  dram_bytes: 256KiB\n  ssd_path: " << (d / "state").string()
      << "\n  map_bytes: 256MiB\n"
      << "caches:\n  count: 1\n  sets: 8\n"
      << "workers:\n  count: 2\n  batch_size: 16\n  epochs: " << epochs << "\n"
      << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: 20000\n    distinct_keys: 20000\n    seed: 9\n"
      << "admin:\n  port: " << port << "\n  token_file: " << token.string() << "\n"
      << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  at_stop: false\n"
      << "  round_batches: 16\n";
  return manifest;
}

TEST(AdminCli, StatusScaleCheckpointStopAgainstARunningNode) {
  temp_dir dir;
  const fs::path d = dir.path();
  const uint16_t port = testing::free_port();
  const std::string admin = "127.0.0.1:" + std::to_string(port);
  const fs::path token = d / "token";
  std::ofstream(token) << "node-token-1234567890\n";
  fs::permissions(token, fs::perms::owner_read | fs::perms::owner_write);  // a secret: owner-only
  const fs::path manifest = write_node_manifest(d, port, token, 1000);
  strata_process node({"node", "--manifest", manifest.string()}, d / "node.out", d / "node.err");

  int calls = 0;
  // Runs a CLI verb; returns (exit code, stdout, stderr).
  auto cli = [&](std::vector<std::string> args) {
    const auto n = std::to_string(calls++);
    strata_process p(args, d / ("cli" + n + ".out"), d / ("cli" + n + ".err"));
    auto st = p.wait(120);
    const int rc = st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
    return std::make_tuple(rc, p.out(), p.err());
  };
  const std::vector<std::string> auth = {"--admin", admin, "--token-file", token.string()};
  auto with_auth = [&](std::vector<std::string> verb) {
    verb.insert(verb.end(), auth.begin(), auth.end());
    return verb;
  };

  // The node trains and its admin API answers.
  std::string status;
  ASSERT_TRUE(poll_until(
      [&] {
        auto [rc, out, err] = cli(with_auth({"status", "--json"}));
        status = out;
        return rc == 0 && out.find("\"state\": \"training\"") != std::string::npos;
      },
      120))
      << "no training status from " << admin << ": " << status << "\nnode: " << node.err();
  EXPECT_NE(status.find("\"epoch\": 1"), std::string::npos) << status;

  auto [rc401, out401, err401] = cli({"status", "--admin", admin});
  EXPECT_EQ(rc401, 1);
  EXPECT_NE(err401.find("HTTP 401"), std::string::npos) << err401;

  auto [rcs, scaled, errs] = cli(with_auth({"scale", "--shards", "3"}));
  EXPECT_EQ(rcs, 0) << errs;
  EXPECT_NE(scaled.find("\"shards\": 3"), std::string::npos) << scaled;
  EXPECT_NE(scaled.find("\"epoch\": 2"), std::string::npos) << scaled;

  auto [rcc, ck, errc] = cli(with_auth({"checkpoint", "create"}));
  EXPECT_EQ(rcc, 0) << errc;
  EXPECT_NE(ck.find("ckpt-"), std::string::npos) << ck;

  auto [rcx, stopped, errx] = cli(with_auth({"stop"}));
  EXPECT_EQ(rcx, 0) << errx;
  EXPECT_NE(stopped.find("\"stopping\": true"), std::string::npos) << stopped;
  auto st = node.wait(120);
  ASSERT_TRUE(st) << "the node did not stop";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << node.err();
  EXPECT_NE(node.out().find("admin: serving http://127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << node.out();
}

// Issue 16 item 6: the placeholder an older `strata render k8s` wrote into
// the token's Secret worked as a real token, and so did a token file every
// user could read. `strata node` now refuses both at start, naming the
// field and the file (before: it trained, exit 0).
TEST(AdminCli, ANodeRefusesAPlaceholderOrOthersReadableTokenAtStart) {
  temp_dir dir;
  const fs::path d = dir.path();
  const fs::path token = d / "token";
  struct refused_case {
    std::string content;
    fs::perms mode;
    std::string said;
  };
  for (const auto& [content, mode, said] :
       {refused_case{"REPLACE-WITH-THE-ADMIN-TOKEN", fs::perms(0600),
                     "node.yaml: admin.token_file: " + token.string() + " holds a placeholder"},
        refused_case{"a-real-looking-token-0123456789", fs::perms(0644),
                     "chmod 600 " + token.string()}}) {
    fs::remove(token);
    std::ofstream(token) << content << "\n";
    fs::permissions(token, mode);
    const auto manifest = write_node_manifest(d, testing::free_port(), token, 1);
    strata_process node({"node", "--manifest", manifest.string()}, d / "node.out",
                        d / "node.err");
    auto st = node.wait(120);
    ASSERT_TRUE(st) << "the node did not exit";
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) != 0) << content << ": " << node.out();
    EXPECT_NE(node.err().find(said), std::string::npos) << node.err();
  }
}

}  // namespace
}  // namespace strata
