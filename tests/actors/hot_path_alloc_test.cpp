// Allocations per trained batch on the hot path (issue 17: "no allocation
// or copy per batch"): a worker, its cache tier and two shards (DRAM small
// enough that rows cycle through LMDB) train a few hundred batches on CAF's
// deterministic scheduler, so every allocation of the run happens on this
// thread. The batch source and the gradient source are not part of the hot
// path (the reader and the model); their allocations are subtracted. What
// is left — worker routing, lookups, prefetches, pushes, cache fills, shard
// pulls and pushes, flushes and CAF's messages — is counted between batch
// `warmup` and the last one and divided by the batches trained between.
//
// The bound is the number this code reaches (CAF 0.17 allocates each
// message and its mailbox element, so 0 is out of reach through CAF); a
// change that adds allocations per batch fails here.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <memory>
#include <optional>
#include <vector>

#include "actors/cache_tier_actor.hpp"
#include "actors/dense_actor.hpp"
#include "actors/shard_actor.hpp"
#include "actors/worker_actor.hpp"
#include "bench/alloc_count.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using strata::testing::temp_dir;

// Allocations made inside the seams, to subtract (everything runs on this
// thread).
struct excluded {
  uint64_t allocations = 0;
};

// Pre-generated batches, handed out as copies (the copy is counted as
// excluded, like the reader's parsing would be).
class counted_batches final : public batch_source {
 public:
  counted_batches(std::shared_ptr<excluded> ex, uint64_t batches, uint32_t examples,
                  uint32_t features, uint64_t key_space)
      : ex_(std::move(ex)) {
    synthetic_batches gen(5, batches, examples, features, key_space);
    for (uint64_t i = 0; i < batches; ++i) batches_.push_back(*gen.next(examples));
  }
  expected<model::batch> next(size_t) override {
    const uint64_t before = alloc_count::thread_total();
    expected<model::batch> out = next_ < batches_.size() ? batches_[next_++] : model::batch{};
    ex_->allocations += alloc_count::thread_total() - before;
    return out;
  }
  uint64_t bad_lines() const override { return 0; }

 private:
  std::shared_ptr<excluded> ex_;
  std::vector<model::batch> batches_;
  size_t next_ = 0;
};

class counted_gradients final : public gradient_source {
 public:
  counted_gradients(std::shared_ptr<excluded> ex, uint32_t dim)
      : ex_(std::move(ex)), inner_(make_count_gradients(dim)) {}
  model::batch_result compute(const model::batch& batch, std::span<const float> rows,
                              std::span<const float> dense) override {
    const uint64_t before = alloc_count::thread_total();
    auto out = inner_->compute(batch, rows, dense);
    ex_->allocations += alloc_count::thread_total() - before;
    return out;
  }

 private:
  std::shared_ptr<excluded> ex_;
  std::unique_ptr<gradient_source> inner_;
};

struct setup {
  static constexpr uint32_t dim = 8;
  static constexpr uint32_t examples = 128;
  static constexpr uint32_t features = 26;
  static constexpr uint64_t key_space = 30000;
  static constexpr uint64_t warmup = 100;
  static constexpr uint64_t measured = 300;
};

// Trains `warmup` then `measured` batches; returns allocations per batch of
// the second run.
double allocations_per_batch(training_mode mode, const std::filesystem::path& dir) {
  using S = setup;
  deterministic_system ds;
  table_config table;
  table.name = "t";
  table.layout = row_layout{S::dim, optimizer_kind::adagrad, true};
  table.optimizer.kind = optimizer_kind::adagrad;
  table.optimizer.learning_rate = 0.05f;
  const uint32_t partitions = 64;
  std::vector<shard_actor> shards;
  for (uint32_t s = 0; s < 2; ++s) {
    shard_config sc;
    sc.index = s;
    sc.table = table;
    sc.dram.capacity_bytes = size_t{256} << 10;  // a few thousand rows: rows cycle through LMDB
    sc.lmdb.directory = dir / ("shard" + std::to_string(s));
    sc.lmdb.table = table.name;
    sc.lmdb.partitions = partitions;
    sc.lmdb.map_bytes = size_t{256} << 20;
    sc.flush_batch_rows = 512;
    sc.flush_on_own_thread = false;
    auto shard = spawn_shard(ds.system(), sc);
    EXPECT_TRUE(shard) << shard.err().to_string();
    if (!shard) return -1;
    shards.push_back(*shard);
  }
  cache_config cc;
  cc.table = table;
  cc.geometry.sets = 64;  // 2048 rows, a few batches of keys
  auto cache = spawn_cache_tier(ds.system(), cc, mode, shards, partition_map(partitions, 2));
  EXPECT_TRUE(cache) << cache.err().to_string();
  if (!cache) return -1;
  auto dense = spawn_dense(ds.system(), dense_config{}, std::vector<float>{});
  EXPECT_TRUE(dense) << dense.err().to_string();
  if (!dense) return -1;

  auto ex = std::make_shared<excluded>();
  worker_config wc;
  wc.batch_size = S::examples;
  wc.pull_dense_every = 0;
  worker_peers peers;
  peers.mode = mode;
  peers.caches = {*cache};
  peers.dense = *dense;
  auto worker = spawn_worker(
      ds.system(), wc, table.layout, peers,
      std::make_shared<counted_batches>(ex, S::warmup + S::measured, S::examples, S::features,
                                        S::key_space),
      std::make_shared<counted_gradients>(ex, S::dim));

  // Runs `batches` batches from a client that takes the progress reports.
  auto run = [&](uint64_t batches) {
    auto result = std::make_shared<std::optional<worker_result>>();
    ds.system().spawn([worker, batches, result](caf::event_based_actor* self) -> caf::behavior {
      self->request(worker, caf::infinite, run_atom::value, batches, uint64_t{0})
          .then([self, result](worker_result& r) {
            *result = r;
            self->quit();
          });
      return {[](progress_atom, const progress_report&) {}};
    });
    ds.run_until([&] { return result->has_value(); });
    EXPECT_TRUE(result->has_value());
    EXPECT_EQ(result->has_value() ? (*result)->batches : 0u, batches);
  };
  run(S::warmup);
  const uint64_t before = alloc_count::total();
  const uint64_t excluded_before = ex->allocations;
  run(S::measured);
  const uint64_t after = alloc_count::total();
  const uint64_t hot = (after - before) - (ex->allocations - excluded_before);

  // The path was really exercised: rows went to LMDB and came back.
  auto stats = ds.call<tier_stats>(shards[0], stats_atom::value);
  EXPECT_GT(stats.flushed_rows, 0u);
  EXPECT_GT(stats.chain_hits.size() > 2 ? stats.chain_hits[2] : 0u, 0u) << "no LMDB hits";
  for (auto& s : shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*cache, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*dense, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  ds.drain_jobs();
  return static_cast<double>(hot) / S::measured;
}

TEST(HotPathAllocations, AsyncWorkerCacheShardPerBatch) {
  temp_dir dir;
  const double per_batch = allocations_per_batch(training_mode::async, dir.path());
  std::cout << "allocations per batch (async, worker + cache + shards + CAF): " << per_batch
            << "\n";
  // 31,620 before the flat maps and reused buffers (~10 per key position);
  // 118 after (the messages of a batch with their vectors and response
  // handlers, the shards' replies, the flush batches).
  EXPECT_LE(per_batch, 130.0);
}

}  // namespace
}  // namespace strata::actors
