// Files a manifest needs, checked before any node starts: secret files
// created when the manifest allows it (random, mode 0600), missing ones
// named with their field, and `strata launch` failing before it starts a
// node process. And bad input and bounded resources at start (issue 15):
// devices and files without examples refused, a stop ending the data
// count, damaged checkpoints named, the memory a manifest needs checked
// against the host, what the launcher suggests after a failure, errors
// printed as strata wrote them.
#include "deploy/preflight.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "actors/checkpoint.hpp"
#include "deploy/host_memory.hpp"
#include "tests/deploy/process_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::deploy {
namespace {

namespace fs = std::filesystem;
using strata::testing::temp_dir;

std::string read_file(const fs::path& p) { return child_process::slurp(p); }

TEST(SecretFile, CreatedRandomWithMode0600WhenAllowed) {
  temp_dir dir;
  const fs::path file = dir.path() / "sub" / "cluster.token";
  auto created = ensure_secret_file(file, true, "m.yaml: admin.token_file");
  ASSERT_TRUE(created) << created.err().message();
  EXPECT_TRUE(*created);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string token = read_file(file);
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}\n"))) << token;
  // A second call keeps it; another file gets another secret.
  auto again = ensure_secret_file(file, true, "m.yaml: admin.token_file");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  EXPECT_EQ(read_file(file), token);
  const fs::path other = dir.path() / "other.token";
  ASSERT_TRUE(ensure_secret_file(other, true, "x"));
  EXPECT_NE(read_file(other), token);
}

TEST(SecretFile, MissingWithoutPermissionNamesFieldAndPath) {
  temp_dir dir;
  const fs::path file = dir.path() / "absent.token";
  auto r = ensure_secret_file(file, false, "m.yaml: admin.token_file");
  ASSERT_FALSE(r);
  EXPECT_NE(
      r.err().message().find("m.yaml: admin.token_file: " + file.string() + " does not exist"),
      std::string::npos)
      << r.err().message();
  EXPECT_NE(r.err().message().find("create_if_missing: true"), std::string::npos);
  EXPECT_FALSE(fs::exists(file));
}

TEST(SecretFile, AnEmptyFileIsRefused) {
  temp_dir dir;
  const fs::path file = dir.path() / "empty.token";
  std::ofstream(file).close();
  auto r = ensure_secret_file(file, true, "m.yaml: admin.token_file");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message().find("is empty"), std::string::npos) << r.err().message();
}

TEST(Preflight, CreateIfMissingNeedsATokenFile) {
  auto m = parse_manifest(
      "name: t\nshards:\n  ssd_path: s\ndata:\n  path: d.tsv\n"
      "admin:\n  port: 7000\n  token: abc\n  create_if_missing: true\n",
      "t.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().message().find("admin.create_if_missing: needs admin.token_file"),
            std::string::npos)
      << m.err().message();
}

// A two-node manifest whose data file is missing (no generate block).
std::string two_nodes(const fs::path& d, bool create) {
  std::ostringstream m;
  m << "name: pre\nnodes:\n"
    << "  - name: a\n    host: 127.0.0.1\n    transport_port: 1\n    ssd_path: "
    << (d / "a").string()
    << "\n  - name: b\n    host: 127.0.0.1\n    transport_port: 2\n    ssd_path: "
    << (d / "b").string() << "\nshards:\n  ssd_path: " << (d / "state").string()
    << "\ndata:\n  path: " << (d / "missing.tsv").string() << "\nadmin:\n  port: 7999\n"
    << "  token_file: " << (d / "tok" / "admin.token").string() << "\n"
    << "  create_if_missing: " << (create ? "true" : "false") << "\n"
    << "cluster_secret:\n  file: " << (d / "tok" / "cluster.secret").string()
    << "\n  create_if_missing: " << (create ? "true" : "false") << "\n";
  return m.str();
}

struct launch_result {
  std::string out, err;
};

// `strata launch` of two_nodes(dir, create), which must end with status 1.
launch_result launch_expecting_failure(const fs::path& dir, bool create) {
  const fs::path manifest = dir / "pre.yaml";
  std::ofstream(manifest) << two_nodes(dir, create);
  strata_process p({"launch", manifest.string()}, dir / "out", dir / "err");
  auto st = p.wait(60);
  EXPECT_TRUE(st) << "launch did not end";
  EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << p.err();
  return {p.out(), p.err()};
}

TEST(Preflight, LaunchFailsBeforeAnyNodeStartsNamingTheMissingFile) {
  temp_dir dir;
  const auto r = launch_expecting_failure(dir.path(), false);
  EXPECT_NE(r.err.find("pre.yaml: admin.token_file: " +
                       (dir.path() / "tok" / "admin.token").string() + " does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("launch: starting"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() / "tok" / "admin.token"));
}

TEST(Preflight, LaunchCreatesTheTokenThenNamesTheMissingDataFile) {
  temp_dir dir;
  const auto r = launch_expecting_failure(dir.path(), true);
  const fs::path token = dir.path() / "tok" / "admin.token";
  EXPECT_NE(r.out.find("admin: created the token file " + token.string() + " (mode 0600)"),
            std::string::npos)
      << r.out;
  struct stat s {};
  ASSERT_EQ(::stat(token.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0600u);
  // The cluster secret likewise (issue 16): owner-only, in one step.
  const fs::path secret = dir.path() / "tok" / "cluster.secret";
  EXPECT_NE(r.out.find("cluster: created the cluster secret " + secret.string() + " (mode 0600)"),
            std::string::npos)
      << r.out;
  ASSERT_EQ(::stat(secret.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 0777, 0600u);
  EXPECT_NE(r.err.find("pre.yaml: data.path: " + (dir.path() / "missing.tsv").string() +
                       " does not exist"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("launch: starting"), std::string::npos) << r.out;
}

// A one-node manifest of the count objective reading `data` (generated
// when `rows` > 0), a checkpoint every 10 batches under dir/ckpt, the last
// `heldout_fraction` of the examples held out.
fs::path one_node(const fs::path& dir, const fs::path& data, uint64_t rows = 0,
                  const std::string& heldout_fraction = "0") {
  const fs::path manifest = dir / "one.yaml";
  std::ofstream m(manifest);
  m << "name: one\nmode: async\npartitions: 16\nthreads: 2\n"
    << "table:\n  name: counts\n  optimizer:\n    kind: sgd\n    learning_rate: 1\n"
    << "  initializer:\n    kind: zeros\n"
    << "model:\n  embedding_dim: 1\n  objective: count\n"
    << "shards:\n  count: 1\n  ssd_path: " << (dir / "state").string() << "\n  map_bytes: 64MiB\n"
    << "workers:\n  count: 1\n  batch_size: 16\n"
    << "data:\n  path: " << data.string() << "\n  heldout_fraction: " << heldout_fraction << "\n";
  if (rows > 0)
    m << "  generate:\n    rows: " << rows << "\n    distinct_keys: 1000\n    seed: 3\n";
  m << "checkpoint:\n  dir: " << (dir / "ckpt").string() << "\n  interval_batches: 10\n";
  return manifest;
}

// Runs strata with `args`; it must end within `seconds` with status 1.
launch_result run_expecting_failure(const fs::path& dir, const std::vector<std::string>& args,
                                    double seconds = 60) {
  strata_process p(args, dir / "out", dir / "err");
  auto st = p.wait(seconds);
  EXPECT_TRUE(st) << "strata " << args.front() << " did not end within " << seconds << " s";
  EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << p.err();
  return {p.out(), p.err()};
}

TEST(Preflight, ADeviceAsDataFileIsRefusedByName) {
  // /dev/zero has no end: counting its lines ran forever at 100% CPU.
  temp_dir dir;
  const auto manifest = one_node(dir.path(), "/dev/zero");
  const auto r = run_expecting_failure(dir.path(), {"launch", manifest.string()}, 30);
  EXPECT_NE(r.err.find("one.yaml: data.path: /dev/zero is a character device, not a regular file"),
            std::string::npos)
      << r.err;
  // `strata node` (no launcher preflight) and a manifest that is a device.
  const auto n = run_expecting_failure(dir.path(), {"node", "--manifest", manifest.string()}, 30);
  EXPECT_NE(n.err.find("/dev/zero is a character device"), std::string::npos) << n.err;
  const auto v = run_expecting_failure(dir.path(), {"validate", "/dev/zero"}, 30);
  EXPECT_NE(v.err.find("manifest /dev/zero is a character device"), std::string::npos) << v.err;
}

TEST(Preflight, ADataFileOfBlankLinesIsAnErrorNamingIt) {
  // It trained nothing and exited 0.
  temp_dir dir;
  const fs::path data = dir.path() / "blank.tsv";
  std::ofstream(data) << "\n\n\r\n\n";
  const auto manifest = one_node(dir.path(), data);
  const auto r = run_expecting_failure(dir.path(), {"launch", manifest.string()});
  EXPECT_NE(r.err.find("data.path: " + data.string() + " has no examples"), std::string::npos)
      << r.err;
  // No checkpoint exists: the launcher does not suggest a resume.
  EXPECT_EQ(r.err.find(" --resume"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a resume cannot help"), std::string::npos) << r.err;
}

TEST(Preflight, AStopEndsTheCountOfAHugeDataFile) {
  // A 1 TiB sparse file takes minutes to count; SIGTERM ends the count
  // (and the node) instead of waiting for it.
  temp_dir dir;
  const fs::path data = dir.path() / "huge.tsv";
  { std::ofstream(data).close(); }
  fs::resize_file(data, uint64_t{1} << 40);
  const auto manifest = one_node(dir.path(), data);
  strata_process p({"node", "--manifest", manifest.string()}, dir.path() / "out",
                   dir.path() / "err");
  // Inside the count once the node has read 64 MiB (its /proc io counter).
  auto bytes_read = [&]() -> uint64_t {
    std::ifstream io("/proc/" + std::to_string(p.pid()) + "/io");
    std::string key;
    uint64_t value = 0;
    while (io >> key >> value)
      if (key == "rchar:") return value;
    return 0;
  };
  ASSERT_TRUE(poll_until([&] { return bytes_read() > (uint64_t{64} << 20); }, 60)) << p.err();
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  auto st = p.wait(60);
  ASSERT_TRUE(st) << "the node did not stop within 60 s of SIGTERM: " << p.err();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << p.err();
  EXPECT_NE(p.err().find("stopped while counting the examples of " + data.string()),
            std::string::npos)
      << p.err();
}

TEST(Preflight, ACheckpointFileLinkedToADeviceIsRefusedByVerifyAndResume) {
  // data.mdb replaced by a link to /dev/zero hung `checkpoint verify` and
  // --resume (the checksum read never ended).
  temp_dir dir;
  const auto manifest = one_node(dir.path(), dir.path() / "data.tsv", 500);
  {
    strata_process train({"launch", manifest.string()}, dir.path() / "out", dir.path() / "err");
    auto st = train.wait(120);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << train.out() << train.err();
  }
  auto latest = actors::latest_checkpoint(dir.path() / "ckpt");
  ASSERT_TRUE(latest);
  {
    // Only the newest damaged: a resume names it and falls back.
    fs::remove(*latest / "shard-0" / "data.mdb");
    fs::create_symlink("/dev/zero", *latest / "shard-0" / "data.mdb");
    strata_process resumed(
        {"launch", manifest.string(), "--resume", (dir.path() / "ckpt").string()},
        dir.path() / "rout", dir.path() / "rerr");
    auto st = resumed.wait(60);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << resumed.err();
    EXPECT_NE(resumed.err().find("checkpoint " + latest->string() + " is damaged"),
              std::string::npos)
        << resumed.err();
    EXPECT_NE(resumed.err().find("falling back to the previous complete checkpoint"),
              std::string::npos)
        << resumed.err();
  }
  latest = actors::latest_checkpoint(dir.path() / "ckpt");
  ASSERT_TRUE(latest);
  for (const auto& ckpt : actors::complete_checkpoints(dir.path() / "ckpt")) {
    if (fs::is_symlink(ckpt / "shard-0" / "data.mdb")) continue;
    fs::remove(ckpt / "shard-0" / "data.mdb");
    fs::create_symlink("/dev/zero", ckpt / "shard-0" / "data.mdb");
  }
  const std::string named =
      (*latest / "shard-0" / "data.mdb").string() + " is a character device, not a regular file";
  const auto v = run_expecting_failure(dir.path(), {"checkpoint", "verify", latest->string()}, 30);
  EXPECT_NE(v.err.find(named), std::string::npos) << v.err;
  const auto r = run_expecting_failure(
      dir.path(), {"launch", manifest.string(), "--resume", (dir.path() / "ckpt").string()}, 30);
  EXPECT_NE(r.err.find("is a character device, not a regular file"), std::string::npos) << r.err;
  // Every checkpoint is damaged: no --resume suggestion, the reason instead.
  EXPECT_EQ(r.err.find("--resume\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("verifies ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a resume cannot help"), std::string::npos) << r.err;
  // The file list itself linked to the device: refused as damage too.
  fs::remove(*latest / "FILES");
  fs::create_symlink("/dev/zero", *latest / "FILES");
  const auto f = run_expecting_failure(dir.path(), {"checkpoint", "verify", latest->string()}, 30);
  EXPECT_NE(f.err.find("corrupt_data: checkpoint file list " + (*latest / "FILES").string() +
                       " is a character device"),
            std::string::npos)
      << f.err;
}

TEST(Preflight, AFailureAfterAGoodCheckpointSuggestsTheResume) {
  // The node fails on its data after a run left good checkpoints: the
  // --resume suggestion names the checkpoint a resume would take.
  temp_dir dir;
  const fs::path data = dir.path() / "data.tsv";
  const auto manifest = one_node(dir.path(), data, 500);
  {
    strata_process train({"launch", manifest.string()}, dir.path() / "out", dir.path() / "err");
    auto st = train.wait(120);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << train.out() << train.err();
  }
  auto latest = actors::latest_checkpoint(dir.path() / "ckpt");
  ASSERT_TRUE(latest);
  std::ofstream(data, std::ios::trunc) << "\n\n";
  const auto r = run_expecting_failure(dir.path(), {"launch", manifest.string()});
  EXPECT_NE(
      r.err.find("Resume from the latest complete checkpoint (" + latest->filename().string() +
                 ") with: strata launch " + manifest.string() + " --resume"),
      std::string::npos)
      << r.err;
}

TEST(Report, BadLinesOfTheHeldOutWindowAreCounted) {
  // Three bad labels among the last 50 lines (the held-out window): the
  // report said "bad lines: 0" with 47 held-out examples.
  temp_dir dir;
  const fs::path data = dir.path() / "data.tsv";
  const auto manifest = one_node(dir.path(), data, 500, "0.1");
  {
    strata_process gen({"launch", manifest.string()}, dir.path() / "out", dir.path() / "err");
    auto st = gen.wait(120);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << gen.out() << gen.err();
    EXPECT_NE(gen.out().find("bad lines: 0\n"), std::string::npos) << gen.out();
  }
  std::vector<std::string> lines;
  {
    std::ifstream in(data);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 500u);
  for (size_t i = 497; i < 500; ++i) lines[i][0] = '9';  // a label other than 0/1
  {
    std::ofstream out(data, std::ios::trunc);
    for (const auto& l : lines) out << l << '\n';
  }
  strata_process run({"launch", manifest.string()}, dir.path() / "out2", dir.path() / "err2");
  auto st = run.wait(120);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << run.out() << run.err();
  EXPECT_NE(run.out().find("held-out examples: 47\n"), std::string::npos) << run.out();
  EXPECT_NE(run.out().find("bad lines: 3\n"), std::string::npos) << run.out();
}

// Manifests that validated but aborted `strata launch` in std::bad_alloc.
TEST(HostMemory, LaunchRefusesWhatThisHostCannotHoldByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model:\n  hidden: [65536, 65536, 65536]\n", "model.hidden [65536, 65536, 65536]"},
      {"shards:\n  dram_bytes: 2TiB\n", "shards.dram_bytes 2.0 TiB x 1 shards: 2.0 TiB"},
      {"caches:\n  sets: 67108864\n", "caches.sets 67108864 x 32 slots"},
  };
  for (const auto& [section, named] : cases) {
    temp_dir dir;
    const fs::path data = dir.path() / "d.tsv";
    std::ofstream(data) << "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13"
                        << "\ta\tb\tc\td\te\tf\tg\th\ti\tj\tk\tl\tm\tn\to\tp\tq"
                        << "\tr\ts\tt\tu\tv\tw\tx\ty\tz\n";
    std::string text = "name: big\n" + section + "data:\n  path: " + data.string() + "\n";
    // The section may be shards: itself; ssd_path goes under it then.
    if (section.rfind("shards:", 0) == 0)
      text.insert(text.find("\n", text.find("shards:")) + 1,
                  "  ssd_path: " + (dir.path() / "state").string() + "\n");
    else
      text += "shards:\n  ssd_path: " + (dir.path() / "state").string() + "\n";
    const fs::path manifest = dir.path() / "big.yaml";
    std::ofstream(manifest) << text;
    auto parsed = load_manifest(manifest);
    ASSERT_TRUE(parsed) << parsed.err().message();
    auto memory = check_host_memory(*parsed, "");
    ASSERT_FALSE(memory) << "this host holds " << section;
    EXPECT_EQ(memory.err().code(), errc::capacity_exceeded);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"launch", manifest.string()},
          std::vector<std::string>{"node", "--manifest", manifest.string()}}) {
      // Exits 1 (not a signal: no abort, no core) naming the field.
      const auto r = run_expecting_failure(dir.path(), args, 60);
      EXPECT_NE(r.err.find("big.yaml: this host cannot hold what"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
    }
    // validate warns (the manifest may be meant for a larger host).
    strata_process v({"validate", manifest.string()}, dir.path() / "vout", dir.path() / "verr");
    auto st = v.wait(30);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << v.err();
    EXPECT_NE(v.err().find("warning: " + manifest.string() + ": this host cannot hold"),
              std::string::npos)
        << v.err();
  }
}

TEST(HostMemory, SparseReservationsAreNotCounted) {
  // large.yaml reserves 1 TiB of LMDB map per shard (address space): it
  // still fits a host of a few GiB.
  auto m = load_manifest(fs::path(STRATA_EXAMPLES_DIR) / "large.yaml");
  ASSERT_TRUE(m) << m.err().message();
  uint64_t total = 0;
  for (const auto& item : start_allocations(*m, "")) {
    EXPECT_EQ(item.what.find("map_bytes"), std::string::npos) << item.what;
    total += item.bytes;
  }
  EXPECT_LT(total, uint64_t{3} << 30);
  EXPECT_GT(total, uint64_t{2} << 30);  // 8 shards x 256 MiB of DRAM tier, caches, dense
}

TEST(HostMemory, AnAllocationFailureAtStartIsANamedError) {
  // Address space capped below the 3 GiB DRAM tier the host itself could
  // hold: the allocation fails at start. It aborted in std::bad_alloc.
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an AddressSanitizer binary reserves terabytes of shadow address space at "
                  "start, so it cannot run under `ulimit -v` at all (make test runs this)";
#endif
  temp_dir dir;
  const fs::path data = dir.path() / "d.tsv";
  std::ofstream(data) << "0 1:1:1\n";
  const fs::path manifest = dir.path() / "cap.yaml";
  std::ofstream(manifest) << "name: cap\nmodel:\n  slots: 1\nshards:\n  ssd_path: "
                          << (dir.path() / "state").string()
                          << "\n  dram_bytes: 3GiB\n  map_bytes: 64MiB\ndata:\n  format: libffm\n"
                          << "  path: " << data.string() << "\n";
  child_process p("/bin/sh",
                  {"-c", std::string("ulimit -v 2500000 && exec ") + STRATA_BINARY +
                             " node --manifest " + manifest.string()},
                  {}, child_output{dir.path() / "out", dir.path() / "err"});
  auto st = p.wait_raw(std::chrono::seconds(60));
  ASSERT_TRUE(st) << "strata node did not end";
  ASSERT_TRUE(WIFEXITED(*st)) << "ended by signal " << WTERMSIG(*st) << ": " << p.err();
  EXPECT_EQ(WEXITSTATUS(*st), 1) << p.err();
  // Where this host has less than 3 GiB left, the memory check refuses first.
  const bool named = p.err().find("strata node: out of memory") != std::string::npos ||
                     p.err().find("this host cannot hold") != std::string::npos;
  EXPECT_TRUE(named) << p.err();
  EXPECT_EQ(p.err().find("terminate called"), std::string::npos) << p.err();
}

TEST(Errors, AFailedRunPrintsThePlainMessageNotCafsWrapper) {
  // Every LMDB commit fails with ENOSPC (common/io_env.hpp): the shard
  // fail-stops and the node names the error as strata wrote it, not as
  // "system_error(runtime_error, (...))".
  temp_dir dir;
  const auto manifest = one_node(dir.path(), dir.path() / "data.tsv", 500);
  child_process p(STRATA_BINARY, {"launch", manifest.string()},
                  {"STRATA_FAULT=lmdb_commit:1+:ENOSPC"},
                  child_output{dir.path() / "out", dir.path() / "err"});
  auto st = p.wait_raw(std::chrono::seconds(120));
  ASSERT_TRUE(st) << "launch did not end";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << p.err();
  EXPECT_NE(p.err().find("strata node: training: shard 0 fail-stopped"), std::string::npos)
      << p.err();
  EXPECT_NE(p.err().find("disk_full: "), std::string::npos) << p.err();
  EXPECT_EQ(p.err().find("system_error("), std::string::npos) << p.err();
}

TEST(Errors, ServeOnAFullDiskSaysDiskFull) {
  // The serving LMDB copy on a 48 KiB tmpfs (a private mount namespace):
  // the load fails with disk_full, not as an I/O error.
  temp_dir dir;
  const auto manifest = one_node(dir.path(), dir.path() / "data.tsv", 500);
  {
    strata_process train({"launch", manifest.string()}, dir.path() / "out", dir.path() / "err");
    auto st = train.wait(120);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << train.out() << train.err();
  }
  const fs::path small = dir.path() / "small";
  fs::create_directories(small);
  std::ofstream(manifest, std::ios::app)
      << "serving:\n  lmdb_path: " << (small / "serving").string() << "\n";
  const std::string unshare_flags = ::geteuid() == 0 ? "-m" : "-rm";
  const std::string script =
      "mount -t tmpfs -o size=48k tmpfs \"$0\" || exit 77; exec \"$1\" serve \"$2\"";
  child_process p(
      "unshare",
      {unshare_flags, "sh", "-c", script, small.string(), STRATA_BINARY, manifest.string()}, {},
      child_output{dir.path() / "sout", dir.path() / "serr"});
  auto st = p.wait_raw(std::chrono::seconds(60));
  ASSERT_TRUE(st) << "serve did not end";
  ASSERT_TRUE(WIFEXITED(*st)) << p.err();
  if (WEXITSTATUS(*st) == 77 || p.err().find("unshare:") != std::string::npos)
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace: " << p.err();
  EXPECT_EQ(WEXITSTATUS(*st), 1) << p.err();
  EXPECT_NE(p.err().find("strata serve: disk_full: "), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("No space left on device"), std::string::npos) << p.err();
}

}  // namespace
}  // namespace strata::deploy
