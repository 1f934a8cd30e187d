// The "done when", end to end with real processes: train with
// `strata node` (checkpoint at stop), serve the checkpoint with `strata
// serve` (rows bit for bit), then train on from that checkpoint with an
// update publisher while serving subscribes: served rows move to the new
// incarnation's versions, never backwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "actors/checkpoint.hpp"
#include "actors/partition_map.hpp"
#include "client/client.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::serving {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

template <class F>
bool eventually(F&& done, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

std::string manifest(const fs::path& d, uint32_t epochs, uint16_t updates_port,
                     uint64_t max_retained_rows = 0) {
  std::ostringstream m;
  m << "name: live\nmode: async\npartitions: 64\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "cluster.secret").string()
    << "\n  create_if_missing: true\n"
    << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 1\n  dram_bytes: 1MiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n"
    << "caches:\n  count: 1\n  sets: 8\n"
    << "workers:\n  count: 1\n  batch_size: 32\n  epochs: " << epochs << "\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: 3000\n    distinct_keys: 2000\n    seed: 5\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n"
    << "updates:\n  port: " << updates_port << "\n  interval_ms: 20\n"
    << "  max_retained_rows: " << max_retained_rows << "\n"
    << "serving:\n  checkpoint: " << (d / "ckpt").string()
    << "\n  lmdb_path: " << (d / "serving").string() << "\n  subscribe: 127.0.0.1:" << updates_port
    << "\n";
  return m.str();
}

int run(const std::string& command) { return std::system(command.c_str()); }

// Starts `strata serve MANIFEST` (output in d/serve.log); its pid and its
// binary port once it wrote its port file (0 if it did not in time).
std::pair<pid_t, uint16_t> start_serve(const std::string& bin, const fs::path& manifest,
                                       const fs::path& d) {
  const pid_t server = ::fork();
  if (server == 0) {
    std::freopen((d / "serve.log").c_str(), "w", stdout);
    std::freopen((d / "serve.log").c_str(), "a", stderr);
    ::execl(bin.c_str(), bin.c_str(), "serve", manifest.c_str(), "--port-file",
            (d / "ports").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (!eventually([&] { return fs::exists(d / "ports"); }, 60s)) return {server, 0};
  std::ifstream in(d / "ports");
  std::string line;
  std::getline(in, line);
  return {server, static_cast<uint16_t>(std::stoi(line.substr(7)))};
}

// Trains one epoch, serves its checkpoint, trains on from it while serving
// follows (with the publisher's window at `max_retained_rows`; 0: the
// default). The directory, for the caller's own checks.
void train_serve_and_follow(const fs::path& d, uint64_t max_retained_rows) {
  const uint16_t port = testing::free_port();
  std::ofstream(d / "one-epoch.yaml") << manifest(d, 1, port, max_retained_rows);
  // The second run trains 15 more epochs (a second or two): long enough for
  // the server's subscriber (retrying every 100 ms) to connect to the new
  // node's publisher under any load; a run of one more epoch (0.1 s) could
  // end before it did, and then nothing was published to it.
  std::ofstream(d / "more-epochs.yaml") << manifest(d, 16, port, max_retained_rows);
  const std::string bin = STRATA_BINARY;
  ASSERT_EQ(run(bin + " node --manifest " + (d / "one-epoch.yaml").string() + " --node live > " +
                (d / "train1.log").string() + " 2>&1"),
            0)
      << std::ifstream(d / "train1.log").rdbuf();
  auto checkpoint = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(checkpoint.has_value());
  auto meta = actors::read_checkpoint_meta(*checkpoint);
  ASSERT_TRUE(meta.has_value());

  // The checkpoint's rows, read from its own LMDB copy.
  std::map<uint64_t, std::pair<uint64_t, std::vector<float>>> want;
  {
    const row_layout layout{meta->dim, meta->optimizer, meta->with_state};
    lmdb_tier_config c;
    c.directory = actors::shard_checkpoint_dir(*checkpoint, 0);
    c.table = meta->table;
    c.partitions = meta->partitions;
    c.read_only = true;
    auto tier = lmdb_tier::open(layout, c);
    ASSERT_TRUE(tier.has_value()) << tier.err().to_string();
    ASSERT_TRUE((*tier)
                    ->dump([&](uint64_t key, const std::byte* r) {
                      want[key] = {meta_of(r).version,
                                   std::vector<float>(weights_of(r), weights_of(r) + meta->dim)};
                    })
                    .has_value());
  }
  ASSERT_GT(want.size(), 100u);
  std::vector<uint64_t> keys;
  for (const auto& [k, v] : want) keys.push_back(k);

  // Serve it (with the second manifest: it subscribes to the updates port).
  const auto [server, serve_port] = start_serve(bin, d / "more-epochs.yaml", d);
  ASSERT_NE(serve_port, 0) << std::ifstream(d / "serve.log").rdbuf();
  auto c = client::serving_client::connect({{{"127.0.0.1", serve_port}}});
  ASSERT_TRUE(c.has_value());
  auto before = c->lookup("counts", keys);
  ASSERT_TRUE(before.has_value()) << before.err().to_string();
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(before->versions[i], want[keys[i]].first) << keys[i];
    ASSERT_EQ(
        std::memcmp(&before->weights[i * meta->dim], want[keys[i]].second.data(), meta->dim * 4),
        0);
  }

  // Train on from the checkpoint (a new incarnation) while serving follows.
  ASSERT_EQ(
      run(bin + " node --manifest " + (d / "more-epochs.yaml").string() + " --node live --resume " +
          (d / "ckpt").string() + " > " + (d / "train2.log").string() + " 2>&1"),
      0)
      << std::ifstream(d / "train2.log").rdbuf();
  size_t moved = 0;
  const bool updated = eventually(
      [&] {
        auto now = c->lookup("counts", keys);
        if (!now) return false;
        moved = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          EXPECT_GE(now->versions[i], before->versions[i]) << "key " << keys[i] << " went back";
          if (incarnation_of(now->versions[i]) > meta->incarnation) ++moved;
        }
        return moved * 2 > keys.size();  // most keys were trained again in the second run
      },
      30s);
  EXPECT_TRUE(updated) << moved << " of " << keys.size() << " keys updated; serve log:\n"
                       << std::ifstream(d / "serve.log").rdbuf();
  ::kill(server, SIGTERM);
  int status = 0;
  ::waitpid(server, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::stringstream log;
  log << std::ifstream(d / "serve.log").rdbuf();
  EXPECT_NE(log.str().find("strata serve: SIGTERM: stopping"), std::string::npos) << log.str();
}

TEST(ServingEndToEnd, TrainServeAndKeepServingWhileTrainingUpdatesIt) {
  testing::temp_dir dir;
  train_serve_and_follow(dir.path(), 0);
}

// Two training nodes, each publishing its own shard's updates on its own
// port; one serving node subscribed to both follows the rows of both shards.
std::string two_node_manifest(const fs::path& d, uint32_t epochs,
                              const std::vector<uint16_t>& ports) {
  std::ostringstream m;
  m << "name: pair\nmode: async\npartitions: 64\nthreads: 2\n"
    << "cluster_secret:\n  file: " << (d / "cluster.secret").string()
    << "\n  create_if_missing: true\n"
    << "nodes:\n"
    << "  - name: t0\n    host: 127.0.0.1\n    transport_port: " << ports[0]
    << "\n    updates_port: " << ports[2] << "\n    ssd_path: " << (d / "t0").string() << "\n"
    << "  - name: t1\n    host: 127.0.0.1\n    transport_port: " << ports[1]
    << "\n    updates_port: " << ports[3] << "\n    ssd_path: " << (d / "t1").string() << "\n"
    << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 2\n  dram_bytes: 1MiB\n  ssd_path: " << (d / "state").string()
    << "\n  map_bytes: 256MiB\n"
    << "caches:\n  count: 2\n  sets: 8\n"
    << "workers:\n  count: 2\n  batch_size: 32\n  epochs: " << epochs << "\n"
    << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
    << "  generate:\n    rows: 3000\n    distinct_keys: 2000\n    seed: 5\n"
    << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n"
    << "updates:\n  interval_ms: 20\n"
    << "serving:\n  checkpoint: " << (d / "ckpt").string()
    << "\n  lmdb_path: " << (d / "serving").string() << "\n  subscribe: [127.0.0.1:" << ports[2]
    << ", 127.0.0.1:" << ports[3] << "]\n";
  return m.str();
}

TEST(ServingEndToEnd, ServingFollowsEveryNodeOfAMultiNodeTrainingCluster) {
  testing::temp_dir dir;
  const fs::path d = dir.path();
  const std::vector<uint16_t> ports = {testing::free_port(), testing::free_port(), testing::free_port(), testing::free_port()};
  std::ofstream(d / "one.yaml") << two_node_manifest(d, 1, ports);
  std::ofstream(d / "two.yaml") << two_node_manifest(d, 2, ports);
  const std::string bin = STRATA_BINARY;
  ASSERT_EQ(run(bin + " launch " + (d / "one.yaml").string() + " > " + (d / "train1.log").string() +
                " 2>&1"),
            0)
      << std::ifstream(d / "train1.log").rdbuf();
  auto checkpoint = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(checkpoint.has_value());
  auto meta = actors::read_checkpoint_meta(*checkpoint);
  ASSERT_TRUE(meta.has_value());
  ASSERT_EQ(meta->shard_rows.size(), 2u);
  std::vector<uint64_t> keys;
  std::map<uint64_t, uint64_t> versions;
  for (uint32_t shard = 0; shard < 2; ++shard) {
    const row_layout layout{meta->dim, meta->optimizer, meta->with_state};
    lmdb_tier_config c;
    c.directory = actors::shard_checkpoint_dir(*checkpoint, shard);
    c.table = meta->table;
    c.partitions = meta->partitions;
    c.read_only = true;
    auto tier = lmdb_tier::open(layout, c);
    ASSERT_TRUE(tier.has_value()) << tier.err().to_string();
    ASSERT_TRUE((*tier)
                    ->dump([&](uint64_t key, const std::byte* r) {
                      keys.push_back(key);
                      versions[key] = meta_of(r).version;
                    })
                    .has_value());
  }
  ASSERT_GT(keys.size(), 100u);

  const auto [server, serve_port] = start_serve(bin, d / "two.yaml", d);
  ASSERT_NE(serve_port, 0) << std::ifstream(d / "serve.log").rdbuf();
  auto c = client::serving_client::connect({{{"127.0.0.1", serve_port}}});
  ASSERT_TRUE(c.has_value());

  // Both nodes train on (a new incarnation), each publishing its shard.
  ASSERT_EQ(run(bin + " launch " + (d / "two.yaml").string() + " --resume > " +
                (d / "train2.log").string() + " 2>&1"),
            0)
      << std::ifstream(d / "train2.log").rdbuf();
  size_t moved[2] = {0, 0};
  const bool updated = eventually(
      [&] {
        auto now = c->lookup("counts", keys);
        if (!now) return false;
        moved[0] = moved[1] = 0;
        size_t total[2] = {0, 0};
        const actors::partition_map map(meta->partitions, 2);
        for (size_t i = 0; i < keys.size(); ++i) {
          EXPECT_GE(now->versions[i], versions[keys[i]]) << "key " << keys[i] << " went back";
          const uint32_t shard = map.shard_of(keys[i]);
          ++total[shard];
          if (incarnation_of(now->versions[i]) > meta->incarnation) ++moved[shard];
        }
        // Most keys of each node's shard were trained again and published.
        return moved[0] * 2 > total[0] && moved[1] * 2 > total[1];
      },
      30s);
  EXPECT_TRUE(updated) << moved[0] << " and " << moved[1] << " keys updated; serve log:\n"
                       << std::ifstream(d / "serve.log").rdbuf();
  ::kill(server, SIGTERM);
  int status = 0;
  ::waitpid(server, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace strata::serving
