#include "bench/e2e_bench.hpp"

#include <cstdio>
#include <iostream>
#include <regex>
#include <stdexcept>

#include "actors/local_cluster.hpp"
#include "bench/training_data.hpp"
#include "model/datagen.hpp"

namespace strata::bench {
namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// Points every reader of `config` at the benchmark's data: workers split
// the first train_rows rows, the held-out window follows them.
void use_data(actors::cluster_config& config, const std::filesystem::path& data,
              const e2e_bench_options& o, const std::filesystem::path& lmdb_root) {
  split_training_data(config, data, o.train_rows);
  config.heldout = model::reader_config{};
  config.heldout.path = data;
  config.heldout.format = model::data_format::criteo_tsv;
  config.heldout.skip = o.train_rows;
  config.heldout.limit = o.heldout_rows;
  config.heldout_examples = o.heldout_rows;
  for (auto& s : config.shards) s.lmdb.directory = lmdb_root / ("shard" + std::to_string(s.index));
}

struct hit_rates {
  double cache = 0, dram = 0, ssd = 0;
};

hit_rates rates(const actors::training_report& r) {
  uint64_t cache_hits = 0, cache_total = 0, dram = 0, ssd = 0, shard_total = 0;
  for (const auto& t : r.tiers) {
    if (t.chain_hits.empty()) {
      cache_hits += t.hits;
      cache_total += t.hits + t.misses;
      continue;
    }
    dram += t.chain_hits[0];
    if (t.chain_hits.size() > 2) ssd += t.chain_hits[2];
    for (uint64_t h : t.chain_hits) shard_total += h;
    shard_total += t.initialized;
  }
  hit_rates out;
  if (cache_total) out.cache = double(cache_hits) / double(cache_total);
  if (shard_total) {
    out.dram = double(dram) / double(shard_total);
    out.ssd = double(ssd) / double(shard_total);
  }
  return out;
}

actors::training_report train(const std::string& label, const actors::cluster_config& config) {
  std::cerr << "bench e2e: training " << label << " ...\n";
  auto r = actors::run_local_cluster(config);
  if (!r) throw std::runtime_error("bench e2e (" + label + "): " + r.err().to_string());
  std::cerr << "bench e2e: " << label << ": " << r->examples_per_s << " examples/s, held-out AUC "
            << r->heldout_auc << "\n";
  return std::move(*r);
}

struct torch_result {
  double examples_per_s = 0, auc = 0;
};

torch_result run_torch(const e2e_bench_options& o, const std::filesystem::path& data,
                       uint32_t threads) {
  const auto& m = o.base.model;
  std::string hidden;
  for (uint32_t h : m.hidden) hidden += (hidden.empty() ? "" : ",") + std::to_string(h);
  const uint32_t batch = o.base.workers.empty() ? 512 : o.base.workers[0].batch_size;
  const std::string cmd =
      shell_quote(o.python) + " " + shell_quote(o.torch_script.string()) + " --data " +
      shell_quote(data.string()) + " --rows " + std::to_string(o.train_rows) + " --heldout-rows " +
      std::to_string(o.heldout_rows) + " --batch " + std::to_string(batch) + " --threads " +
      std::to_string(threads) + " --dim " + std::to_string(m.embedding_dim) + " --hidden " + hidden;
  std::cerr << "bench e2e: training pytorch_cpu: " << cmd << "\n";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("bench e2e: cannot run " + o.python);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int rc = ::pclose(pipe);
  if (rc != 0)
    throw std::runtime_error("bench e2e: the PyTorch baseline failed (exit " + std::to_string(rc) +
                             "); is python3-torch installed? `make bench` installs it");
  torch_result t;
  std::smatch m1, m2;
  static const std::regex eps("\"examples_per_s\": *([0-9.eE+-]+)");
  static const std::regex auc("\"heldout_auc\": *([0-9.eE+-]+)");
  if (!std::regex_search(out, m1, eps) || !std::regex_search(out, m2, auc))
    throw std::runtime_error("bench e2e: unexpected PyTorch baseline output: " + out);
  t.examples_per_s = std::stod(m1[1]);
  t.auc = std::stod(m2[1]);
  std::cerr << "bench e2e: pytorch_cpu: " << t.examples_per_s << " examples/s, held-out AUC "
            << t.auc << "\n";
  return t;
}

}  // namespace

void run_e2e_bench(const e2e_bench_options& o, bench_report& report) {
  std::filesystem::create_directories(o.work_dir);
  const auto data = o.work_dir / "e2e.tsv";
  model::datagen_config gen;
  gen.output = data;
  gen.rows = o.train_rows + o.heldout_rows;
  gen.distinct_keys = o.distinct_keys;
  std::cerr << "bench e2e: generating " << gen.rows << " rows ...\n";
  auto planted = model::generate(gen);
  if (!planted) throw std::runtime_error("bench e2e: " + planted.err().to_string());

  // Each run starts from empty LMDB environments.
  std::filesystem::remove_all(o.work_dir / "tiered");
  std::filesystem::remove_all(o.work_dir / "all_dram");
  actors::cluster_config tiered = o.base;
  use_data(tiered, data, o, o.work_dir / "tiered");
  actors::cluster_config all_dram = o.base;
  use_data(all_dram, data, o, o.work_dir / "all_dram");
  // Every key fits in DRAM and in each cache: no eviction, no SSD reads.
  const uint64_t keys_per_shard = o.distinct_keys * 2 / std::max<size_t>(1, all_dram.shards.size());
  for (auto& s : all_dram.shards)
    s.dram.capacity_bytes =
        dram_tier::budget_for_rows(s.table.layout, s.dram.policy, keys_per_shard + 1024);
  for (auto& c : all_dram.caches) {
    c.geometry.slabs_per_set = 1;
    c.geometry.sets = static_cast<uint32_t>(o.distinct_keys * 2 / cache_geometry::slab_slots + 1);
  }

  const auto t = train("strata (tiers)", tiered);
  const auto d = train("strata (all in DRAM)", all_dram);
  // PyTorch gets the better of 1 thread and `threads`: on a small, shared
  // machine its intra-op threads can slow it down, and the baseline should
  // not be handicapped.
  auto torch = run_torch(o, data, 1);
  if (o.threads > 1) {
    auto more = run_torch(o, data, o.threads);
    if (more.examples_per_s > torch.examples_per_s) torch = more;
  }
  const auto rt = rates(t);
  const auto rd = rates(d);
  report.add(
      {"e2e_examples_per_s", t.examples_per_s, "examples/s", "pytorch_cpu", torch.examples_per_s});
  report.add(
      {"e2e_examples_per_s", t.examples_per_s, "examples/s", "strata_all_dram", d.examples_per_s});
  report.add({"e2e_heldout_auc", t.heldout_auc, "auc", "pytorch_cpu", torch.auc});
  report.add({"e2e_heldout_auc", t.heldout_auc, "auc", "planted_model", planted->auc});
  report.add({"e2e_cache_hit_rate", rt.cache, "fraction", "strata_all_dram", rd.cache});
  report.add({"e2e_dram_hit_rate", rt.dram, "fraction", "strata_all_dram", rd.dram});
  report.add({"e2e_ssd_hit_rate", rt.ssd, "fraction", "strata_all_dram", rd.ssd});
}

}  // namespace strata::bench
