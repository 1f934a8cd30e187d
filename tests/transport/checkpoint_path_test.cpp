// Paths never come from messages (issue 16 item 1): a shard_checkpoint
// names only the epoch; the shard writes where its own configuration says
// (checkpoint root / ckpt-<epoch> / shard-<index>). A peer that sends the
// old shape (epoch + a directory of its choosing) gets a located error and
// no file appears anywhere it named. Real shard, real LMDB, two real
// bridges over UCX on loopback.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>

#include "actors/checkpoint.hpp"
#include "actors/shard_actor.hpp"
#include "tests/actors/actor_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "transport/codec.hpp"
#include "transport/payloads.hpp"
#include "transport/remote_actors.hpp"

namespace strata::transport {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using strata::testing::temp_dir;

struct system_config : caf::actor_system_config {
  system_config() {
    set("logger.verbosity", caf::atom("quiet"));
    actors::add_message_types(*this);
  }
};

// Node "b" exports a real shard (checkpoint root `root`) as target 7; node
// "a" is a bare bridge that can send any payload.
struct exported_shard {
  static constexpr uint32_t target = 7;
  system_config config;
  caf::actor_system system{config};
  std::unique_ptr<node_transport> b;
  std::unique_ptr<node_bridge> a;
  actors::shard_actor shard;

  exported_shard(const fs::path& dir, const fs::path& root) {
    ::setenv("UCX_NET_DEVICES", "lo", 0);
    auto sc = strata::testing::test_shard_config(dir, 0, strata::testing::exact_sum_table(2), 16);
    sc.checkpoint_root = root;
    auto s = actors::spawn_shard(system, sc);
    EXPECT_TRUE(s) << s.err().to_string();
    if (s) shard = *s;
    bridge_config cb;
    cb.node_name = "b";
    auto tb = node_transport::start(system, cb);
    EXPECT_TRUE(tb) << tb.err().to_string();
    b = std::move(*tb);
    b->export_shard(target, shard);
    bridge_config ca;
    ca.node_name = "a";
    auto ba = node_bridge::start(ca, [](inbound_frame) {});
    EXPECT_TRUE(ba);
    a = std::move(*ba);
    auto peer = a->connect("127.0.0.1", b->bridge().port(), 30s);
    EXPECT_TRUE(peer) << peer.err().to_string();
  }
  ~exported_shard() {
    a->stop();
    b->stop();
    caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  }

  // Sends a request with `payload` and waits for the answer frame.
  inbound_frame ask(frame_type type, std::vector<std::byte> payload) {
    auto answer = std::make_shared<std::promise<expected<inbound_frame>>>();
    auto f = answer->get_future();
    auto s = a->request("b", type, target, std::move(payload),
                        [answer](expected<inbound_frame> r) { answer->set_value(std::move(r)); });
    EXPECT_TRUE(s) << s.err().to_string();
    EXPECT_EQ(f.wait_for(60s), std::future_status::ready);
    auto r = f.get();
    EXPECT_TRUE(r) << r.err().to_string();
    return r ? std::move(*r) : inbound_frame{};
  }
};

std::string error_text(const inbound_frame& f) {
  std::string text;
  if (f.header.type == frame_type::reply_error) (void)decode_payload(f.payload, text);
  return text;
}

TEST(CheckpointPath, APeerCannotNameTheDirectoryAShardWrites) {
  temp_dir dir;
  const fs::path root = dir.path() / "ckpt";
  const fs::path elsewhere = dir.path() / "chosen-by-the-peer";
  exported_shard n(dir.path(), root);

  // The old shape: epoch, then a directory of the sender's choosing.
  auto refused =
      n.ask(frame_type::shard_checkpoint, encode_payload(uint64_t{1}, elsewhere.string()));
  ASSERT_EQ(refused.header.type, frame_type::reply_error)
      << "a shard_checkpoint naming a directory was accepted";
  const auto text = error_text(refused);
  EXPECT_NE(text.find("node 'b': bad shard_checkpoint payload"), std::string::npos) << text;
  EXPECT_NE(text.find("trailing bytes"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(elsewhere)) << "the shard wrote where the message said";
  EXPECT_FALSE(fs::exists(root)) << "a refused message started a checkpoint";

  // The epoch alone: the shard writes under its own root.
  auto ok = n.ask(frame_type::shard_checkpoint, encode_payload(uint64_t{1}));
  ASSERT_EQ(ok.header.type, frame_type::reply) << error_text(ok);
  auto copied = n.ask(frame_type::shard_copied, encode_payload(uint64_t{1}));
  ASSERT_EQ(copied.header.type, frame_type::reply) << error_text(copied);
  const fs::path shard_dir = actors::shard_checkpoint_dir(root / actors::checkpoint_name(1), 0);
  EXPECT_TRUE(fs::exists(shard_dir / actors::checkpoint_shard_state_name)) << shard_dir;
  EXPECT_TRUE(fs::exists(shard_dir / "data.mdb")) << shard_dir;
  EXPECT_FALSE(fs::exists(elsewhere));
}

// The decoder itself: a shard_checkpoint payload is the epoch alone; one
// with a directory after it (the old shape) is refused, naming the offset.
TEST(CheckpointPath, TheDecoderRefusesAShardCheckpointPayloadWithAPath) {
  frame_header h;
  h.type = frame_type::shard_checkpoint;
  EXPECT_TRUE(check_payload_value(h, encode_payload(uint64_t{4})));
  auto with_path = check_payload_value(h, encode_payload(uint64_t{4}, std::string("/etc/cron.d")));
  ASSERT_FALSE(with_path) << "a shard_checkpoint payload carrying a path was accepted";
  EXPECT_NE(with_path.err().message().find("trailing bytes at offset 8"), std::string::npos)
      << with_path.err().message();
}

// In process too: the shard's handler takes no path; without a configured
// checkpoint root it refuses, naming the shard and the manifest setting.
TEST(CheckpointPath, AShardWithoutACheckpointRootRefusesACut) {
  temp_dir dir;
  strata::testing::actor_harness h;
  auto sc =
      strata::testing::test_shard_config(dir.path(), 3, strata::testing::exact_sum_table(2), 16);
  auto shard = actors::spawn_shard(h.system(), sc);
  ASSERT_TRUE(shard) << shard.err().to_string();
  auto a = h.ask<actors::ok_atom>(*shard, actors::checkpoint_atom::value, uint64_t{2});
  h.sched().run();
  ASSERT_TRUE(a->error) << "a cut without a checkpoint root was accepted";
  const auto text = h.system().render(*a->error);
  EXPECT_NE(text.find("shard 3"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoint.dir"), std::string::npos) << text;
  caf::anon_send_exit(*shard, caf::exit_reason::user_shutdown);
  h.sched().run();
}

}  // namespace
}  // namespace strata::transport
