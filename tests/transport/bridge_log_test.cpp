// What the node bridge logs (issue 22, "log what is true, once"): nothing
// about CUDA memory unless the node moves device rows; no "listening"
// line of its own (its owner prints where it listens); a peer that stops
// cleanly "left (goodbye)", not "down"; a node's own stop is one line.
// Two bridges in one process over UCX on loopback; their log (stderr) is
// captured.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <streambuf>
#include <thread>
#include <string>

#include "transport/node_bridge.hpp"

namespace strata::transport {
namespace {

using namespace std::chrono_literals;

// std::cerr into a string while alive; bridges' progress threads write to
// it concurrently, so every write takes a lock.
class captured_cerr : public std::streambuf {
 public:
  captured_cerr() : old_(std::cerr.rdbuf(this)) {}
  ~captured_cerr() override { std::cerr.rdbuf(old_); }
  std::string text() {
    std::lock_guard lock(mu_);
    return text_;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    std::lock_guard lock(mu_);
    text_.push_back(static_cast<char>(c));
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard lock(mu_);
    text_.append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  std::streambuf* old_;
  std::mutex mu_;
  std::string text_;
};

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::unique_ptr<node_bridge> start_bridge(const std::string& name, bool device_memory = false) {
  ::setenv("UCX_NET_DEVICES", "lo", 0);
  bridge_config c;
  c.node_name = name;
  c.device_memory = device_memory;
  auto b = node_bridge::start(c, [](inbound_frame) {});
  EXPECT_TRUE(b) << b.err().to_string();
  return b ? std::move(*b) : nullptr;
}

TEST(BridgeLog, StartSaysNothingAboutCudaOrListeningUnlessAsked) {
  captured_cerr log;
  {
    auto a = start_bridge("a");
    ASSERT_TRUE(a);
    a->stop();
  }
  EXPECT_EQ(log.text().find("CUDA"), std::string::npos) << log.text();
  EXPECT_EQ(log.text().find("listening"), std::string::npos) << log.text();
  {
    auto gpu = start_bridge("gpu", /*device_memory=*/true);
    ASSERT_TRUE(gpu);
    gpu->stop();
  }
  // A node with device rows learns, once, how UCX moves them.
  EXPECT_EQ(occurrences(log.text(), "[gpu]: UCX "), 1u) << log.text();
  EXPECT_EQ(occurrences(log.text(), "CUDA memory"), 1u) << log.text();
}

TEST(BridgeLog, APeerThatStopsLeftItIsNotDown) {
  captured_cerr log;
  auto a = start_bridge("a");
  auto b = start_bridge("b");
  ASSERT_TRUE(a && b);
  auto peer = a->connect("127.0.0.1", b->port(), 30s);
  ASSERT_TRUE(peer) << peer.err().to_string();
  ASSERT_TRUE(b->wait_for_peer("a", 30s));
  b->stop();
  // a learns of the goodbye on its progress thread.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (a->is_up("b") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  a->stop();
  const std::string text = log.text();
  EXPECT_EQ(occurrences(text, "[a]: node 'b' left (goodbye)"), 1u) << text;
  EXPECT_EQ(occurrences(text, "[b]: stopping: goodbye to node 'a'"), 1u) << text;
  EXPECT_EQ(text.find(" down"), std::string::npos) << text;
}

}  // namespace
}  // namespace strata::transport
