// Files a manifest needs, checked before any node starts: secret files
// created when the manifest allows it (random, mode 0600), missing ones
// named with their field, and `strata launch` failing before it starts a
// node process.
#include "deploy/preflight.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

namespace fs = std::filesystem;
using strata::testing::temp_dir;

std::string read_file(const fs::path& p) { return child_process::slurp(p); }

TEST(SecretFile, CreatedRandomWithMode0600WhenAllowed) {
  temp_dir dir;
  const fs::path file = dir.path() / "sub" / "cluster.token";
  auto created = ensure_secret_file(file, true, "m.yaml: admin.token_file");
  ASSERT_TRUE(created) << created.err().message();
  EXPECT_TRUE(*created);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string token = read_file(file);
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}\n"))) << token;
  // A second call keeps it; another file gets another secret.
  auto again = ensure_secret_file(file, true, "m.yaml: admin.token_file");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  EXPECT_EQ(read_file(file), token);
  const fs::path other = dir.path() / "other.token";
  ASSERT_TRUE(ensure_secret_file(other, true, "x"));
  EXPECT_NE(read_file(other), token);
}

TEST(SecretFile, MissingWithoutPermissionNamesFieldAndPath) {
  temp_dir dir;
  const fs::path file = dir.path() / "absent.token";
  auto r = ensure_secret_file(file, false, "m.yaml: admin.token_file");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message().find("m.yaml: admin.token_file: " + file.string() +
                                   " does not exist"),
            std::string::npos)
      << r.err().message();
  EXPECT_NE(r.err().message().find("create_if_missing: true"), std::string::npos);
  EXPECT_FALSE(fs::exists(file));
}

TEST(SecretFile, AnEmptyFileIsRefused) {
  temp_dir dir;
  const fs::path file = dir.path() / "empty.token";
  std::ofstream(file).close();
  auto r = ensure_secret_file(file, true, "m.yaml: admin.token_file");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message().find("is empty"), std::string::npos) << r.err().message();
}

TEST(Preflight, CreateIfMissingNeedsATokenFile) {
  auto m = parse_manifest(
      "name: t\nshards:\n  ssd_path: s\ndata:\n  path: d.tsv\n"
      "admin:\n  port: 7000\n  token: abc\n  create_if_missing: true\n",
      "t.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().message().find("admin.create_if_missing: needs admin.token_file"),
            std::string::npos)
      << m.err().message();
}

// A two-node manifest whose data file is missing (no generate block).
std::string two_nodes(const fs::path& d, bool create) {
  std::ostringstream m;
  m << "name: pre\nnodes:\n"
    << "  - name: a\n    host: 127.0.0.1\n    transport_port: 1\n    ssd_path: " << (d / "a").string()
    << "\n  - name: b\n    host: 127.0.0.1\n    transport_port: 2\n    ssd_path: "
    << (d / "b").string() << "\nshards:\n  ssd_path: " << (d / "state").string()
    << "\ndata:\n  path: " << (d / "missing.tsv").string() << "\nadmin:\n  port: 7999\n"
    << "  token_file: " << (d / "tok" / "admin.token").string() << "\n"
    << "  create_if_missing: " << (create ? "true" : "false") << "\n";
  return m.str();
}

struct launch_result {
  std::string out, err;
};

// `strata launch` of two_nodes(dir, create), which must end with status 1.
launch_result launch_expecting_failure(const fs::path& dir, bool create) {
  const fs::path manifest = dir / "pre.yaml";
  std::ofstream(manifest) << two_nodes(dir, create);
  strata_process p({"launch", manifest.string()}, dir / "out", dir / "err");
  auto st = p.wait(60);
  EXPECT_TRUE(st) << "launch did not end";
  EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << p.err();
  return {p.out(), p.err()};
}

TEST(Preflight, LaunchFailsBeforeAnyNodeStartsNamingTheMissingFile) {
  temp_dir dir;
  const auto r = launch_expecting_failure(dir.path(), false);
  EXPECT_NE(r.err.find("pre.yaml: admin.token_file: " +
                       (dir.path() / "tok" / "admin.token").string() + " does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("launch: starting"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() / "tok" / "admin.token"));
}

TEST(Preflight, LaunchCreatesTheTokenThenNamesTheMissingDataFile) {
  temp_dir dir;
  const auto r = launch_expecting_failure(dir.path(), true);
  const fs::path token = dir.path() / "tok" / "admin.token";
  EXPECT_NE(r.out.find("admin: created the token file " + token.string() + " (mode 0600)"),
            std::string::npos)
      << r.out;
  struct stat s {};
  ASSERT_EQ(::stat(token.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0600u);
  EXPECT_NE(r.err.find("pre.yaml: data.path: " + (dir.path() / "missing.tsv").string() +
                       " does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("launch: starting"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace strata::deploy
