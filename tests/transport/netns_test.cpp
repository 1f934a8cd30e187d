// Several hosts on one machine: two network namespaces joined by a veth
// pair (addresses only inside them, a unique name prefix, always deleted),
// one node per namespace with UCX_TLS=tcp, the exact-sum test across them.
// Needs root and `ip`; skips with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "common/child_process.hpp"
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

 private:
  std::string ip_, a_, b_, subnet_;
  bool ok_ = false;
};

TEST(NetworkNamespaces, ExactSumAcrossTwoHostsOverTcp) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  const auto ip = ip_binary();
  if (ip.empty()) GTEST_SKIP() << "the `ip` tool (iproute2) is not installed";
  if (!run_ip(ip, "netns list")) GTEST_SKIP() << "`ip netns` is not usable here";
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

}  // namespace
}  // namespace strata::testing
