// The soak (label "long", `make test-long`): one seeded run of real
// processes through every stop a production cluster sees — SIGTERM and
// SIGKILL at random points of training, of a scale (2 -> 4 -> 3) and of a
// checkpoint — each followed by `launch --resume`, until the data is done.
// After every stop the latest complete checkpoint must hold the exact sums
// of the batches before its positions (tests/deploy/exact_sums.hpp, the
// independent oracle), positions never go back, a SIGTERM ends the run
// within 30 s, and the last checkpoint holds every batch. The seed and every
// injected point are printed; STRATA_SOAK_SEED replays a run. Once a cycle
// a shard's disk fills (STRATA_FAULT ENOSPC at a random LMDB commit): the
// node fail-stops naming the shard, and the resume is exact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <string>

#include "actors/checkpoint.hpp"
#include "common/file_manifest.hpp"
#include "deploy/manifest.hpp"
#include "tests/deploy/crash_setup.hpp"
#include "tests/deploy/exact_sums.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using strata::testing::temp_dir;

constexpr double graceful_stop_seconds = 30;

// How each round of the soak ends.
enum class stop_kind { sigterm, sigkill };
enum class stop_point { training, scale, checkpoint };

const char* name_of(stop_kind k) { return k == stop_kind::sigterm ? "SIGTERM" : "SIGKILL"; }
const char* name_of(stop_point p) {
  switch (p) {
    case stop_point::training: return "training";
    case stop_point::scale: return "a scale";
    case stop_point::checkpoint: return "a checkpoint";
  }
  return "?";
}

class soak {
 public:
  explicit soak(uint64_t seed) : rng_(seed) {
    const fs::path d = dir_.path();
    manifest_ = d / "soak.yaml";
    checkpoints_ = d / "ckpt";
    token_ = d / "admin.token";
    std::ofstream(token_) << "soak-admin-token-" << seed << "\n";
    fs::permissions(token_, fs::perms::owner_read | fs::perms::owner_write);
    port_ = testing::free_port();
    write_manifest(2);
  }

  // The manifest with `shards` shards: a resume restores into the count the
  // cluster was scaled to.
  void write_manifest(uint32_t shards) {
    const fs::path d = dir_.path();
    std::ofstream m(manifest_);
    m << "name: soak\nmode: async\npartitions: 64\nthreads: 2\n"
      << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
      << "  initializer:\n    kind: zeros\n"
      << "model:\n  embedding_dim: 1\n  objective: count\n"
      << "shards:\n  count: " << shards << "\n  dram_bytes: 128KiB\n  ssd_path: "
      << (d / "state").string() << "\n  map_bytes: 256MiB\n  flush_batch_rows: 512\n"
      << "caches:\n  count: 1\n  sets: 8\n"
      << "workers:\n  count: 2\n  batch_size: 16\n"
      << "data:\n  path: " << (d / "data.tsv").string() << "\n  heldout_fraction: 0\n"
      << "  generate:\n    rows: 500000\n    distinct_keys: 30000\n    seed: 11\n"
      << "admin:\n  port: " << port_ << "\n  token_file: " << token_.string() << "\n"
      << "checkpoint:\n  dir: " << checkpoints_.string() << "\n  interval_batches: 150"
      << "\n  keep: 1000\n  on_failure: stop\n";
    shards_ = shards;
  }

  // One run of the launcher (fresh or resumed) ended by `kind` at `point`
  // after a random delay; returns false once the data is done instead.
  bool round(int n, stop_kind kind, stop_point point, uint32_t scale_to, bool scale_commits) {
    const fs::path d = dir_.path();
    std::vector<std::string> args = {"launch", manifest_.string()};
    if (n > 0) args.push_back("--resume");
    const std::string tag = std::to_string(n);
    strata_process launcher(args, d / ("out" + tag), d / ("err" + tag));
    EXPECT_TRUE(poll_until(
        [&] { return launcher.out().find("training:") != std::string::npos || !launcher.running(); },
        120))
        << launcher.err();
    std::uniform_int_distribution<int> delay_ms(50, 2500);
    const int delay = delay_ms(rng_);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    std::optional<strata_process> scale;
    if (point == stop_point::scale) {
      scale.emplace(std::vector<std::string>{"scale", "--admin",
                                             "127.0.0.1:" + std::to_string(port_), "--token-file",
                                             token_.string(), "--shards",
                                             std::to_string(scale_to)},
                    d / ("scale-out" + tag), d / ("scale-err" + tag));
      // Stop while the scale runs, or once it committed.
      std::uniform_int_distribution<int> in_scale_ms(0, 400);
      const int wait = in_scale_ms(rng_);
      if (scale_commits || wait > 300)
        poll_until([&] { return !scale->running(); }, 60);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(wait));
    } else if (point == stop_point::checkpoint) {
      // A checkpoint being written: a ckpt-N directory without FILES.
      poll_until(
          [&] {
            if (!fs::exists(checkpoints_)) return false;
            for (const auto& e : fs::directory_iterator(checkpoints_))
              if (!fs::exists(e.path() / file_manifest_name)) return true;
            return !launcher.running();
          },
          60);
    }
    if (!launcher.running()) {
      std::printf("[ soak ] round %d: the run finished before the %s\n", n, name_of(kind));
      return finish(launcher);
    }
    std::printf("[ soak ] round %d: %s at %s, %d ms into training%s\n", n, name_of(kind),
                name_of(point), delay,
                point == stop_point::scale
                    ? (" (scale " + std::to_string(shards_) + " -> " + std::to_string(scale_to) +
                       ")")
                          .c_str()
                    : "");
    std::fflush(stdout);
    if (kind == stop_kind::sigterm) {
      EXPECT_EQ(::kill(launcher.pid(), SIGTERM), 0);
      auto status = launcher.wait(graceful_stop_seconds);
      EXPECT_TRUE(status) << "round " << n << ": no exit within " << graceful_stop_seconds
                          << " s of SIGTERM\n"
                          << launcher.out() << launcher.err();
      if (!status) return false;
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << "round " << n << ": " << launcher.err();
    } else {
      auto pid = node_pid(launcher, "soak");
      EXPECT_TRUE(pid) << launcher.out();
      if (!pid) return false;
      EXPECT_EQ(::kill(*pid, SIGKILL), 0);
      auto status = launcher.wait(60);
      EXPECT_TRUE(status) << "round " << n << ": the launcher did not notice the dead node";
      if (!status) return false;
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << launcher.err();
    }
    if (scale) {
      auto st = scale->wait(60);
      EXPECT_TRUE(st) << "round " << n << ": the scale request never ended";
      // The scale committed (its checkpoints have the new count) or it was
      // cut off; the next resume restores into what the latest checkpoint has.
    }
    check_latest(n);
    return !::testing::Test::HasFailure();
  }

  // A resumed run whose shard `shard` finds its disk full from its
  // `commit`th LMDB commit on (STRATA_FAULT, common/io_env.hpp): the shard
  // fail-stops, the node exits non-zero naming it, and the latest
  // checkpoint still holds exact sums.
  bool fault_round(int n) {
    const fs::path d = dir_.path();
    std::uniform_int_distribution<uint32_t> pick_shard(0, shards_ - 1);
    std::uniform_int_distribution<int> pick_commit(5, 120);
    const uint32_t shard = pick_shard(rng_);
    const int commit = pick_commit(rng_);
    const fs::path path = d / "state" / ("shard-" + std::to_string(shard));
    const std::string fault =
        "STRATA_FAULT=lmdb_commit:" + std::to_string(commit) + "+:ENOSPC:" + path.string();
    std::printf("[ soak ] round %d: %s\n", n, fault.c_str());
    std::fflush(stdout);
    const std::string tag = std::to_string(n);
    strata_process launcher({"launch", manifest_.string(), "--resume"}, d / ("out" + tag),
                            d / ("err" + tag), {fault});
    auto status = launcher.wait(120);
    EXPECT_TRUE(status) << "round " << n << ": no exit after the disk filled\n" << launcher.err();
    if (!status) return false;
    const std::string all = launcher.out() + launcher.err();
    if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0 &&
        all.find("injected fault") == std::string::npos) {
      std::printf("[ soak ] round %d: the run finished before commit %d\n", n, commit);
      check_latest(n);
      finished_ = true;
      return false;
    }
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << all;
    EXPECT_NE(all.find("shard " + std::to_string(shard) + " fail-stopped"), std::string::npos)
        << all;
    EXPECT_NE(all.find(path.string()), std::string::npos) << all;
    check_latest(n);
    return !::testing::Test::HasFailure();
  }

  // Lets a resumed run finish; the last checkpoint holds every batch.
  bool finish(strata_process& launcher) {
    auto status = launcher.wait(300);
    EXPECT_TRUE(status) << "the last run did not finish";
    if (!status) return false;
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << launcher.err();
    auto at_end = check_latest(-1);
    EXPECT_EQ(std::accumulate(at_end.begin(), at_end.end(), uint64_t{0}), total_batches(manifest_));
    finished_ = true;
    return false;
  }

  void last_round(int n) {
    const fs::path d = dir_.path();
    const std::string tag = std::to_string(n);
    strata_process launcher({"launch", manifest_.string(), "--resume"}, d / ("out" + tag),
                            d / ("err" + tag));
    std::printf("[ soak ] round %d: resumed, runs to the end\n", n);
    finish(launcher);
  }

  bool finished() const { return finished_; }

 private:
  // The exact sums of the latest complete checkpoint; its positions never
  // go back; the manifest follows its shard count for the next resume.
  std::vector<uint64_t> check_latest(int n) {
    auto latest = actors::latest_checkpoint(checkpoints_);
    EXPECT_TRUE(latest) << "round " << n << ": no checkpoint";
    if (!latest) return {};
    auto positions = check_exact_sums(manifest_, *latest);
    const uint64_t sum = std::accumulate(positions.begin(), positions.end(), uint64_t{0});
    EXPECT_GE(sum, last_sum_) << "round " << n << ": positions went back";
    last_sum_ = sum;
    auto verified = actors::verify_checkpoint(*latest);
    const uint32_t shards =
        verified ? static_cast<uint32_t>(verified->meta.shard_rows.size()) : shards_;
    std::printf("[ soak ] round %d: %s holds the exact sums of %llu batches (%u shards)\n", n,
                latest->filename().c_str(), static_cast<unsigned long long>(sum), shards);
    std::fflush(stdout);
    if (shards != shards_) write_manifest(shards);
    return positions;
  }

  temp_dir dir_;
  std::mt19937_64 rng_;
  fs::path manifest_, checkpoints_, token_;
  uint16_t port_ = 0;
  uint32_t shards_ = 2;
  uint64_t last_sum_ = 0;
  bool finished_ = false;
};

uint64_t soak_seed() {
  if (const char* s = std::getenv("STRATA_SOAK_SEED")) return std::strtoull(s, nullptr, 10);
  return static_cast<uint64_t>(std::random_device{}()) ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

TEST(Soak, StopsAtRandomPointsOfTrainingScalingAndCheckpointsLoseNothing) {
  const uint64_t seed = soak_seed();
  std::printf("[ soak ] seed %llu (STRATA_SOAK_SEED=%llu replays it)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  RecordProperty("seed", std::to_string(seed));
  soak s(seed);
  // Every stop kind at every point; scales go 2 -> 4 -> 3.
  // The first scale is let commit (then stopped), the second is cut at a
  // random point of its run.
  struct step {
    stop_kind kind;
    stop_point point;
    uint32_t scale_to;
    bool scale_commits;
  };
  const std::vector<step> steps = {
      {stop_kind::sigterm, stop_point::scale, 4, true},
      {stop_kind::sigkill, stop_point::training, 0, false},
      {stop_kind::sigkill, stop_point::scale, 3, false},
      {stop_kind::sigterm, stop_point::checkpoint, 0, false},
      {stop_kind::sigkill, stop_point::checkpoint, 0, false},
      {stop_kind::sigterm, stop_point::training, 0, false},
      {stop_kind::sigterm, stop_point::scale, 2, false},
  };
  int n = 0;
  for (int cycle = 0; cycle < 2 && !s.finished() && !HasFailure(); ++cycle)
    for (const auto& st : steps) {
      if (!s.round(n++, st.kind, st.point, st.scale_to, st.scale_commits)) break;
      // A full disk once per cycle, after the checkpoint stops.
      if (st.point == stop_point::checkpoint && st.kind == stop_kind::sigkill &&
          !s.fault_round(n++))
        break;
    }
  if (!s.finished() && !HasFailure()) s.last_round(n);
  EXPECT_TRUE(s.finished()) << "seed " << seed;
}

}  // namespace
}  // namespace strata
