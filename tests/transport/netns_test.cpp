// Several hosts on one machine: two network namespaces joined by a veth
// pair (addresses only inside them, a unique name prefix, always deleted),
// one node per namespace with UCX_TLS=tcp: the transport's exact-sum test
// across them, and a real two-node `strata node` cluster that trains (count
// objective) and must hold the exact sums in its final checkpoint.
// Needs root and `ip`; skips with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "common/child_process.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::testing {
namespace {

using namespace std::chrono_literals;

std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

bool run_ip(const std::string& ip, const std::string& args) {
  return std::system((ip + " " + args + " >/dev/null 2>&1").c_str()) == 0;
}

// Two namespaces and a veth pair between them; deleted on destruction.
class namespace_pair {
 public:
  explicit namespace_pair(std::string ip) : ip_(std::move(ip)) {
    const auto id = std::to_string(::getpid() % 100000);
    a_ = "stx" + id + "a";
    b_ = "stx" + id + "b";
    subnet_ = "10.231." + std::to_string(::getpid() % 250);
    ok_ = run_ip(ip_, "netns add " + a_) && run_ip(ip_, "netns add " + b_) &&
          run_ip(ip_, "link add " + a_ + "v type veth peer name " + b_ + "v") &&
          run_ip(ip_, "link set " + a_ + "v netns " + a_) &&
          run_ip(ip_, "link set " + b_ + "v netns " + b_) &&
          run_ip(ip_, "-n " + a_ + " addr add " + address_a() + "/24 dev " + a_ + "v") &&
          run_ip(ip_, "-n " + b_ + " addr add " + subnet_ + ".2/24 dev " + b_ + "v") &&
          run_ip(ip_, "-n " + a_ + " link set " + a_ + "v up") &&
          run_ip(ip_, "-n " + b_ + " link set " + b_ + "v up") &&
          run_ip(ip_, "-n " + a_ + " link set lo up") &&
          run_ip(ip_, "-n " + b_ + " link set lo up");
  }
  ~namespace_pair() {
    run_ip(ip_, "netns del " + a_);  // removes the veth pair too
    run_ip(ip_, "netns del " + b_);
    run_ip(ip_, "link del " + a_ + "v");  // in case it never moved
  }
  bool ok() const { return ok_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  std::string address_a() const { return subnet_ + ".1"; }
  std::string address_b() const { return subnet_ + ".2"; }

 private:
  std::string ip_, a_, b_, subnet_;
  bool ok_ = false;
};

#define SKIP_WITHOUT_NAMESPACES(ip)                                                  \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces"; \
  if ((ip).empty()) GTEST_SKIP() << "the `ip` tool (iproute2) is not installed";    \
  if (!run_ip(ip, "netns list")) GTEST_SKIP() << "`ip netns` is not usable here"

TEST(NetworkNamespaces, ExactSumAcrossTwoHostsOverTcp) {
  const auto ip = ip_binary();
  SKIP_WITHOUT_NAMESPACES(ip);
  namespace_pair ns(ip);
  ASSERT_TRUE(ns.ok()) << "could not set up namespaces " << ns.a() << ", " << ns.b();
  temp_dir dir;
  const std::vector<std::string> env{"UCX_TLS=tcp"};
  child_process a(ip,
                  {"netns", "exec", ns.a(), STRATA_TRANSPORT_NODE, "--name", "a", "--listen",
                   ns.address_a(), "--shard", "0", "--shards", "1", "--dir", dir.path().string()},
                  env);
  auto port = a.wait_line("PORT ", 60s);
  ASSERT_TRUE(port) << a.output();
  child_process b(ip, {"netns",          "exec",
                       ns.b(),           STRATA_TRANSPORT_NODE,
                       "--name",         "b",
                       "--connect",      ns.address_a() + ":" + port->substr(5),
                       "--remote-shard", "0=a",
                       "--shards",       "1",
                       "--keys",         "2000",
                       "--dim",          "8",
                       "--rounds",       "8",
                       "--drive",        "exact-sum",
                       "--dir",          dir.path().string()},
                  env);
  auto rc = b.wait_exit(180s);
  ASSERT_TRUE(rc) << b.output();
  EXPECT_EQ(*rc, 0) << b.output();
  bool passed = false, listener = false;
  for (const auto& l : b.lines()) {
    passed |= l.rfind("PASS exact-sum 2000 keys", 0) == 0;
    listener |= l.rfind("PEER a path=listener", 0) == 0;  // different hosts: no shared memory
  }
  EXPECT_TRUE(passed) << b.output();
  EXPECT_TRUE(listener) << b.output();
  a.close_stdin();
  EXPECT_EQ(a.wait_exit(60s), 0) << a.output();
}

// A two-node manifest whose hosts are the namespaces' addresses: the
// coordinator's node in namespace a, the other in b. Count objective, so
// the final checkpoint must hold every key's exact number of sightings.
TEST(NetworkNamespaces, StrataNodesTrainAcrossTwoHosts) {
  const auto ip = ip_binary();
  SKIP_WITHOUT_NAMESPACES(ip);
  namespace_pair ns(ip);
  ASSERT_TRUE(ns.ok()) << "could not set up namespaces " << ns.a() << ", " << ns.b();
  temp_dir dir;
  const auto d = dir.path();
  const auto manifest = d / "hosts.yaml";
  {
    std::ofstream m(manifest);
    m << "name: hosts\nmode: async\npartitions: 64\nthreads: 2\n"
      << "cluster_secret:\n  file: " << (d / "cluster.secret").string()
      << "\n  create_if_missing: true\n"
      << "nodes:\n"
      << "  - name: ha\n    host: " << ns.address_a() << "\n    transport_port: 17441\n"
      << "    ssd_path: " << (d / "ha").string() << "\n"
      << "  - name: hb\n    host: " << ns.address_b() << "\n    transport_port: 17442\n"
      << "    ssd_path: " << (d / "hb").string() << "\n"
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: 2\n  dram_bytes: 128KiB\n  ssd_path: " << (d / "state").string()
      << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
      << "caches:\n  count: 2\n  sets: 8\n"
      << "workers:\n  count: 2\n  batch_size: 32\n"
      << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: 20000\n    distinct_keys: 5000\n    seed: 5\n"
      << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 2\n";
  }
  const std::vector<std::string> env{"UCX_TLS=tcp"};
  // The first node generates the data before its transport starts; the
  // second starts once it is listening.
  child_process a(ip, {"netns", "exec", ns.a(), STRATA_BINARY, "node", "--manifest",
                       manifest.string(), "--node", "ha"},
                  env);
  ASSERT_TRUE(a.wait_line("transport: node ha listening", 120s)) << a.output();
  child_process b(ip, {"netns", "exec", ns.b(), STRATA_BINARY, "node", "--manifest",
                       manifest.string(), "--node", "hb"},
                  env);
  const auto rc_a = a.wait_exit(240s);
  const auto rc_b = b.wait_exit(60s);
  ASSERT_TRUE(rc_a && rc_b) << a.output() << b.output();
  EXPECT_EQ(*rc_a, 0) << a.output();
  EXPECT_EQ(*rc_b, 0) << b.output();
  EXPECT_NE(a.output().find("cluster: all 2 nodes ready"), std::string::npos) << a.output();
  EXPECT_NE(b.output().find("== report: node hb of cluster hosts =="), std::string::npos)
      << b.output();
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no complete checkpoint\n" << a.output();
  const auto positions = check_exact_sums(manifest, *latest);
  EXPECT_EQ(positions.size(), 2u);
}


// Issue 19: scaling across the two hosts. The coordinator's node in
// namespace a trains with one shard on each host; `strata scale --shards 3
// --placement ha hb hb` (run inside namespace a, where the admin API
// listens) spawns shard 2 on the node in namespace b and moves partitions
// to it over TCP while training goes on; after a graceful stop the final
// checkpoint holds the exact sums.
TEST(NetworkNamespaces, ScaleOntoTheOtherHostKeepsExactSums) {
  const auto ip = ip_binary();
  SKIP_WITHOUT_NAMESPACES(ip);
  namespace_pair ns(ip);
  ASSERT_TRUE(ns.ok()) << "could not set up namespaces " << ns.a() << ", " << ns.b();
  temp_dir dir;
  const auto d = dir.path();
  const auto manifest = d / "hosts.yaml";
  {
    std::ofstream m(manifest);
    m << "name: hostscale\nmode: async\npartitions: 64\nthreads: 2\n"
      << "cluster_secret:\n  file: " << (d / "cluster.secret").string()
      << "\n  create_if_missing: true\n"
      << "nodes:\n"
      << "  - name: ha\n    host: " << ns.address_a() << "\n    transport_port: 17443\n"
      << "    ssd_path: " << (d / "ha").string() << "\n"
      << "  - name: hb\n    host: " << ns.address_b() << "\n    transport_port: 17444\n"
      << "    ssd_path: " << (d / "hb").string() << "\n"
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: 2\n  dram_bytes: 128KiB\n  ssd_path: " << (d / "state").string()
      << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
      << "caches:\n  count: 2\n  sets: 8\n"
      << "workers:\n  count: 2\n  batch_size: 32\n  epochs: 1\n"
      << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: 300000\n    distinct_keys: 5000\n    seed: 5\n"
      << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 10\n"
      << "admin:\n  port: 17445\n  bind_address: " << ns.address_a()
      << "\n  token_file: " << (d / "admin.token").string() << "\n  create_if_missing: true\n";
  }
  const std::vector<std::string> env{"UCX_TLS=tcp"};
  child_process a(ip, {"netns", "exec", ns.a(), STRATA_BINARY, "node", "--manifest",
                       manifest.string(), "--node", "ha"},
                  env);
  ASSERT_TRUE(a.wait_line("transport: node ha listening", 120s)) << a.output();
  child_process b(ip, {"netns", "exec", ns.b(), STRATA_BINARY, "node", "--manifest",
                       manifest.string(), "--node", "hb"},
                  env);
  // A CLI verb inside namespace a: (exit code, stdout and stderr).
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> full{"netns", "exec", ns.a(), STRATA_BINARY};
    full.insert(full.end(), args.begin(), args.end());
    child_process p(ip, full, env);
    auto rc = p.wait_exit(120s);
    return std::make_pair(rc ? *rc : -1, p.output());
  };
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  bool training = false;
  while (!training && std::chrono::steady_clock::now() < deadline && a.running()) {
    auto [rc, out] = cli({"status", "--manifest", manifest.string()});
    training = rc == 0 && out.find("training: 0 ") == std::string::npos &&
               out.find("training: ") != std::string::npos;
    if (!training) std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(training) << a.output() << b.output();
  auto [rc3, out3] = cli({"scale", "--manifest", manifest.string(), "--shards", "3",
                          "--placement", "ha", "hb", "hb"});
  ASSERT_EQ(rc3, 0) << out3 << a.output() << b.output();
  EXPECT_NE(out3.find("\"shards\": 3"), std::string::npos) << out3;
  EXPECT_TRUE(std::filesystem::exists(d / "hb" / "shard-2" / "data.mdb"))
      << "shard 2 is not under the other host's ssd_path";
  auto [rcs, outs] = cli({"stop", "--manifest", manifest.string()});
  EXPECT_EQ(rcs, 0) << outs;
  const auto rc_a = a.wait_exit(240s);
  const auto rc_b = b.wait_exit(60s);
  ASSERT_TRUE(rc_a && rc_b) << a.output() << b.output();
  EXPECT_EQ(*rc_a, 0) << a.output();
  EXPECT_EQ(*rc_b, 0) << b.output();
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no complete checkpoint\n" << a.output();
  const auto positions = check_exact_sums(manifest, *latest);
  ASSERT_EQ(positions.size(), 2u);
  for (auto p : positions) EXPECT_GT(p, 0u);
}

// Issue 19: membership changes across hosts. Host a runs the coordinator's
// node ha (every cache tier and worker); host b runs hb (shard 1 only)
// and, once training runs, the standby node hc, which joins the running
// cluster from the other host. `strata scale --shards 4 --placement ha hb
// hc hc` puts two shards on hc, then `strata drain --node hb` moves shard 1
// off hb, which leaves and exits 0; after a graceful stop the final
// checkpoint holds the exact sums. Every frame crosses the veth pair over TCP.
TEST(NetworkNamespaces, AJoinedHostTakesShardsAndAnOriginalHostDrains) {
  const auto ip = ip_binary();
  SKIP_WITHOUT_NAMESPACES(ip);
  namespace_pair ns(ip);
  ASSERT_TRUE(ns.ok()) << "could not set up namespaces " << ns.a() << ", " << ns.b();
  temp_dir dir;
  const auto d = dir.path();
  const auto manifest = d / "hosts.yaml";
  {
    std::ofstream m(manifest);
    m << "name: hostjoin\nmode: async\npartitions: 64\nthreads: 2\n"
      << "cluster_secret:\n  file: " << (d / "cluster.secret").string()
      << "\n  create_if_missing: true\n"
      << "nodes:\n"
      << "  - name: ha\n    host: " << ns.address_a() << "\n    transport_port: 17446\n"
      << "    ssd_path: " << (d / "ha").string() << "\n"
      << "  - name: hb\n    host: " << ns.address_b() << "\n    transport_port: 17447\n"
      << "    ssd_path: " << (d / "hb").string() << "\n"
      << "  - name: hc\n    host: " << ns.address_b() << "\n    transport_port: 17448\n"
      << "    ssd_path: " << (d / "hc").string() << "\n    standby: true\n"
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: 2\n  placement: [ha, hb]\n  dram_bytes: 128KiB\n  ssd_path: "
      << (d / "state").string() << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
      << "caches:\n  count: 2\n  sets: 8\n  placement: [ha, ha]\n"
      << "workers:\n  count: 2\n  batch_size: 32\n  epochs: 1\n  placement: [ha, ha]\n"
      << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: 1000000\n    distinct_keys: 5000\n    seed: 5\n"
      << "checkpoint:\n  dir: " << (d / "ckpt").string() << "\n  keep: 10\n"
      << "admin:\n  port: 17449\n  bind_address: " << ns.address_a()
      << "\n  token_file: " << (d / "admin.token").string() << "\n  create_if_missing: true\n";
  }
  const std::vector<std::string> env{"UCX_TLS=tcp"};
  auto node_in = [&](const std::string& netns, const std::string& name) {
    return std::make_unique<child_process>(
        ip,
        std::vector<std::string>{"netns", "exec", netns, STRATA_BINARY, "node", "--manifest",
                                 manifest.string(), "--node", name},
        env);
  };
  auto a = node_in(ns.a(), "ha");
  ASSERT_TRUE(a->wait_line("transport: node ha listening", 120s)) << a->output();
  auto b = node_in(ns.b(), "hb");
  // A CLI verb inside namespace a: (exit code, stdout and stderr).
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> full{"netns", "exec", ns.a(), STRATA_BINARY};
    full.insert(full.end(), args.begin(), args.end());
    child_process p(ip, full, env);
    auto rc = p.wait_exit(120s);
    return std::make_pair(rc ? *rc : -1, p.output());
  };
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  bool training = false;
  while (!training && std::chrono::steady_clock::now() < deadline && a->running()) {
    auto [rc, out] = cli({"status", "--manifest", manifest.string()});
    training = rc == 0 && out.find("training: 0 ") == std::string::npos &&
               out.find("training: ") != std::string::npos;
    if (!training) std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(training) << a->output() << b->output();

  // hc joins from host b while training goes on.
  auto c = node_in(ns.b(), "hc");
  ASSERT_TRUE(c->wait_line("cluster: node hc joined the running cluster", 120s))
      << c->output() << a->output();
  ASSERT_TRUE(a->wait_line("cluster: node hc joined (standby)", 60s)) << a->output();

  auto [rc4, out4] = cli({"scale", "--manifest", manifest.string(), "--shards", "4",
                          "--placement", "ha", "hb", "hc", "hc"});
  ASSERT_EQ(rc4, 0) << out4 << a->output() << b->output() << c->output();
  EXPECT_NE(out4.find("\"shards\": 4"), std::string::npos) << out4;
  EXPECT_TRUE(std::filesystem::exists(d / "hc" / "shard-2" / "data.mdb"))
      << "shard 2 is not under the joined host's ssd_path";
  EXPECT_TRUE(std::filesystem::exists(d / "hc" / "shard-3" / "data.mdb"));

  // hb hosts only shard 1: the drain moves it to the connected node with
  // the fewest shards (ha: one, hc: two), and hb leaves.
  auto [rcd, outd] = cli({"drain", "--manifest", manifest.string(), "--node", "hb"});
  ASSERT_EQ(rcd, 0) << outd << a->output() << b->output();
  EXPECT_NE(outd.find("\"left\": true"), std::string::npos) << outd;
  EXPECT_NE(outd.find("\"node\": \"ha\""), std::string::npos) << outd;
  const auto rc_b = b->wait_exit(120s);
  ASSERT_TRUE(rc_b) << "drained hb did not exit\n" << b->output();
  EXPECT_EQ(*rc_b, 0) << b->output();
  EXPECT_TRUE(std::filesystem::exists(d / "ha" / "shard-1" / "data.mdb"))
      << "shard 1 is not under its successor's ssd_path";

  auto [rcs, outs] = cli({"stop", "--manifest", manifest.string()});
  EXPECT_EQ(rcs, 0) << outs;
  const auto rc_a = a->wait_exit(240s);
  const auto rc_c = c->wait_exit(60s);
  ASSERT_TRUE(rc_a && rc_c) << a->output() << c->output();
  EXPECT_EQ(*rc_a, 0) << a->output();
  EXPECT_EQ(*rc_c, 0) << c->output();
  EXPECT_NE(a->output().find("cluster: node hb left (drained: it hosts no shard)"),
            std::string::npos)
      << a->output();
  auto latest = actors::latest_checkpoint(d / "ckpt");
  ASSERT_TRUE(latest) << "no complete checkpoint\n" << a->output();
  const auto positions = check_exact_sums(manifest, *latest);
  ASSERT_EQ(positions.size(), 2u);
  for (auto p : positions) EXPECT_GT(p, 0u);
}

}  // namespace
}  // namespace strata::testing
