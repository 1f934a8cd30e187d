// Clusters of real processes (tests/transport/transport_node.cpp) talking
// over UCX on loopback: the exact-sum test across two and three
// processes, every message type across a process boundary, shared memory
// (worker-address) and TCP (listener) paths, a killed and a frozen node
// reported down with requests failing (no hang), and a corrupted frame
// rejected with the connection closed. Deadlines are generous (a loaded
// 2-core machine) and polled, never slept.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>

#include "common/child_process.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::testing {
namespace {

using namespace std::chrono_literals;
constexpr auto start_timeout = 60s;
constexpr auto run_timeout = 180s;

class ClusterTest : public ::testing::Test {
 protected:
  std::unique_ptr<child_process> node(std::vector<std::string> args,
                                      std::vector<std::string> env = {"UCX_NET_DEVICES=lo"}) {
    args.insert(args.end(), {"--dir", dir_.path().string()});
    return std::make_unique<child_process>(STRATA_TRANSPORT_NODE, args, env);
  }
  // Starts a server node and returns it with its listener's "127.0.0.1:port".
  std::string address_of(child_process& p) {
    auto line = p.wait_line("PORT ", start_timeout);
    EXPECT_TRUE(line) << "node printed no port:\n" << p.output();
    return line ? "127.0.0.1:" + line->substr(5) : "127.0.0.1:0";
  }
  void expect_passes(child_process& driver, int expected_rc = 0) {
    auto rc = driver.wait_exit(run_timeout);
    ASSERT_TRUE(rc) << "driver did not finish:\n" << driver.output();
    EXPECT_EQ(*rc, expected_rc) << driver.output();
    for (const auto& l : driver.lines()) EXPECT_NE(l.rfind("FAIL", 0), 0u) << l;
  }
  static bool has_line(const child_process& p, const std::string& prefix) {
    for (const auto& l : p.lines()) {
      if (l.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }

  // Same host: the connection moves to the worker address. Its lanes are
  // loopback TCP unless the user's UCX_TLS allows shared memory
  // (node_bridge_init.cpp says why shared memory is off by default).
  void exact_sum_across_two_processes(bool shared_memory) {
    std::vector<std::string> env{"UCX_NET_DEVICES=lo"};
    if (shared_memory) env.push_back("UCX_TLS=^cma");
    auto a =
        node({"--name", "a", "--shard", "0", "--shard", "1", "--shards", "2", "--dim", "16"}, env);
    const auto addr = address_of(*a);
    auto b = node({"--name", "b", "--connect", addr, "--remote-shard", "0=a", "--remote-shard",
                   "1=a", "--shards", "2", "--keys", "2000", "--dim", "16", "--rounds", "12",
                   "--drive", "exact-sum"},
                  env);
    expect_passes(*b);
    EXPECT_TRUE(has_line(*b, "PASS exact-sum 2000 keys"));
    EXPECT_TRUE(has_line(*b, "PEER a path=worker-address")) << b->output();
    // ... and UCX carries it over shared memory exactly when allowed.
    bool found = false, over_shared_memory = false;
    for (const auto& l : b->lines()) {
      if (l.rfind("PEER a", 0) != 0) continue;
      found = true;
      over_shared_memory =
          l.find("posix/") != std::string::npos || l.find("sysv/") != std::string::npos;
    }
    EXPECT_TRUE(found) << b->output();
    EXPECT_EQ(over_shared_memory, shared_memory) << b->output();
    a->close_stdin();
    EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
  }

  temp_dir dir_;
};

TEST_F(ClusterTest, ExactSumAcrossTwoProcesses) { exact_sum_across_two_processes(false); }

TEST_F(ClusterTest, ExactSumAcrossTwoProcessesOverSharedMemoryWhenTheUserAllowsIt) {
  exact_sum_across_two_processes(true);
}

TEST_F(ClusterTest, ExactSumAcrossThreeProcessesOverTcp) {
  // Listener connections only: UCX's tcp transport carries every frame.
  auto a = node({"--name", "a", "--shard", "0", "--shards", "2", "--no-address-exchange"},
                {"UCX_NET_DEVICES=lo", "UCX_TLS=tcp"});
  auto b = node({"--name", "b", "--shard", "1", "--shards", "2", "--no-address-exchange"},
                {"UCX_NET_DEVICES=lo", "UCX_TLS=tcp"});
  const auto addr_a = address_of(*a), addr_b = address_of(*b);
  auto c = node({"--name",
                 "c",
                 "--connect",
                 addr_a,
                 "--connect",
                 addr_b,
                 "--remote-shard",
                 "0=a",
                 "--remote-shard",
                 "1=b",
                 "--shards",
                 "2",
                 "--keys",
                 "3000",
                 "--dim",
                 "8",
                 "--rounds",
                 "10",
                 "--no-address-exchange",
                 "--drive",
                 "exact-sum"},
                {"UCX_NET_DEVICES=lo", "UCX_TLS=tcp"});
  expect_passes(*c);
  EXPECT_TRUE(has_line(*c, "PASS exact-sum 3000 keys"));
  EXPECT_TRUE(has_line(*c, "PEER a path=listener"));
  for (const auto& l : c->lines()) {
    if (l.rfind("PEER ", 0) == 0) {
      EXPECT_NE(l.find("transports=tcp/"), std::string::npos) << l;
    }
  }
  EXPECT_TRUE(has_line(*c, "PEER b path=listener"));
  a->close_stdin();
  b->close_stdin();
  EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
  EXPECT_EQ(b->wait_exit(run_timeout), 0) << b->output();
}

TEST_F(ClusterTest, CacheTierOverRemoteShardsKeepsExactSums) {
  // Node c's cache tier (async mode) forwards pushes to shards on a and b
  // through proxies; it does not know they are remote.
  auto a = node({"--name", "a", "--shard", "0", "--shards", "2"});
  auto b = node({"--name", "b", "--shard", "1", "--shards", "2"});
  const auto addr_a = address_of(*a), addr_b = address_of(*b);
  auto c = node({"--name",         "c",           "--connect",      addr_a, "--connect", addr_b,
                 "--remote-shard", "0=a",         "--remote-shard", "1=b",  "--shards",  "2",
                 "--cache",        "--via-cache", "--keys",         "3000", "--rounds",  "10",
                 "--drive",        "exact-sum"});
  expect_passes(*c);
  EXPECT_TRUE(has_line(*c, "PASS exact-sum 3000 keys"));
  a->close_stdin();
  b->close_stdin();
  EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
  EXPECT_EQ(b->wait_exit(run_timeout), 0) << b->output();
}

TEST_F(ClusterTest, LargeRowsGoByRendezvousAndStayInOrder) {
  // dim 256: a push of ~2000 keys is ~2 MiB (rendezvous) while the small
  // pulls that follow are eager; the sums are only exact if nothing
  // overtook anything.
  auto a = node({"--name", "a", "--shard", "0", "--shards", "1", "--dim", "256"});
  const auto addr = address_of(*a);
  auto b = node({"--name", "b", "--connect", addr, "--remote-shard", "0=a", "--shards", "1",
                 "--keys", "4000", "--dim", "256", "--rounds", "6", "--drive", "exact-sum"});
  expect_passes(*b);
  EXPECT_TRUE(has_line(*b, "PASS exact-sum 4000 keys"));
  bool rendezvous = false;  // the pull replies (~4 MiB) came by rendezvous
  for (const auto& l : b->lines()) {
    rendezvous |= l.rfind("PEER a", 0) == 0 && l.find("rendezvous=0 ") == std::string::npos;
  }
  EXPECT_TRUE(rendezvous) << b->output();
  a->close_stdin();
  EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
}

TEST_F(ClusterTest, EveryMessageTypeCrossesAProcessBoundary) {
  auto a = node({"--name", "a", "--shard", "0", "--shards", "1", "--dense", "--echo", "--cache"});
  const auto addr = address_of(*a);
  ASSERT_TRUE(a->wait_line("READY", start_timeout)) << a->output();
  auto b = node({"--name", "b", "--connect", addr, "--remote-shard", "0=a", "--remote-dense", "a",
                 "--remote-cache", "a", "--shards", "1", "--drive", "every-type"});
  expect_passes(*b);
  size_t passes = 0;
  for (const auto& l : b->lines()) passes += l.rfind("PASS", 0) == 0;
  // 6 shard, 6 cache tier, 4 dense, 5 echo checks.
  EXPECT_EQ(passes, 21u) << b->output();
  a->close_stdin();
  EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
}

// A killed node: the UCX error handler (and at worst the heartbeat) marks
// it down; the driver's requests fail naming it; the other server sees it
// too; nobody hangs.
class FailureTest : public ClusterTest {
 protected:
  // `reason` (a regex) must match the DOWN line: a killed node by a UCX
  // error on its endpoint, a frozen one by the heartbeat.
  void run(int sig, const std::string& reason) {
    auto b = node({"--name", "b", "--shard", "1", "--shards", "2", "--heartbeat-ms", "10000"});
    const auto addr_b = address_of(*b);
    auto a = node({"--name", "a", "--shard", "0", "--shards", "2", "--connect", addr_b,
                   "--heartbeat-ms", "10000"});
    const auto addr_a = address_of(*a);
    ASSERT_TRUE(a->wait_line("READY", start_timeout)) << a->output();
    auto c = node({"--name", "c", "--connect", addr_a, "--connect", addr_b, "--remote-shard", "0=a",
                   "--remote-shard", "1=b", "--shards", "2", "--keys", "500", "--heartbeat-ms",
                   "10000", "--drive", "loop"});
    ASSERT_TRUE(c->wait_line("RUNNING", start_timeout)) << c->output();
    b->signal(sig);
    // Heartbeat timeout (10 s) plus a generous margin.
    auto down = c->wait_line("DOWN b", 40s);
    ASSERT_TRUE(down) << c->output();
    EXPECT_TRUE(std::regex_search(*down, std::regex("^DOWN b " + reason))) << *down;
    auto failed = c->wait_line("FAIL push", 40s);
    ASSERT_TRUE(failed) << c->output();
    EXPECT_NE(failed->find("node 'b'"), std::string::npos) << *failed;
    auto rc = c->wait_exit(60s);
    ASSERT_TRUE(rc) << "driver hung:\n" << c->output();
    EXPECT_EQ(*rc, 3);
    EXPECT_TRUE(a->wait_line("DOWN b", 40s)) << a->output();
    a->close_stdin();
    EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
    b->signal(SIGKILL);
  }
};

TEST_F(FailureTest, KilledNodeIsReportedDownAndRequestsFailNamingIt) {
  // Its sockets close: UCX reports it long before the 10 s heartbeat could.
  run(SIGKILL, "(connection error|send failed|receive failed): ");
}

TEST_F(FailureTest, FrozenNodeIsReportedDownByTheHeartbeat) {
  // SIGSTOP keeps the sockets open: only the heartbeat can tell.
  run(SIGSTOP, "no frame for ");
}

// A peer stopped in the middle of a send (gdb holds it at a breakpoint in
// UCX's packing of a frame) must cost only itself: a shared-memory FIFO,
// which every sender fills and a reserved but unwritten slot blocks, made
// node a hear nothing from the healthy node c, and mark it down.
TEST_F(FailureTest, APeerStoppedInsideASendSilencesNoOtherPeer) {
  if (std::system("command -v gdb > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs gdb to stop a node inside a UCX send (make deps installs it)";
  auto a = node({"--name", "a", "--shard", "0", "--shards", "1", "--heartbeat-ms", "5000"});
  const auto addr = address_of(*a);
  ASSERT_TRUE(a->wait_line("READY", start_timeout)) << a->output();
  auto c = node({"--name", "c", "--connect", addr, "--remote-shard", "0=a", "--shards", "1",
                 "--keys", "20", "--heartbeat-ms", "5000", "--drive", "loop"});
  ASSERT_TRUE(c->wait_line("RUNNING", start_timeout)) << c->output();
  // b floods a with pushes (~150 KB each): most of its sending is copying.
  // It is traced, and LeakSanitizer cannot check a traced process (under
  // ASan a fatal error, reported once in a loaded run): no leak check in b.
  std::vector<std::string> env_b{"UCX_NET_DEVICES=lo"};
  if (const char* asan = std::getenv("ASAN_OPTIONS"))
    env_b.push_back(std::string("ASAN_OPTIONS=") + asan + ":detect_leaks=0");
  auto b = node({"--name", "b", "--connect", addr, "--remote-shard", "0=a", "--shards", "1",
                 "--keys", "2000", "--heartbeat-ms", "60000", "--drive", "loop"},
                env_b);
  ASSERT_TRUE(b->wait_line("RUNNING", start_timeout)) << b->output();
  child_process gdb("gdb", {"-p", std::to_string(b->pid()), "-batch", "-ex", "break ucp_dt_pack",
                            "-ex", "continue", "-ex", "echo IN-SEND\\n", "-ex", "bt 6", "-ex",
                            "shell sleep 600"});
  const auto stopped = gdb.wait_line("IN-SEND", 60s);
  if (!stopped) {
    const auto out = gdb.output();
    if (out.find("ptrace") != std::string::npos)
      GTEST_SKIP() << "gdb may not attach here (ptrace refused):\n" << out;
    FAIL() << "gdb never stopped b inside a send:\n" << out;
  }
  // b is silent: a marks it down by the heartbeat (5 s) ...
  ASSERT_TRUE(a->wait_line("DOWN b", 40s)) << a->output() << gdb.output();
  // ... and goes on hearing c for two more heartbeat periods.
  EXPECT_FALSE(a->wait_line("DOWN c", 10s)) << a->output() << gdb.output();
  EXPECT_TRUE(c->running()) << c->output();
  // b first, while gdb still holds it (SIGKILL ends it there, no code of
  // its own runs): let go first, b would run on, fail its pushes and exit,
  // and under ASan LeakSanitizer's exit check fails in a process still
  // traced ("does not work under ptrace").
  b->signal(SIGKILL);
  gdb.signal(SIGKILL);
  EXPECT_TRUE(b->wait_raw(60s)) << "b survived SIGKILL";
  c->signal(SIGKILL);
  a->close_stdin();
  EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();
}

TEST_F(ClusterTest, CorruptedFrameIsRejectedAndTheConnectionClosed) {
  auto a = node({"--name", "a", "--shard", "0", "--shards", "1"});
  const auto addr = address_of(*a);
  auto b =
      node({"--name", "b", "--connect", addr, "--remote-shard", "0=a", "--shards", "1", "--keys",
            "200", "--rounds", "10", "--corrupt-frame", "3", "--drive", "exact-sum"});
  auto rc = b->wait_exit(run_timeout);
  ASSERT_TRUE(rc) << b->output();
  EXPECT_EQ(*rc, 1) << b->output();  // its requests failed instead of hanging
  EXPECT_TRUE(has_line(*b, "FAIL")) << b->output();
  auto down = a->wait_line("DOWN b", 40s);
  ASSERT_TRUE(down) << a->output();
  EXPECT_NE(down->find("rejected frame: frame checksum mismatch"), std::string::npos) << *down;
  a->close_stdin();
  EXPECT_EQ(a->wait_exit(run_timeout), 0) << a->output();  // it survived
  EXPECT_TRUE(has_line(*a, "PEER b path=worker-address sent=")) << a->output();
  bool counted = false;
  for (const auto& l : a->lines())
    counted |= l.rfind("PEER b", 0) == 0 && l.find("rejected=1") != std::string::npos;
  EXPECT_TRUE(counted) << a->output();
}

}  // namespace
}  // namespace strata::testing
