// Scaling shards at runtime (docs/scaling.md), deterministically on CAF's
// test_coordinator with real LMDB environments under eviction pressure:
// the exact-sum test scaled 2 -> 4 -> 3 shards while it trains (every key
// holds its exact sum, the key count is unchanged, the retired shard's
// files are gone), and a one-worker run scaled the same way whose rows
// (weights and optimizer state) equal those of a run without scaling, bit
// for bit. Plus the minimal-move rebalance and refused scale targets.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "actors/local_cluster.hpp"
#include "actors/partition_map.hpp"
#include "model/datagen.hpp"
#include "tests/actors/scaling_test_util.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {
namespace {

using strata::testing::temp_dir;

// --- the rebalance -------------------------------------------------------------------

TEST(PartitionMap, RebalanceMovesOnlyWhatItMust) {
  const partition_map two(64, 2);
  const auto four = two.rebalanced(4);
  EXPECT_EQ(four.epoch(), two.epoch() + 1);
  std::vector<uint32_t> held(4, 0);
  uint32_t moved = 0;
  for (uint32_t p = 0; p < 64; ++p) {
    ++held[four.owner(p)];
    if (four.owner(p) != two.owner(p)) {
      ++moved;
      EXPECT_GE(four.owner(p), 2u) << "partition " << p << " moved between old shards";
    }
  }
  EXPECT_EQ(held, (std::vector<uint32_t>{16, 16, 16, 16}));
  EXPECT_EQ(moved, 32u);  // each old shard gives away exactly its surplus

  const auto three = four.rebalanced(3);
  std::vector<uint32_t> held3(3, 0);
  moved = 0;
  for (uint32_t p = 0; p < 64; ++p) {
    ASSERT_LT(three.owner(p), 3u);
    ++held3[three.owner(p)];
    if (three.owner(p) != four.owner(p)) {
      ++moved;
      EXPECT_EQ(four.owner(p), 3u) << "partition " << p << " of a kept shard moved";
    }
  }
  EXPECT_EQ(held3, (std::vector<uint32_t>{22, 21, 21}));
  EXPECT_EQ(moved, 16u);  // only the retired shard's partitions
}

// --- the clusters: tests/actors/scaling_test_util.hpp --------------------------------

using namespace scaling_test;

// Runs the cluster to the end; scales to each of `targets` in turn, the
// first once `first_at` batches are reported, each next once the previous
// committed and `gap` more batches went by. Returns the scale results.
std::vector<scale_result> train_and_scale(deterministic_system& ds, training_cluster& cluster,
                                          const uint64_t& reported,
                                          const std::vector<uint32_t>& targets, uint64_t first_at,
                                          uint64_t gap, training_summary& summary) {
  auto run = ds.ask<training_summary>(cluster.coordinator, run_atom::value);
  std::vector<scale_result> results;
  uint64_t next_at = first_at;
  for (uint32_t target : targets) {
    ds.run_until([&] { return run->done() || reported >= next_at; });
    EXPECT_FALSE(run->done()) << "training ended before the scale to " << target;
    auto scaled = ds.ask<scale_result>(cluster.coordinator, scale_atom::value, target);
    ds.run_until([&] { return scaled->done(); });
    EXPECT_FALSE(scaled->error) << (scaled->error ? ds.system().render(*scaled->error) : "");
    EXPECT_FALSE(run->done()) << "the scale to " << target << " committed only after training";
    if (scaled->value) results.push_back(*scaled->value);
    next_at = reported + gap;
  }
  ds.run_until([&] { return run->done(); });
  EXPECT_FALSE(run->error) << (run->error ? ds.system().render(*run->error) : "");
  if (run->value) summary = *run->value;
  return results;
}

class ScaleDuringExactSum : public ::testing::TestWithParam<training_mode> {};

TEST_P(ScaleDuringExactSum, TwoToFourToThreeShardsLoseNothing) {
  constexpr uint32_t workers = 3;
  constexpr uint64_t batches = 40;
  temp_dir dir;
  const auto config = scaling_cluster(GetParam(), dir.path(), workers, 2, optimizer_kind::sgd);
  const auto sums = exact_sums(workers, batches);
  auto bad_rows = std::make_shared<uint64_t>(0);
  std::vector<uint64_t> keys;
  for (const auto& [key, sum] : sums) keys.push_back(key);
  {
    deterministic_system ds;
    uint64_t reported = 0;
    auto cluster =
        spawn_training_cluster(ds.system(), config, seams_for(batches, bad_rows),
                               [&reported](const training_progress& p) { reported = p.batches; });
    ASSERT_TRUE(cluster) << cluster.err().to_string();
    training_summary summary;
    auto results = train_and_scale(ds, *cluster, reported, {4, 3}, 20, 25, summary);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(summary.batches, workers * batches);
    EXPECT_EQ(*bad_rows, 0u) << "a lookup served a row that is not a partial sum";
    EXPECT_EQ(results[0].shards, 4u);
    EXPECT_EQ(results[0].moved_partitions, 32u);
    EXPECT_EQ(results[1].shards, 3u);
    EXPECT_EQ(results[1].moved_partitions, 16u);
    EXPECT_EQ(results[1].epoch, 3u);
    // Rows really moved, during training (copied) and at the fence (delta).
    for (const auto& r : results) {
      EXPECT_GT(r.copied_rows, 0u);
      EXPECT_GT(r.delta_rows, 0u);
    }

    auto status = ds.call<cluster_status>(cluster->coordinator, map_atom::value);
    EXPECT_EQ(status.routing.shards.size(), 3u);
    EXPECT_EQ(status.routing.epoch, 3u);

    const auto rows = read_rows(ds, *cluster, keys, config.table.layout);
    size_t mismatches = 0;
    for (const auto& [key, want] : sums) {
      auto it = rows.find(key);
      ASSERT_NE(it, rows.end()) << "key " << key;
      const float* w = weights_of(it->second.data());
      for (uint32_t e = 0; e < dim; ++e)
        if (w[e] != want[e] && mismatches++ < 10)
          ADD_FAILURE() << "key " << key << " element " << e << ": " << w[e] << " != " << want[e];
    }
    EXPECT_EQ(mismatches, 0u);
    cluster->stop();
    ds.drain_jobs();
  }
  // After the graceful stop the three shards' LMDB environments hold each
  // key exactly once (moved partitions were removed from their old
  // owners), and the retired shard's directory is gone.
  EXPECT_EQ(lmdb_rows(config, 3), sums.size());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "shard3"));
}

INSTANTIATE_TEST_SUITE_P(Modes, ScaleDuringExactSum,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "async" : "pass";
                         });

class ScaleBitExact : public ::testing::TestWithParam<training_mode> {};

// One worker, max in-flight 1: the order of updates is deterministic, so a
// run scaled 2 -> 4 -> 3 must end with the very rows of a run that never
// scaled (Adagrad: accumulators and versions too).
TEST_P(ScaleBitExact, RowsEqualAReferenceRunWithoutScaling) {
  constexpr uint64_t batches = 60;
  const auto sums = exact_sums(1, batches);
  std::vector<uint64_t> keys;
  for (const auto& [key, sum] : sums) keys.push_back(key);
  auto run_once = [&](bool scale) {
    return one_worker_rows(GetParam(), batches, keys,
                           [&](deterministic_system& ds, training_cluster& cluster,
                               const uint64_t& reported, training_summary& summary) {
                             auto results = train_and_scale(
                                 ds, cluster, reported,
                                 scale ? std::vector<uint32_t>{4, 3} : std::vector<uint32_t>{}, 15,
                                 20, summary);
                             EXPECT_EQ(results.size(), scale ? 2u : 0u);
                           });
  };
  const auto reference = run_once(false);
  const auto scaled = run_once(true);
  const row_layout layout{dim, optimizer_kind::adagrad, true};
  ASSERT_EQ(reference.size(), keys.size());
  ASSERT_EQ(scaled.size(), keys.size());
  size_t differ = 0;
  for (uint64_t key : keys)
    if (!same_row(layout, reference.at(key).data(), scaled.at(key).data()) && differ++ < 5)
      ADD_FAILURE() << "key " << key << " differs from the reference run";
  EXPECT_EQ(differ, 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, ScaleBitExact,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "async" : "pass";
                         });

// Real training (the CTR model on planted data, threaded scheduler, LMDB
// shards): scales 2 -> 4 -> 1 from a third of the way in leave the
// held-out AUC within 0.01 of a run that never scaled (and the evaluation
// reads the rows from the shards of the current map).
TEST(ScaleDuringTraining, HeldOutAucStaysWithinAHundredthOfNoScaling) {
  temp_dir dir;
  constexpr uint64_t rows = 200000, heldout_rows = 20000;
  model::datagen_config gen;
  gen.output = dir.path() / "planted.tsv";
  gen.rows = rows + heldout_rows;
  gen.distinct_keys = 1300;
  gen.weight_stddev = 1.5;
  gen.seed = 11;
  auto planted = model::generate(gen);
  ASSERT_TRUE(planted) << planted.err().to_string();
  auto run = [&](const std::string& name, bool scale) {
    model::reader_config train;
    train.path = gen.output;
    train.limit = rows;
    auto config = model_cluster(training_mode::async, dir.path() / name, train, 2);
    for (auto& w : config.workers) w.data.limit = rows / 2;
    config.heldout.path = gen.output;
    config.heldout.skip = rows;
    config.heldout_examples = heldout_rows;
    config.checkpoint.round_batches = 16;
    // The scale is asked for from the progress sink (the coordinator's
    // thread) once a third of the batches are in; a helper actor waits.
    caf::actor_system* system = nullptr;
    coordinator_actor coordinator;
    std::atomic<bool> asked{false};
    auto result = std::make_shared<std::optional<scale_result>>();
    auto failure = std::make_shared<std::string>();
    auto done = std::make_shared<std::atomic<bool>>(false);
    cluster_hooks hooks;
    hooks.started = [&](caf::actor_system& sys, const training_cluster& cluster) {
      system = &sys;
      coordinator = cluster.coordinator;
    };
    // Every report reaches the sink: a run of under a second (the default
    // interval) would otherwise never ask for the scale.
    hooks.progress_interval_s = 0;
    const uint64_t third = rows / 256 / 3;
    auto report = run_local_cluster(
        config,
        [&](const training_progress& p) {
          if (!scale || p.batches < third || asked.exchange(true)) return;
          auto c = coordinator;
          // 2 -> 4, then 4 -> 1: the first two shards retire too.
          system->spawn([c, result, failure, done](caf::event_based_actor* self) {
            auto on_error = [self, failure, done](caf::error& e) {
              *failure = self->system().render(e);
              *done = true;
            };
            self->request(c, caf::infinite, scale_atom::value, 4u)
                .then(
                    [self, c, result, done, on_error](scale_result& up) {
                      *result = up;
                      self->request(c, caf::infinite, scale_atom::value, 1u)
                          .then(
                              [result, done](scale_result& down) {
                                (*result)->delta_rows += down.delta_rows;
                                (*result)->copied_rows += down.copied_rows;
                                (*result)->shards = down.shards;
                                *done = true;
                              },
                              on_error);
                    },
                    on_error);
          });
        },
        hooks);
    EXPECT_TRUE(report) << report.err().to_string();
    if (scale) {
      EXPECT_TRUE(*done) << "the scale never answered";
      EXPECT_TRUE(failure->empty()) << *failure;
      EXPECT_TRUE(result->has_value());
      if (result->has_value()) {
        EXPECT_EQ((*result)->shards, 1u);
        EXPECT_GT((*result)->copied_rows + (*result)->delta_rows, 0u);
      }
    }
    return report ? report->heldout_auc : 0.0;
  };
  const double reference = run("reference", false);
  const double scaled = run("scaled", true);
  std::printf(
      "[ scaling ] held-out auc: %.4f without scaling, %.4f with 2 -> 4 -> 1; planted %.4f\n",
      reference, scaled, planted->auc);
  EXPECT_GT(reference, 0.6);  // it learned something
  EXPECT_NEAR(scaled, reference, 0.01);
}

TEST(Scale, ImpossibleTargetsAreRefusedWithTheReason) {
  temp_dir dir;
  const auto config = scaling_cluster(training_mode::async, dir.path(), 1, 1, optimizer_kind::sgd);
  deterministic_system ds;
  auto cluster =
      spawn_training_cluster(ds.system(), config, seams_for(4, std::make_shared<uint64_t>(0)));
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  for (uint32_t target : {0u, 65u}) {
    auto a = ds.ask<scale_result>(cluster->coordinator, scale_atom::value, target);
    ds.run_until([&] { return a->done(); });
    ASSERT_TRUE(a->error) << "scale to " << target << " accepted";
    const std::string text = ds.system().render(*a->error);
    EXPECT_NE(text.find("cannot scale cluster 'scaling' to " + std::to_string(target)),
              std::string::npos)
        << text;
  }
  // The same count is a no-op at the current epoch.
  auto same = ds.call<scale_result>(cluster->coordinator, scale_atom::value, 2u);
  EXPECT_EQ(same.epoch, 1u);
  EXPECT_EQ(same.moved_partitions, 0u);
  // Idle cluster: the scale commits at once.
  auto up = ds.call<scale_result>(cluster->coordinator, scale_atom::value, 3u);
  EXPECT_EQ(up.epoch, 2u);
  EXPECT_EQ(up.shards, 3u);
  cluster->stop();
  ds.drain_jobs();
}

// Issue 15 item 12: a scale whose partition copy fails (before its fence)
// is abandoned: the request gets the error, the old map stays (at a new
// epoch that makes every shard forget the migration), the new shard exits
// and its files go, and training goes on to exact sums; a later scale
// works. The failure is injected by giving shard 0 a migration of its own
// first, so the coordinator's order to it is refused.
TEST(Scale, AScaleWhoseCopyFailsIsAbandonedAndTrainingGoesOn) {
  constexpr uint32_t workers = 2;
  constexpr uint64_t batches = 30;
  temp_dir dir;
  const auto config =
      scaling_cluster(training_mode::async, dir.path(), workers, 2, optimizer_kind::sgd);
  deterministic_system ds;
  auto bad_rows = std::make_shared<uint64_t>(0);
  uint64_t reported = 0;
  auto cluster =
      spawn_training_cluster(ds.system(), config, seams_for(batches, bad_rows),
                             [&reported](const training_progress& p) { reported = p.batches; });
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  auto run = ds.ask<training_summary>(cluster->coordinator, run_atom::value);
  ds.run_until([&] { return run->done() || reported >= 10; });
  ASSERT_FALSE(run->done());
  migration_order own;
  own.epoch = 99;
  auto busy = ds.ask<migration_stats>(cluster->shards[0], migrate_atom::value, own);
  ds.run_until([&] { return busy->done(); });
  ASSERT_TRUE(busy->value);
  auto scaled = ds.ask<scale_result>(cluster->coordinator, scale_atom::value, 3u);
  ds.run_until([&] { return scaled->done(); });
  ASSERT_TRUE(scaled->error) << "the scale committed";
  const std::string text = ds.system().render(*scaled->error);
  EXPECT_NE(text.find("abandoned"), std::string::npos) << text;
  EXPECT_NE(text.find("a migration is already in progress"), std::string::npos) << text;
  auto status = ds.call<cluster_status>(cluster->coordinator, map_atom::value);
  EXPECT_EQ(status.routing.shards.size(), 2u);
  EXPECT_EQ(status.routing.epoch, 2u);
  EXPECT_EQ(status.scaling_to, 0u);
  // A later scale works (shard 0 forgot its migration at the new epoch).
  auto again = ds.ask<scale_result>(cluster->coordinator, scale_atom::value, 3u);
  ds.run_until([&] { return again->done(); });
  EXPECT_FALSE(again->error) << (again->error ? ds.system().render(*again->error) : "");
  ds.run_until([&] { return run->done(); });
  ASSERT_FALSE(run->error) << ds.system().render(*run->error);
  const auto want = exact_sums(workers, batches);
  std::vector<uint64_t> keys;
  for (const auto& [k, v] : want) keys.push_back(k);
  const auto rows = read_rows(ds, *cluster, keys, config.table.layout);
  for (const auto& [k, v] : want) {
    auto it = rows.find(k);
    ASSERT_NE(it, rows.end()) << "key " << k;
    const float* w = weights_of(it->second.data());
    for (uint32_t e = 0; e < dim; ++e) ASSERT_EQ(w[e], v[e]) << "key " << k << " element " << e;
  }
  EXPECT_EQ(*bad_rows, 0u);
  cluster->stop();
  ds.drain_jobs();
}

// Issue 19: the copy rate limit (shards.migration_rows_per_s). A scale
// whose two sources may each copy 200 rows/s takes at least
// copied_rows / 400 seconds of the actor clock (simulated: the test scheduler's clock only
// moves when a timer is triggered, so this counts the pacing's waits, not
// wall time), training goes on meanwhile, and every key still holds its
// exact sum.
TEST(Scale, ACopyRateLimitPacesTheCopyAndLosesNothing) {
  constexpr uint32_t workers = 2;
  constexpr uint64_t batches = 60;
  constexpr uint64_t limit = 200;
  temp_dir dir;
  auto config = scaling_cluster(training_mode::async, dir.path(), workers, 2, optimizer_kind::sgd);
  for (auto& s : config.shards) {
    s.migration_rows_per_s = limit;
    s.dram.capacity_bytes = 4 << 10;  // most rows in LMDB: the copy phase moves them
  }
  deterministic_system ds;
  auto bad_rows = std::make_shared<uint64_t>(0);
  uint64_t reported = 0;
  auto cluster =
      spawn_training_cluster(ds.system(), config, seams_for(batches, bad_rows),
                             [&reported](const training_progress& p) { reported = p.batches; });
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  auto run = ds.ask<training_summary>(cluster->coordinator, run_atom::value);
  ds.run_until([&] { return run->done() || reported >= 40; });
  ASSERT_FALSE(run->done());
  const auto start = ds.system().clock().now();
  const uint64_t batches_before = reported;
  auto scaled = ds.ask<scale_result>(cluster->coordinator, scale_atom::value, 3u);
  ds.run_until([&] { return scaled->done(); });
  ASSERT_TRUE(scaled->value) << (scaled->error ? ds.system().render(*scaled->error) : "");
  const double simulated =
      std::chrono::duration<double>(ds.system().clock().now() - start).count();
  const uint64_t copied = scaled->value->copied_rows;
  ASSERT_GT(copied, 20u) << "too few rows moved to see the pacing";
  // The limit is per source shard; 2 -> 3 takes partitions from both, so
  // the larger share (at least half the rows) sets the floor.
  EXPECT_GE(simulated, static_cast<double>(copied) / (2 * limit))
      << copied << " rows copied by 2 sources at a limit of " << limit << " rows/s each";
  EXPECT_GT(reported, batches_before) << "training stood still during the paced copy";
  ds.run_until([&] { return run->done(); });
  ASSERT_FALSE(run->error) << ds.system().render(*run->error);
  const auto want = exact_sums(workers, batches);
  std::vector<uint64_t> keys;
  for (const auto& [k, v] : want) keys.push_back(k);
  const auto rows = read_rows(ds, *cluster, keys, config.table.layout);
  for (const auto& [k, v] : want) {
    auto it = rows.find(k);
    ASSERT_NE(it, rows.end()) << "key " << k;
    const float* w = weights_of(it->second.data());
    for (uint32_t e = 0; e < dim; ++e) ASSERT_EQ(w[e], v[e]) << "key " << k << " element " << e;
  }
  EXPECT_EQ(*bad_rows, 0u);
  cluster->stop();
  ds.drain_jobs();
}

}  // namespace
}  // namespace strata::actors
