#include "bench/checkpoint_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/checkpoint.hpp"
#include "actors/local_cluster.hpp"
#include "bench/training_data.hpp"
#include "common/file_manifest.hpp"
#include "common/hash.hpp"
#include "model/datagen.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;
using bench_clock = std::chrono::steady_clock;

const row_layout bench_layout{16, optimizer_kind::adagrad, true};
constexpr uint32_t partitions = 4096;
constexpr size_t write_batch = 100000;

double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

void check(const status& s, const std::string& what) {
  if (!s) throw std::runtime_error("bench checkpoint: " + what + ": " + s.err().to_string());
}

std::string quoted(const fs::path& p) {
  std::string out = "'";
  for (char c : p.string()) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// The limit: cp of one file and sync of the copy; seconds.
double plain_copy(const fs::path& file, const fs::path& to_dir) {
  fs::create_directories(to_dir);
  const std::string cmd =
      "cp " + quoted(file) + " " + quoted(to_dir) + " && sync " + quoted(to_dir / file.filename());
  const auto start = bench_clock::now();
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("bench checkpoint: failed: " + cmd);
  return seconds_since(start);
}

// An environment of `rows` rows, written in LMDB key order.
void populate(lmdb_tier& tier, uint64_t rows) {
  std::vector<std::pair<uint32_t, uint64_t>> order(rows);
  for (uint64_t k = 0; k < rows; ++k) order[k] = {partition_of(k + 1, partitions), k + 1};
  std::sort(order.begin(), order.end());
  optimizer_config adagrad;
  adagrad.kind = optimizer_kind::adagrad;
  row_buffer batch(bench_layout);
  batch.reserve(write_batch);
  row_buffer none(bench_layout);
  for (size_t i = 0; i < order.size(); ++i) {
    const uint64_t key = order[i].second;
    std::byte* r = batch.append(key);
    meta_of(r) = row_meta{make_version(0, key % 1000 + 1), 0, 0};
    float* w = weights_of(r);
    for (uint32_t j = 0; j < bench_layout.dim; ++j)
      w[j] = static_cast<float>((key >> (j % 40)) & 0xffff) * 1e-4f;
    init_optimizer_state(adagrad, bench_layout, r);
    if (batch.size() == write_batch || i + 1 == order.size()) {
      check(tier.store(batch.keys(), batch.rows(), true, none), "populate");
      batch.clear();
    }
  }
  check(tier.sync(), "sync");
}

actors::cluster_config restore_target(const fs::path& dir) {
  actors::cluster_config c;
  c.name = "bench";
  c.partitions = partitions;
  c.table.name = "bench";
  c.table.layout = bench_layout;
  c.table.optimizer.kind = optimizer_kind::adagrad;
  actors::shard_config s;
  s.table = c.table;
  s.lmdb.directory = dir;
  s.lmdb.table = c.table.name;
  s.lmdb.partitions = partitions;
  s.lmdb.map_bytes = size_t{1} << 40;
  c.shards.push_back(s);
  c.workers.push_back(actors::worker_config{});
  return c;
}

void bench_copy_and_restore(const checkpoint_bench_options& o, bench_report& report) {
  const fs::path live = o.work_dir / "live";
  const fs::path ckpt = o.work_dir / "ckpt" / actors::checkpoint_name(1);
  fs::remove_all(o.work_dir / "live");
  fs::remove_all(o.work_dir / "ckpt");
  fs::remove_all(o.work_dir / "restored");
  fs::remove_all(o.work_dir / "cp");

  lmdb_tier_config lc;
  lc.directory = live;
  lc.table = "bench";
  lc.partitions = partitions;
  auto opened = lmdb_tier::open(bench_layout, lc);
  if (!opened) throw std::runtime_error("bench checkpoint: " + opened.err().to_string());
  auto& tier = **opened;
  std::cerr << "bench checkpoint: writing " << o.rows << " rows ...\n";
  populate(tier, o.rows);

  // A checkpoint of one shard as the cluster takes it.
  std::cerr << "bench checkpoint: checkpointing ...\n";
  const fs::path shard_dir = actors::shard_checkpoint_dir(ckpt, 0);
  auto start = bench_clock::now();
  fs::create_directories(shard_dir);
  check(tier.sync(), "sync");
  check(tier.copy_compacted(shard_dir), "copy");
  const uint32_t tick = 0;
  const uint64_t no_sketch = 0;
  std::vector<uint8_t> state(sizeof tick + sizeof no_sketch, 0);
  check(actors::write_file_synced(shard_dir / actors::checkpoint_shard_state_name, state.data(),
                                  state.size()),
        "shard state");
  actors::checkpoint_meta meta;
  meta.cluster = "bench";
  meta.epoch = 1;
  meta.table = "bench";
  meta.dim = bench_layout.dim;
  meta.optimizer = bench_layout.optimizer;
  meta.partitions = partitions;
  meta.owners.assign(partitions, 0);
  meta.shard_rows = {tier.size()};
  meta.positions = {0};
  check(actors::write_file_synced(ckpt / actors::checkpoint_dense_name, "", 0), "dense");
  check(actors::write_checkpoint_meta(ckpt, meta), "meta");
  check(actors::sync_tree(ckpt), "sync");
  auto listed = write_file_manifest(ckpt);
  if (!listed) throw std::runtime_error("bench checkpoint: " + listed.err().to_string());
  const double checkpoint_s = seconds_since(start);
  const double live_mb = static_cast<double>(fs::file_size(live / "data.mdb")) / 1e6;
  const double copy_mb = static_cast<double>(fs::file_size(shard_dir / "data.mdb")) / 1e6;
  const double cp_s = plain_copy(live / "data.mdb", o.work_dir / "cp" / "live");
  const double rows = static_cast<double>(o.rows);
  std::cerr << "bench checkpoint: checkpoint " << checkpoint_s << " s (" << copy_mb
            << " MB copy of a " << live_mb << " MB file), cp " << cp_s << " s\n";
  report.add({"checkpoint_rows_per_s", rows / checkpoint_s, "rows/s", "cp", rows / cp_s});
  report.add({"checkpoint_mb_per_s", live_mb / checkpoint_s, "MB/s", "cp", live_mb / cp_s});

  std::cerr << "bench checkpoint: restoring ...\n";
  auto target = restore_target(o.work_dir / "restored");
  start = bench_clock::now();
  auto restored = actors::restore_checkpoint(ckpt, target);
  if (!restored) throw std::runtime_error("bench checkpoint: " + restored.err().to_string());
  const double restore_s = seconds_since(start);
  const double cp_restore_s = plain_copy(shard_dir / "data.mdb", o.work_dir / "cp" / "ckpt");
  std::cerr << "bench checkpoint: restore " << restore_s << " s, cp " << cp_restore_s << " s\n";
  report.add({"restore_rows_per_s", rows / restore_s, "rows/s", "cp", rows / cp_restore_s});
  report.add({"restore_mb_per_s", copy_mb / restore_s, "MB/s", "cp", copy_mb / cp_restore_s});
  fs::remove_all(o.work_dir / "cp");
}

void bench_training(const checkpoint_bench_options& o, bench_report& report) {
  const fs::path data = o.work_dir / "train.tsv";
  if (!fs::exists(data)) {
    model::datagen_config gen;
    gen.output = data;
    gen.rows = o.train_rows;
    gen.distinct_keys = o.distinct_keys;
    auto planted = model::generate(gen);
    if (!planted) throw std::runtime_error("bench checkpoint: " + planted.err().to_string());
  }
  auto run = [&](const std::string& label, bool checkpoints) {
    actors::cluster_config c = o.base;
    split_training_data(c, data, o.train_rows);
    c.heldout = model::reader_config{};
    c.heldout_examples = 0;
    const fs::path root = o.work_dir / ("train-" + label);
    fs::remove_all(root);
    for (auto& s : c.shards) s.lmdb.directory = root / ("shard" + std::to_string(s.index));
    c.checkpoint = actors::checkpoint_settings{};
    if (checkpoints) {
      c.checkpoint.directory = root / "checkpoints";
      c.checkpoint.interval_batches = o.interval_batches;
      c.checkpoint.at_stop = false;
      c.checkpoint.keep = 2;
    } else {
      // The same rounds (cut points), no checkpoints.
      c.checkpoint.round_batches =
          std::min<uint64_t>(c.checkpoint.round_batches, o.interval_batches);
    }
    std::cerr << "bench checkpoint: training " << label << " ...\n";
    auto r = actors::run_local_cluster(c);
    if (!r) throw std::runtime_error("bench checkpoint (" + label + "): " + r.err().to_string());
    std::cerr << "bench checkpoint: " << label << ": " << r->examples_per_s << " examples/s, "
              << r->checkpoints << " checkpoints\n";
    return *r;
  };
  const auto without = run("no-checkpoints", false);
  const auto with = run("checkpointing", true);
  report.add({"train_examples_per_s_checkpointing", with.examples_per_s, "examples/s",
              "no_checkpoints", without.examples_per_s});
}

}  // namespace

void run_checkpoint_bench(const checkpoint_bench_options& options, bench_report& report) {
  bench_copy_and_restore(options, report);
  bench_training(options, report);
}

}  // namespace strata::bench
