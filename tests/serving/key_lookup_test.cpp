// Keys users can look up (issue 22), end to end with real processes:
// `strata node` trains a tiny run (objective count: every weight counts
// its key's sightings exactly), `strata serve` serves its checkpoint, and
// a key computed from a value of the training data -- by the C++ function,
// by `strata key` and by the Python module's key() -- looks up the trained
// row (version != 0, weight == the value's sightings in the data), not the
// default vector of a miss. `strata keys` (from the checkpoint and from
// the server) and `strata tables` list what is there.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.hpp"
#include "common/child_process.hpp"
#include "model/features.hpp"
#include "tests/sanitize/runtime_preload.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string manifest(const fs::path& d) {
  std::ostringstream m;
  m << "name: keys\nmode: async\npartitions: 64\nthreads: 2\n"
    << "table:\n  name: ctr\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 2\n  dram_bytes: 1MiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n"
    << "caches:\n  count: 1\n  sets: 8\n"
    << "workers:\n  count: 1\n  batch_size: 32\n  epochs: 1\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: 2000\n    distinct_keys: 500\n    seed: 9\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n"
    << "serving:\n  checkpoint: " << (d / "ckpt").string()
    << "\n  lmdb_path: " << (d / "serving").string() << "\n  binary_port: 0\n  http_port: 0\n";
  return m.str();
}

struct ran {
  int exit = -1;
  std::string out, err;
};

// Runs a command to its end (stdout and stderr to files under d).
ran run(const fs::path& d, const std::string& binary, const std::vector<std::string>& args,
        const std::vector<std::string>& env = {}) {
  static int n = 0;
  const fs::path out = d / ("run" + std::to_string(n) + ".out");
  const fs::path err = d / ("run" + std::to_string(n++) + ".err");
  child_process p(binary, args, env, {out, err});
  ran r;
  r.exit = p.wait_exit(300s).value_or(-1);
  r.out = p.output();
  r.err = p.err();
  return r;
}

// /usr/bin/python3 with the Python module on its path (and, in a
// sanitizer build, the sanitizer runtime preloaded: tests/sanitize).
ran python(const fs::path& d, const std::vector<std::string>& args) {
  std::string command = testing::sanitizer_preload() + "PYTHONPATH='" STRATA_PYTHON_MODULE_DIR
                        "' exec /usr/bin/python3";
  for (const auto& a : args) command += " '" + a + "'";  // paths, addresses, hex, digits
  return run(d, "/bin/sh", {"-c", command});
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = line.find('\t', start)) != std::string::npos; start = at + 1)
    out.push_back(line.substr(start, at - start));
  out.push_back(line.substr(start));
  return out;
}

TEST(KeyLookup, AKeyComputedFromTrainingDataFindsTheTrainedRow) {
  testing::temp_dir dir;
  const fs::path d = dir.path();
  std::ofstream(d / "keys.yaml") << manifest(d);
  const std::string bin = STRATA_BINARY;
  auto trained = run(d, bin, {"node", "--manifest", (d / "keys.yaml").string(), "--node", "keys"});
  ASSERT_EQ(trained.exit, 0) << trained.out << trained.err;

  child_process serve(bin, {"serve", (d / "keys.yaml").string(), "--port-file",
                            (d / "ports").string()},
                      {}, {d / "serve.out", d / "serve.err"});
  uint16_t port = 0;
  for (auto until = std::chrono::steady_clock::now() + 120s;
       port == 0 && std::chrono::steady_clock::now() < until && serve.running();) {
    std::ifstream in(d / "ports");
    std::string line;
    if (std::getline(in, line) && line.rfind("binary=", 0) == 0)
      port = static_cast<uint16_t>(std::stoi(line.substr(7)));
    else
      std::this_thread::sleep_for(20ms);
  }
  ASSERT_NE(port, 0) << serve.output() << serve.err();
  const std::string server = "127.0.0.1:" + std::to_string(port);
  auto c = client::serving_client::connect({{{"127.0.0.1", port}}});
  ASSERT_TRUE(c.has_value()) << c.err().to_string();

  // Values of the training data (C1 is column 14, C7 column 20, I3 column
  // 3: an integer bucket) and their sightings in the data.
  std::ifstream data(d / "data.tsv");
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(data, line);) rows.push_back(split_tabs(line));
  ASSERT_EQ(rows.size(), 2000u);
  struct probe {
    std::string slot;
    size_t column;
  };
  for (const probe& p : {probe{"C1", 14}, probe{"C7", 20}, probe{"I3", 3}}) {
    SCOPED_TRACE(p.slot);
    std::string value;  // the first row's that has one
    for (const auto& r : rows)
      if (!(value = r[p.column]).empty()) break;
    ASSERT_FALSE(value.empty());
    auto want = model::feature_key(p.slot, value);
    ASSERT_TRUE(want.has_value()) << want.err().to_string();
    float sightings = 0;
    for (const auto& r : rows)
      if (!r[p.column].empty() && *model::feature_key(p.slot, r[p.column]) == *want) ++sightings;

    // The CLI prints the same key.
    auto cli = run(d, bin, {"key", "--slot", p.slot, "--value", value});
    ASSERT_EQ(cli.exit, 0) << cli.err;
    EXPECT_EQ(cli.out, std::to_string(*want) + "\n");

    // The served row of that key is the trained one: a version, and the
    // weight counts the value's sightings (a miss would be version 0, 0).
    auto got = c->lookup("ctr", std::vector<uint64_t>{*want});
    ASSERT_TRUE(got.has_value()) << got.err().to_string();
    EXPECT_NE(got->versions[0], 0u) << "key " << *want << " of " << p.slot << "=" << value
                                    << " is not stored";
    EXPECT_EQ(got->weights[0], sightings);
  }
  // A value the data never had is a miss: version 0.
  auto absent = c->lookup("ctr", std::vector<uint64_t>{*model::feature_key("C1", "nothere")});
  ASSERT_TRUE(absent.has_value());
  EXPECT_EQ(absent->versions[0], 0u);

  // `strata key` names an unknown slot and a bad integer.
  auto unknown = run(d, bin, {"key", "--slot", "C27", "--value", "68fd1e64"});
  EXPECT_EQ(unknown.exit, 1);
  EXPECT_NE(unknown.err.find("strata key: unknown slot 'C27' (slots: I1..I13 integer and C1..C26"),
            std::string::npos)
      << unknown.err;
  auto bad = run(d, bin, {"key", "--slot", "I1", "--value", "abc"});
  EXPECT_EQ(bad.exit, 1);
  EXPECT_NE(bad.err.find("slot I1 is an integer column: 'abc' is not an integer"),
            std::string::npos)
      << bad.err;

  // `strata keys` from the checkpoint and from the server: stored keys,
  // each found by a lookup.
  for (const auto& from : {std::vector<std::string>{"--checkpoint", (d / "ckpt").string()},
                           std::vector<std::string>{"--server", server}}) {
    SCOPED_TRACE(from[0]);
    std::vector<std::string> args{"keys", "--table", "ctr", "--limit", "7"};
    args.insert(args.end(), from.begin(), from.end());
    auto listed = run(d, bin, args);
    ASSERT_EQ(listed.exit, 0) << listed.err;
    const auto printed = lines_of(listed.out);
    ASSERT_EQ(printed.size(), 7u) << listed.out;
    std::vector<uint64_t> keys;
    for (const auto& l : printed) keys.push_back(std::stoull(l));
    auto got = c->lookup("ctr", keys);
    ASSERT_TRUE(got.has_value());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_NE(got->versions[i], 0u) << keys[i];
      EXPECT_GE(got->weights[i * got->dim], 1.0f) << keys[i];
    }
  }
  auto wrong = run(d, bin, {"keys", "--table", "ads", "--checkpoint", (d / "ckpt").string()});
  EXPECT_EQ(wrong.exit, 1);
  EXPECT_NE(wrong.err.find("unknown table 'ads' (the checkpoint holds: ctr)"), std::string::npos)
      << wrong.err;
  auto wrong_server = run(d, bin, {"keys", "--table", "ads", "--server", server});
  EXPECT_EQ(wrong_server.exit, 1);
  EXPECT_NE(wrong_server.err.find("unknown table 'ads' (served: ctr)"), std::string::npos)
      << wrong_server.err;
  auto nowhere = run(d, bin, {"keys", "--table", "ctr"});
  EXPECT_EQ(nowhere.exit, 1);
  EXPECT_NE(nowhere.err.find("--checkpoint DIR or --server HOST:PORT"), std::string::npos)
      << nowhere.err;
  auto too_many = run(d, bin, {"keys", "--table", "ctr", "--limit", "5000", "--server", server});
  EXPECT_NE(too_many.exit, 0);
  EXPECT_NE(too_many.err.find("5000"), std::string::npos) << too_many.err;

  auto tables = run(d, bin, {"tables", "--server", server});
  ASSERT_EQ(tables.exit, 0) << tables.err;
  auto dims = c->tables();
  ASSERT_TRUE(dims.has_value());
  ASSERT_EQ(dims->size(), 1u);
  EXPECT_EQ(tables.out, "ctr dim " + std::to_string((*dims)[0].dim) + "\n");

  // The Python module: the same key() (the C++ function), tables() and keys().
  const fs::path module_dir = STRATA_PYTHON_MODULE_DIR;
  if (!fs::exists(module_dir)) GTEST_SKIP() << "no Python module built (pybind11 missing)";
  const std::string value = rows[0][14];
  auto py = python(d, {fs::path(STRATA_SOURCE_DIR) / "tests/serving/python_keys_test.py", server,
                      "ctr", "C1", value, std::to_string(*model::feature_key("C1", value))});
  EXPECT_EQ(py.exit, 0) << py.out << py.err;

  // The example script: --help, then its main path against this server
  // with its defaults but the address (table ctr, keys the server lists).
  const std::string example = (fs::path(STRATA_SOURCE_DIR) / "docs/strata_torch_example.py").string();
  auto help = python(d, {example, "--help"});
  if (help.err.find("No module named 'torch'") != std::string::npos)
    GTEST_SKIP() << "python3-torch is not installed (deploy/install-deps.sh --bench)";
  EXPECT_EQ(help.exit, 0) << help.err;
  EXPECT_NE(help.out.find("usage: strata_torch_example.py"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("default ctr"), std::string::npos) << help.out;
  auto example_run = python(d, {example, server, "--steps", "5"});
  EXPECT_EQ(example_run.exit, 0) << example_run.out << example_run.err;
  EXPECT_NE(example_run.out.find("loss: first "), std::string::npos) << example_run.out;
}

}  // namespace
}  // namespace strata
