// Relocating workers and cache tiers while training goes on (issue 19,
// docs/multi-node.md "Draining a node"), deterministically on CAF's
// test_coordinator with real LMDB environments under eviction pressure: at
// a cut the leaving cache tiers write back and get successors, the leaving
// workers' successors resume their streams at their positions, and the
// other workers are told their new cache tiers. Checked by the exact-sum
// test (no example skipped or trained twice, no update lost), by a
// one-worker run whose rows equal those of a run that never relocated, bit
// for bit, and by a successor that cannot start (the move is abandoned and
// training goes on with the old actors). Plus the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "tests/actors/scaling_test_util.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::actors {
namespace {

using namespace scaling_test;
using strata::testing::temp_dir;

std::string text_of(deterministic_system& ds, const std::optional<caf::error>& err) {
  return err ? ds.system().render(*err) : std::string();
}

// Trains to the end; each relocation (workers, cache tiers) is asked for
// once `at[k]` batches are reported. Returns each relocation's error text
// ("" when it succeeded).
std::vector<std::string> train_and_relocate(
    deterministic_system& ds, training_cluster& cluster, const uint64_t& reported,
    const std::vector<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>>& moves,
    const std::vector<uint64_t>& at, training_summary& summary) {
  auto run = ds.ask<training_summary>(cluster.coordinator, run_atom::value);
  std::vector<std::string> out;
  for (size_t k = 0; k < moves.size(); ++k) {
    ds.run_until([&] { return run->done() || reported >= at[k]; });
    EXPECT_FALSE(run->done()) << "training ended before relocation " << k;
    auto moved =
        ds.ask<ok_atom>(cluster.coordinator, relocate_atom::value, moves[k].first, moves[k].second);
    ds.run_until([&] { return moved->done(); });
    EXPECT_TRUE(moved->done());
    out.push_back(text_of(ds, moved->error));
    EXPECT_FALSE(run->done()) << "relocation " << k << " answered only after training";
  }
  ds.run_until([&] { return run->done(); });
  EXPECT_FALSE(run->error) << text_of(ds, run->error);
  if (run->value) summary = *run->value;
  return out;
}

size_t count_mismatches(const std::map<uint64_t, std::vector<float>>& sums,
                        const std::map<uint64_t, std::vector<std::byte>>& rows) {
  size_t mismatches = 0;
  for (const auto& [key, want] : sums) {
    auto it = rows.find(key);
    if (it == rows.end()) {
      if (mismatches++ < 10) ADD_FAILURE() << "key " << key << " has no row";
      continue;
    }
    const float* w = weights_of(it->second.data());
    for (uint32_t e = 0; e < dim; ++e)
      if (w[e] != want[e] && mismatches++ < 10)
        ADD_FAILURE() << "key " << key << " element " << e << ": " << w[e] << " != " << want[e];
  }
  return mismatches;
}

class RelocateDuringExactSum : public ::testing::TestWithParam<training_mode> {};

// Worker 1 and cache tier 1 move, then worker 1 (its successor) again with
// cache tier 0: every key holds its exact sum, every batch was trained once.
TEST_P(RelocateDuringExactSum, WorkersAndCacheTiersMoveAndNothingIsLost) {
  constexpr uint32_t workers = 3;
  constexpr uint64_t batches = 40;
  temp_dir dir;
  const auto config = scaling_cluster(GetParam(), dir.path(), workers, 2, optimizer_kind::sgd);
  const auto sums = exact_sums(workers, batches);
  std::vector<uint64_t> keys;
  for (const auto& [key, sum] : sums) keys.push_back(key);
  auto bad_rows = std::make_shared<uint64_t>(0);
  deterministic_system ds;
  uint64_t reported = 0;
  auto cluster =
      spawn_training_cluster(ds.system(), config, seams_for(batches, bad_rows),
                             [&reported](const training_progress& p) { reported = p.batches; });
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  training_summary summary;
  const auto errors =
      train_and_relocate(ds, *cluster, reported, {{{1}, {1}}, {{1}, {0}}}, {20, 60}, summary);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(summary.batches, workers * batches) << "a batch was skipped or trained twice";
  EXPECT_EQ(*bad_rows, 0u) << "a lookup served a row that is not a partial sum";

  // Both cache tiers are successors now; the first ones have exited.
  auto status = ds.call<cluster_status>(cluster->coordinator, map_atom::value);
  ASSERT_EQ(status.caches.size(), 2u);
  for (uint32_t c = 0; c < 2; ++c) {
    EXPECT_NE(status.caches[c], caf::actor_cast<caf::actor>(cluster->caches[c]))
        << "cache tier " << c << " was not replaced";
    EXPECT_TRUE(caf::actor_cast<caf::actor>(cluster->caches[c])
                    ->getf(caf::abstract_actor::is_terminated_flag))
        << "the first cache tier " << c << " was not retired";
  }
  EXPECT_TRUE(caf::actor_cast<caf::actor>(cluster->workers[1])
                  ->getf(caf::abstract_actor::is_terminated_flag))
      << "the first worker 1 was not retired";

  EXPECT_EQ(count_mismatches(sums, read_rows(ds, *cluster, keys, config.table.layout)), 0u);
  cluster->stop();
  ds.drain_jobs();
}

INSTANTIATE_TEST_SUITE_P(Modes, RelocateDuringExactSum,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "async" : "pass";
                         });

class RelocateBitExact : public ::testing::TestWithParam<training_mode> {};

// One worker, max in-flight 1: a run whose worker and both cache tiers move
// twice must end with the very rows of a run that never moved (Adagrad:
// accumulators too).
TEST_P(RelocateBitExact, RowsEqualAReferenceRunThatNeverMoved) {
  constexpr uint64_t batches = 60;
  const auto sums = exact_sums(1, batches);
  std::vector<uint64_t> keys;
  for (const auto& [key, sum] : sums) keys.push_back(key);
  auto run_once = [&](bool relocate) {
    return one_worker_rows(
        GetParam(), batches, keys,
        [&](deterministic_system& ds, training_cluster& cluster, const uint64_t& reported,
            training_summary& summary) {
          std::vector<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> moves;
          if (relocate) moves = {{{0}, {0, 1}}, {{0}, {1}}};
          for (const auto& e : train_and_relocate(ds, cluster, reported, moves, {15, 35}, summary))
            EXPECT_EQ(e, "");
        });
  };
  const auto reference = run_once(false);
  const auto moved = run_once(true);
  ASSERT_EQ(reference.size(), sums.size());
  ASSERT_EQ(moved.size(), reference.size());
  // Weights and optimizer state, bit for bit. (A row's version counts the
  // writes it took: a relocated cache tier's write-back is one more.)
  size_t differ = 0;
  for (const auto& [key, record] : reference) {
    const auto* ref = reinterpret_cast<const std::byte*>(weights_of(record.data()));
    const auto& other = moved.at(key);
    const size_t skip = static_cast<size_t>(ref - record.data());
    if (!std::equal(record.begin() + skip, record.end(), other.begin() + skip) && differ++ < 10)
      ADD_FAILURE() << "key " << key
                    << ": its weights or optimizer state differ from the run "
                       "that never moved";
  }
  EXPECT_EQ(differ, 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, RelocateBitExact,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "async" : "pass";
                         });

// A worker's successor that cannot open its stream (injected: the source
// fails for a stream resumed past its start) abandons the move before the
// swap: the request gets the error naming the worker and its position,
// cache tier 1 is still the first one (its successor, spawned before the
// worker's, was not swapped in), the old actors keep training, and every
// key still holds its exact sum.
TEST(RelocateFailure, ASuccessorThatCannotStartAbandonsTheMove) {
  constexpr uint32_t workers = 2;
  constexpr uint64_t batches = 30;
  temp_dir dir;
  const auto config =
      scaling_cluster(training_mode::async, dir.path(), workers, 2, optimizer_kind::sgd);
  const auto sums = exact_sums(workers, batches);
  std::vector<uint64_t> keys;
  for (const auto& [key, sum] : sums) keys.push_back(key);
  auto bad_rows = std::make_shared<uint64_t>(0);
  auto seams = seams_for(batches, bad_rows);
  auto opened = seams.batches;
  seams.batches = [opened](const worker_config& wc) -> expected<std::shared_ptr<batch_source>> {
    if (wc.skip_batches > 0)
      return error(errc::io_error, "data/part-" + std::to_string(wc.index) + ": injected");
    return opened(wc);
  };
  deterministic_system ds;
  uint64_t reported = 0;
  auto cluster =
      spawn_training_cluster(ds.system(), config, seams,
                             [&reported](const training_progress& p) { reported = p.batches; });
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  training_summary summary;
  const auto errors = train_and_relocate(ds, *cluster, reported, {{{1}, {1}}}, {12}, summary);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("cannot relocate workers [1] and cache tiers [1] of cluster "
                           "'scaling': spawning the successor of worker 1 (at batch "),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find("data/part-1: injected"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("the move is abandoned; training goes on where it was"),
            std::string::npos)
      << errors[0];
  EXPECT_EQ(summary.batches, workers * batches);
  EXPECT_EQ(*bad_rows, 0u);
  auto status = ds.call<cluster_status>(cluster->coordinator, map_atom::value);
  ASSERT_EQ(status.caches.size(), 2u);
  EXPECT_EQ(status.caches[1], caf::actor_cast<caf::actor>(cluster->caches[1]))
      << "the abandoned move replaced cache tier 1";
  EXPECT_EQ(count_mismatches(sums, read_rows(ds, *cluster, keys, config.table.layout)), 0u);
  cluster->stop();
  ds.drain_jobs();
}

TEST(RelocateRefusals, AreNamed) {
  temp_dir dir;
  const auto config = scaling_cluster(training_mode::async, dir.path(), 2, 2, optimizer_kind::sgd);
  auto bad_rows = std::make_shared<uint64_t>(0);
  deterministic_system ds;
  auto cluster = spawn_training_cluster(ds.system(), config, seams_for(20, bad_rows));
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  auto ask = [&](std::vector<uint32_t> w, std::vector<uint32_t> c) {
    auto moved = ds.ask<ok_atom>(cluster->coordinator, relocate_atom::value, w, c);
    ds.run_until([&] { return moved->done(); });
    return text_of(ds, moved->error);
  };
  EXPECT_NE(ask({1}, {}).find("cannot relocate workers [1] and cache tiers [] of cluster "
                              "'scaling': training is not running"),
            std::string::npos);
  auto run = ds.ask<training_summary>(cluster->coordinator, run_atom::value);
  EXPECT_NE(ask({2}, {}).find("no worker 2 (the cluster has 2)"), std::string::npos);
  EXPECT_NE(ask({}, {1, 1}).find("cache tier 1 named twice"), std::string::npos);
  // One at a time: the first waits for a cut, the second is refused.
  auto first = ds.ask<ok_atom>(cluster->coordinator, relocate_atom::value, std::vector<uint32_t>{0},
                               std::vector<uint32_t>{});
  EXPECT_NE(ask({1}, {}).find("another relocation is waiting for the next cut"), std::string::npos);
  ds.run_until([&] { return first->done(); });
  EXPECT_FALSE(first->error) << text_of(ds, first->error);
  // While a scale copies partitions, no relocation starts.
  auto scaled = ds.ask<scale_result>(cluster->coordinator, scale_atom::value, uint32_t{3});
  EXPECT_NE(ask({1}, {}).find("a scale to 3 shards is in progress"), std::string::npos);
  ds.run_until([&] { return run->done(); });
  EXPECT_TRUE(scaled->done());
  EXPECT_FALSE(run->error) << text_of(ds, run->error);
  EXPECT_NE(ask({1}, {}).find("training is not running"), std::string::npos);
  cluster->stop();
  ds.drain_jobs();
}

// Async rounds that run to the end of the data have no cut to move at:
// refused at once instead of waiting for the end.
TEST(RelocateRefusals, NoCutComesWhenAsyncRoundsRunToTheEnd) {
  temp_dir dir;
  auto config = scaling_cluster(training_mode::async, dir.path(), 2, 2, optimizer_kind::sgd);
  config.checkpoint.round_batches = 0;
  auto bad_rows = std::make_shared<uint64_t>(0);
  deterministic_system ds;
  auto cluster = spawn_training_cluster(ds.system(), config, seams_for(20, bad_rows));
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  auto run = ds.ask<training_summary>(cluster->coordinator, run_atom::value);
  auto moved = ds.ask<ok_atom>(cluster->coordinator, relocate_atom::value, std::vector<uint32_t>{1},
                               std::vector<uint32_t>{});
  ds.run_until([&] { return moved->done(); });
  EXPECT_NE(text_of(ds, moved->error)
                .find("async rounds run to the end of the data (checkpoint.round_batches: 0)"),
            std::string::npos)
      << text_of(ds, moved->error);
  ds.run_until([&] { return run->done(); });
  EXPECT_FALSE(run->error) << text_of(ds, run->error);
  cluster->stop();
  ds.drain_jobs();
}

}  // namespace
}  // namespace strata::actors
