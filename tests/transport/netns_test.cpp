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

// `strata node` processes on two hosts (the namespaces): ha, the
// coordinator's node, in namespace a, the others in b. The manifest trains
// the count objective, so the final checkpoint must hold every key's exact
// number of sightings; every frame crosses the veth pair over TCP.
class two_hosts {
 public:
  two_hosts(std::string ip, const namespace_pair& ns, std::filesystem::path dir)
      : ip_(std::move(ip)), ns_(ns), d_(std::move(dir)), manifest_(d_ / "hosts.yaml") {}

  // Writes the manifest: `nodes` (the nodes list's entries), `shards`,
  // `caches` and `workers` (extra lines of those sections), `rows`
  // generated, an admin API in namespace a on `admin_port` (0: none).
  void write(const std::string& name, const std::string& nodes, const std::string& shards,
             const std::string& caches, const std::string& workers, uint64_t rows,
             uint16_t admin_port) const {
    std::ofstream m(manifest_);
    m << "name: " << name << "\nmode: async\npartitions: 64\nthreads: 2\n"
      << "cluster_secret:\n  file: " << (d_ / "cluster.secret").string()
      << "\n  create_if_missing: true\n"
      << "nodes:\n"
      << nodes
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: 2\n" << shards << "  dram_bytes: 128KiB\n  ssd_path: "
      << (d_ / "state").string() << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
      << "caches:\n  count: 2\n  sets: 8\n" << caches
      << "workers:\n  count: 2\n  batch_size: 32\n  epochs: 1\n" << workers
      << "data:\n  path: " << (d_ / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: " << rows << "\n    distinct_keys: 5000\n    seed: 5\n"
      << "checkpoint:\n  dir: " << (d_ / "ckpt").string() << "\n  keep: 10\n";
    if (admin_port != 0)
      m << "admin:\n  port: " << admin_port << "\n  bind_address: " << ns_.address_a()
        << "\n  token_file: " << (d_ / "admin.token").string()
        << "\n  create_if_missing: true\n";
  }
  // A nodes-list entry on host a or b, its LMDB environments under dir/<name>.
  std::string node(const std::string& name, bool host_a, uint16_t port,
                   bool standby = false) const {
    return "  - name: " + name + "\n    host: " + (host_a ? ns_.address_a() : ns_.address_b()) +
           "\n    transport_port: " + std::to_string(port) + "\n    ssd_path: " +
           (d_ / name).string() + "\n" + (standby ? "    standby: true\n" : "");
  }
  // `strata node --node name` in namespace a or b.
  std::unique_ptr<child_process> start(const std::string& name, bool host_a) const {
    return std::make_unique<child_process>(
        ip_,
        std::vector<std::string>{"netns", "exec", host_a ? ns_.a() : ns_.b(), STRATA_BINARY,
                                 "node", "--manifest", manifest_.string(), "--node", name},
        env_);
  }
  // A CLI verb with the manifest, inside namespace a (where the admin API
  // listens): (exit code, stdout and stderr).
  std::pair<int, std::string> cli(std::vector<std::string> args) const {
    std::vector<std::string> full{"netns", "exec", ns_.a(), STRATA_BINARY};
    full.insert(full.end(), args.begin(), args.end());
    full.insert(full.end(), {"--manifest", manifest_.string()});
    child_process p(ip_, full, env_);
    auto rc = p.wait_exit(120s);
    return {rc ? *rc : -1, p.output()};
  }
  // ha in namespace a, then, once it listens (it generates the data before
  // its transport starts), hb in namespace b; hb is null if ha never listened.
  std::pair<std::unique_ptr<child_process>, std::unique_ptr<child_process>> start_ha_hb() const {
    auto a = start("ha", true);
    if (!a->wait_line("transport: node ha listening", 120s)) return {std::move(a), nullptr};
    return {std::move(a), start("hb", false)};
  }
  // `strata stop`, then the coordinator's node and `other` exit 0.
  void stop_and_expect_clean_exits(child_process& coordinator, child_process& other) const {
    auto [rc, out] = cli({"stop"});
    EXPECT_EQ(rc, 0) << out;
    expect_clean_exits(coordinator, other);
  }
  void expect_clean_exits(child_process& coordinator, child_process& other) const {
    const auto rc_a = coordinator.wait_exit(240s);
    const auto rc_b = other.wait_exit(60s);
    ASSERT_TRUE(rc_a && rc_b) << coordinator.output() << other.output();
    EXPECT_EQ(*rc_a, 0) << coordinator.output();
    EXPECT_EQ(*rc_b, 0) << other.output();
  }
  // True once `strata status` shows examples trained (false if the
  // coordinator's node exits first).
  bool wait_training(child_process& coordinator) const {
    const auto deadline = std::chrono::steady_clock::now() + 300s;
    while (std::chrono::steady_clock::now() < deadline && coordinator.running()) {
      auto [rc, out] = cli({"status"});
      if (rc == 0 && out.find("training: 0 ") == std::string::npos &&
          out.find("training: ") != std::string::npos)
        return true;
      std::this_thread::sleep_for(200ms);
    }
    return false;
  }
  // The exact-sum oracle over the latest checkpoint: each worker's position.
  void expect_exact_sums(const std::string& coordinator_output) const {
    auto latest = actors::latest_checkpoint(d_ / "ckpt");
    ASSERT_TRUE(latest) << "no complete checkpoint\n" << coordinator_output;
    const auto positions = check_exact_sums(manifest_, *latest);
    ASSERT_EQ(positions.size(), 2u);
    for (auto p : positions) EXPECT_GT(p, 0u);
  }
  const std::filesystem::path& dir() const { return d_; }

 private:
  std::string ip_;
  const namespace_pair& ns_;
  std::filesystem::path d_, manifest_;
  std::vector<std::string> env_{"UCX_TLS=tcp"};
};

#define TWO_HOSTS(hosts)                                                               \
  const auto ip = ip_binary();                                                         \
  SKIP_WITHOUT_NAMESPACES(ip);                                                         \
  namespace_pair ns(ip);                                                               \
  ASSERT_TRUE(ns.ok()) << "could not set up namespaces " << ns.a() << ", " << ns.b(); \
  temp_dir dir;                                                                        \
  two_hosts hosts(ip, ns, dir.path())

// A two-node cluster, one node per host, trains one epoch and stops by itself.
TEST(NetworkNamespaces, StrataNodesTrainAcrossTwoHosts) {
  TWO_HOSTS(h);
  h.write("hosts", h.node("ha", true, 17441) + h.node("hb", false, 17442), "", "", "", 20000, 0);
  auto [a, b] = h.start_ha_hb();
  ASSERT_TRUE(b) << "node ha never listened\n" << a->output();
  h.expect_clean_exits(*a, *b);
  EXPECT_NE(a->output().find("cluster: all 2 nodes ready"), std::string::npos) << a->output();
  EXPECT_NE(b->output().find("== report: node hb of cluster hosts =="), std::string::npos)
      << b->output();
  h.expect_exact_sums(a->output());
}

// Issue 19: scaling across the two hosts. The coordinator's node in
// namespace a trains with one shard on each host; `strata scale --shards 3
// --placement ha hb hb` spawns shard 2 on the node in namespace b and moves
// partitions to it over TCP while training goes on; after a graceful stop
// the final checkpoint holds the exact sums.
TEST(NetworkNamespaces, ScaleOntoTheOtherHostKeepsExactSums) {
  TWO_HOSTS(h);
  h.write("hostscale", h.node("ha", true, 17443) + h.node("hb", false, 17444), "", "", "",
          300000, 17445);
  auto [a, b] = h.start_ha_hb();
  ASSERT_TRUE(b) << "node ha never listened\n" << a->output();
  ASSERT_TRUE(h.wait_training(*a)) << a->output() << b->output();
  auto [rc3, out3] = h.cli({"scale", "--shards", "3", "--placement", "ha", "hb", "hb"});
  ASSERT_EQ(rc3, 0) << out3 << a->output() << b->output();
  EXPECT_NE(out3.find("\"shards\": 3"), std::string::npos) << out3;
  EXPECT_TRUE(std::filesystem::exists(h.dir() / "hb" / "shard-2" / "data.mdb"))
      << "shard 2 is not under the other host's ssd_path";
  h.stop_and_expect_clean_exits(*a, *b);
  h.expect_exact_sums(a->output());
}

// Issue 19: membership changes across hosts. Host a runs the coordinator's
// node ha (every cache tier and worker); host b runs hb (shard 1 only)
// and, once training runs, the standby node hc, which joins the running
// cluster from the other host. `strata scale --shards 4 --placement ha hb
// hc hc` puts two shards on hc, then `strata drain --node hb` moves shard 1
// off hb, which leaves and exits 0; after a graceful stop the final
// checkpoint holds the exact sums.
TEST(NetworkNamespaces, AJoinedHostTakesShardsAndAnOriginalHostDrains) {
  TWO_HOSTS(h);
  h.write("hostjoin",
          h.node("ha", true, 17446) + h.node("hb", false, 17447) +
              h.node("hc", false, 17448, /*standby=*/true),
          "  placement: [ha, hb]\n", "  placement: [ha, ha]\n", "  placement: [ha, ha]\n",
          1000000, 17449);
  auto [a, b] = h.start_ha_hb();
  ASSERT_TRUE(b) << "node ha never listened\n" << a->output();
  ASSERT_TRUE(h.wait_training(*a)) << a->output() << b->output();

  // hc joins from host b while training goes on.
  auto c = h.start("hc", false);
  ASSERT_TRUE(c->wait_line("cluster: node hc joined the running cluster", 120s))
      << c->output() << a->output();
  ASSERT_TRUE(a->wait_line("cluster: node hc joined (standby)", 60s)) << a->output();

  auto [rc4, out4] = h.cli({"scale", "--shards", "4", "--placement", "ha", "hb", "hc", "hc"});
  ASSERT_EQ(rc4, 0) << out4 << a->output() << b->output() << c->output();
  EXPECT_NE(out4.find("\"shards\": 4"), std::string::npos) << out4;
  EXPECT_TRUE(std::filesystem::exists(h.dir() / "hc" / "shard-2" / "data.mdb"))
      << "shard 2 is not under the joined host's ssd_path";
  EXPECT_TRUE(std::filesystem::exists(h.dir() / "hc" / "shard-3" / "data.mdb"));

  // hb hosts only shard 1: the drain moves it to the connected node with
  // the fewest shards (ha: one, hc: two), and hb leaves.
  auto [rcd, outd] = h.cli({"drain", "--node", "hb"});
  ASSERT_EQ(rcd, 0) << outd << a->output() << b->output();
  EXPECT_NE(outd.find("\"left\": true"), std::string::npos) << outd;
  EXPECT_NE(outd.find("\"node\": \"ha\""), std::string::npos) << outd;
  const auto rc_b = b->wait_exit(120s);
  ASSERT_TRUE(rc_b) << "drained hb did not exit\n" << b->output();
  EXPECT_EQ(*rc_b, 0) << b->output();
  EXPECT_TRUE(std::filesystem::exists(h.dir() / "ha" / "shard-1" / "data.mdb"))
      << "shard 1 is not under its successor's ssd_path";

  h.stop_and_expect_clean_exits(*a, *c);
  EXPECT_NE(a->output().find("cluster: node hb left (drained: it hosts no shard)"),
            std::string::npos)
      << a->output();
  h.expect_exact_sums(a->output());
}

}  // namespace
}  // namespace strata::testing
