// What strata launch says about a run (issue 22, "Operating a cluster"):
// the report's wording (each tier's hits and the misses that fall through,
// the stop signal by name, a store's own report, plurals), a resume of a
// finished run that trains and writes nothing, the progress bar of a
// resumed run, ports in use named by their field, and when --resume is
// suggested. Unit tests on the texts, then real launches.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "actors/checkpoint.hpp"
#include "deploy/launch_report.hpp"
#include "deploy/manifest.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;
using strata::testing::temp_dir;

// --- the texts ----------------------------------------------------------------------

TEST(ReportText, CountsArePluralisedAndZeroIsNo) {
  EXPECT_EQ(detail::count_of(1, "shard"), "1 shard");
  EXPECT_EQ(detail::count_of(2, "shard"), "2 shards");
  EXPECT_EQ(detail::count_of(0, "worker"), "no workers");
  EXPECT_EQ(detail::count_of(1, "cache tier"), "1 cache tier");
}

TEST(ReportText, StopSignalsAreNamed) {
  EXPECT_EQ(detail::signal_name(SIGINT), "Ctrl-C (SIGINT)");
  EXPECT_EQ(detail::signal_name(SIGTERM), "SIGTERM");
}

TEST(ReportText, AShardNamesEachChainTiersHitsAndTheInitializersMisses) {
  actors::tier_stats t;
  t.name = "shard 0";
  t.kind = "shard";
  t.hits = 100;  // DRAM
  t.chain_hits = {100, 3, 40};
  t.initialized = 7;
  t.misses = 50;  // DRAM misses: 3 + 40 + 7
  t.rows = 90;
  t.lmdb_rows = 120;
  const auto text = detail::tier_text(t);
  EXPECT_EQ(text,
            "shard 0: DRAM hits 100, write-behind hits 3, LMDB hits 40, misses to the initializer "
            "7, evictions 0, flushed rows 0, rows 90, LMDB rows 120, write-behind peak 0 rows");
  // LMDB hits are not counted as misses.
  EXPECT_EQ(text.find("misses 50"), std::string::npos) << text;
  // A disk slower than training: the write-behind's bound held requests.
  t.write_behind_peak_rows = 4096;
  t.write_behind_stalls = 3;
  t.write_behind_stall_seconds = 1.3;
  const auto stalled = detail::tier_text(t);
  EXPECT_NE(stalled.find(", write-behind peak 4096 rows, waited on the disk 3 times (1.3 s)"),
            std::string::npos)
      << stalled;
}

TEST(ReportText, ACacheNamesItsHitsAndTheMissesThatGoToTheShards) {
  actors::tier_stats t;
  t.name = "cache 1";
  t.kind = "cache";
  t.hits = 9;
  t.misses = 2;
  EXPECT_EQ(detail::tier_text(t),
            "cache 1: cache hits 9, misses to the shards 2, evictions 0, flushed rows 0, rows 0");
}

deploy::manifest store_manifest() {
  auto m = deploy::parse_manifest(
      "name: kv\nshards:\n  count: 2\n  ssd_path: /nonexistent/kv\nworkers:\n  count: 0\n"
      "gateway:\n  port: 7000\n",
      "kv.yaml");
  if (!m) {
    ADD_FAILURE() << m.err().message();
    return {};
  }
  return *m;
}

TEST(ReportText, AStoreGetsAStoresReport) {
  const auto m = store_manifest();
  ASSERT_TRUE(m.cluster.workers.empty());
  ASSERT_EQ(m.cluster.name, "kv");
  actors::training_report r;
  r.seconds = 12;
  r.stored_keys = 30;
  r.checkpoints = 2;
  r.last_checkpoint = "ck/ckpt-000000000001";
  r.stopped = true;
  for (uint32_t i = 0; i < 2; ++i) {
    actors::tier_stats t;
    t.kind = "shard";
    t.index = i;
    t.name = "shard " + std::to_string(i);
    t.lookups = 10 + i;
    t.pushes = 4;
    t.push_rows = 8;
    r.tiers.push_back(t);
  }
  const auto text = detail::report_text(m, r, SIGINT);
  EXPECT_NE(text.find("== report: store kv"), std::string::npos) << text;
  EXPECT_NE(text.find("lookups (keys, at the shards): 21\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pushes: 8 (16 keys)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rows: 30\n"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoints: 2, last ck/ckpt-000000000001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stopped: on request (Ctrl-C (SIGINT)), while serving"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("examples:"), std::string::npos) << text;
  EXPECT_EQ(text.find("AUC"), std::string::npos) << text;
}

TEST(ReportText, NothingToTrainOnlyWhenEveryWorkerIsAtTheEnd) {
  actors::cluster_config c;
  c.workers.resize(2);
  for (auto& w : c.workers) {
    w.data.limit = 100;
    w.batch_size = 16;  // 7 batches an epoch
    w.epochs = 2;
  }
  EXPECT_EQ(detail::nothing_to_train(c, {14, 13}), "");
  EXPECT_EQ(detail::nothing_to_train(c, {14, 14}).rfind(
                "nothing to train: the checkpoint is at epoch 2 of 2", 0),
            0u)
      << detail::nothing_to_train(c, {14, 14});
  c.workers[0].data.limit = 0;  // unknown: train as asked
  EXPECT_EQ(detail::nothing_to_train(c, {14, 14}), "");
  EXPECT_EQ(detail::nothing_to_train(actors::cluster_config{}, {}), "");  // a store
}

TEST(ReportText, TheProgressBarStartsAtTheResumedPosition) {
  actors::training_progress p;
  const auto text = detail::progress_text(p, 1000, 800);
  EXPECT_NE(text.find(" 80%"), std::string::npos) << text;
  EXPECT_NE(text.find("800/1000 examples"), std::string::npos) << text;
}

// --- real launches ------------------------------------------------------------------

struct run_result {
  int status = -1;  // exit status, -1: did not exit normally
  std::string out, err;
};

run_result run_strata(const fs::path& dir, const std::vector<std::string>& args,
                      double seconds = 120) {
  static int runs = 0;
  const std::string n = std::to_string(runs++);
  strata_process p(args, dir / ("out" + n), dir / ("err" + n));
  auto st = p.wait(seconds);
  EXPECT_TRUE(st) << "strata " << args.front() << " did not end within " << seconds << " s";
  run_result r;
  if (st && WIFEXITED(*st)) r.status = WEXITSTATUS(*st);
  r.out = p.out();
  r.err = p.err();
  return r;
}

// One node, counting objective; `extra` appended (metrics, admin, ...).
fs::path one_node(const fs::path& dir, uint64_t rows, bool checkpoints,
                  const std::string& extra = "") {
  const fs::path manifest = dir / "one.yaml";
  std::ofstream m(manifest);
  m << "name: one\nmode: async\npartitions: 16\nthreads: 2\n"
    << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 1\n  ssd_path: " << (dir / "state").string() << "\n  map_bytes: 64MiB\n"
    << "workers:\n  count: 1\n  batch_size: 16\n"
    << "data:\n  path: " << (dir / "data.tsv").string() << "\n  heldout_fraction: 0\n";
  if (rows > 0) m << "  generate:\n    rows: " << rows << "\n    distinct_keys: 1000\n    seed: 3\n";
  if (checkpoints)
    m << "checkpoint:\n  dir: " << (dir / "ckpt").string()
      << "\n  interval_batches: 10\n  keep: 2\n";
  m << extra;
  return manifest;
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Resume, AFinishedRunTrainsNothingAndWritesNoCheckpoint) {
  temp_dir dir;
  const auto manifest = one_node(dir.path(), 500, true);
  const auto first = run_strata(dir.path(), {"launch", manifest.string()});
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  const auto before = listing(dir.path() / "ckpt");
  auto latest = actors::latest_checkpoint(dir.path() / "ckpt");
  ASSERT_TRUE(latest);
  const auto again = run_strata(dir.path(), {"launch", manifest.string(), "--resume"});
  EXPECT_EQ(again.status, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("nothing to train: the checkpoint is at epoch 1 of 1"),
            std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find(latest->string()), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("== report"), std::string::npos) << again.out;
  // No checkpoint written, none pushed out under keep: 2.
  EXPECT_EQ(listing(dir.path() / "ckpt"), before);
}

TEST(Resume, TheProgressBarOfAResumedRunStartsAtTheCheckpoint) {
  temp_dir dir;
  const auto manifest = one_node(dir.path(), 500, true);
  ASSERT_EQ(run_strata(dir.path(), {"launch", manifest.string()}).status, 0);
  // The first checkpoint: 10 batches of 16 = 160 of 500 examples (32%).
  const auto all = actors::complete_checkpoints(dir.path() / "ckpt");
  ASSERT_FALSE(all.empty());
  const auto resumed =
      run_strata(dir.path(), {"launch", manifest.string(), "--resume", all.front().string()});
  ASSERT_EQ(resumed.status, 0) << resumed.out << resumed.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(resumed.err, m, std::regex(R"(training \[[#.]+\] +([0-9]+)%)")))
      << resumed.err;
  EXPECT_GE(std::stoi(m[1]), 32) << resumed.err;
}

// A listening TCP socket on a free loopback port, held while it lives.
class occupied_port {
 public:
  occupied_port() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~occupied_port() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(Ports, APortInUseIsNamedByItsFieldBeforeAnythingStarts) {
  occupied_port busy;
  const std::string p = std::to_string(busy.port());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"metrics.port", "metrics:\n  port: " + p + "\n"},
      {"admin.port", "admin:\n  port: " + p + "\n  token: abcdefabcdefabcdefabcdef\n"},
      {"gateway.port", "gateway:\n  port: " + p + "\n"},
  };
  for (const auto& [field, section] : cases) {
    temp_dir dir;
    // A previous run left a good checkpoint: still no --resume suggestion.
    const auto manifest = one_node(dir.path(), 500, true);
    ASSERT_EQ(run_strata(dir.path(), {"launch", manifest.string()}).status, 0);
    const auto before = listing(dir.path() / "ckpt");
    std::ofstream(manifest, std::ios::app) << section;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"launch", manifest.string()},
          std::vector<std::string>{"node", "--manifest", manifest.string()}}) {
      const auto r = run_strata(dir.path(), args);
      EXPECT_EQ(r.status, 1) << field << "\n" << r.out << r.err;
      EXPECT_NE(r.err.find(field + " " + p + " (127.0.0.1:" + p + ") is already in use"),
                std::string::npos)
          << field << "\n" << r.err;
      EXPECT_EQ(r.err.find("CivetServer"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("--resume"), std::string::npos) << r.err;
      EXPECT_EQ(r.out.find("training:"), std::string::npos) << field << "\n" << r.out;
    }
    EXPECT_EQ(listing(dir.path() / "ckpt"), before) << field;
  }
}

TEST(ResumeHint, AMissingDataFileSuggestsNoResume) {
  temp_dir dir;
  const auto manifest = one_node(dir.path(), 0, true);  // no data.generate, no data file
  const auto r = run_strata(dir.path(), {"launch", manifest.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("data.path: " + (dir.path() / "data.tsv").string() + " does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("--resume"), std::string::npos) << r.err;
}

TEST(ResumeHint, AManifestWithoutACheckpointSectionSuggestsNoResume) {
  temp_dir dir;
  const auto manifest = one_node(dir.path(), 0, false);
  std::ofstream(dir.path() / "data.tsv") << "\n\n";  // no examples: the node fails
  const auto r = run_strata(dir.path(), {"launch", manifest.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("has no examples"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--resume"), std::string::npos) << r.err;
}

TEST(RunReport, TheReportNamesTierHitsAndTheStopSignal) {
  temp_dir dir;
  // Long enough to be stopped: many epochs over a small file.
  const auto manifest = one_node(dir.path(), 2000, true);
  {
    std::string text;
    {
      std::ifstream in(manifest);
      std::stringstream s;
      s << in.rdbuf();
      text = s.str();
    }
    text = std::regex_replace(text, std::regex("  batch_size: 16\n"),
                              "  batch_size: 16\n  epochs: 1000\n");
    std::ofstream(manifest, std::ios::trunc) << text;
  }
  strata_process node({"node", "--manifest", manifest.string()}, dir.path() / "out",
                      dir.path() / "err");
  ASSERT_TRUE(poll_until(
      [&] {
        return actors::complete_checkpoints(dir.path() / "ckpt").size() >= 1 ||
               node.err().find("strata node: ") != std::string::npos;
      },
      90))
      << node.err();
  node.signal(SIGINT);
  auto st = node.wait(60);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << node.err();
  const auto out = node.out();
  EXPECT_NE(node.err().find("strata node: Ctrl-C (SIGINT): stopping gracefully"),
            std::string::npos)
      << node.err();
  EXPECT_NE(out.find("stopped: on request (Ctrl-C (SIGINT)), before the data ended"),
            std::string::npos)
      << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(\n  shard 0: DRAM hits [0-9]+, write-behind hits [0-9]+, LMDB hits [0-9]+, misses to the initializer [0-9]+,)")))
      << out;
  EXPECT_NE(out.find("1 shard (DRAM"), std::string::npos) << out;
  EXPECT_NE(out.find("1 worker (batch 16)"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::cli
