// Training actors: the dense actor's Adam step, the exact-sum test through
// workers, cache tiers and shards under eviction pressure in both modes
// (deterministic, on CAF's test_coordinator), and end-to-end training with
// run_local_cluster on the sample file and on datagen data.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "actors/coordinator_actor.hpp"
#include "actors/dense_actor.hpp"
#include "actors/local_cluster.hpp"
#include "actors/training_protocol.hpp"
#include "model/datagen.hpp"
#include "model/reader.hpp"
#include "tests/actors/training_test_util.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {
namespace {

using strata::testing::temp_dir;

// --- (2) the dense actor's Adam step -------------------------------------------------

TEST(DenseActor, AdamStepsMatchHandComputation) {
  deterministic_system ds;
  dense_config cfg;
  cfg.learning_rate = 0.1f;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.999f;
  cfg.epsilon = 1e-8f;
  const std::vector<float> w0{1.0f, -2.0f, 0.5f};
  auto dense = *spawn_dense(ds.system(), cfg, w0);

  const std::vector<float> g1{0.5f, -1.0f, 2.0f};
  const std::vector<float> g2{1.0f, 1.0f, -0.25f};
  EXPECT_EQ(ds.call<uint64_t>(dense, push_dense_atom::value, g1), 1u);
  // Step 1: m = 0.1 g, v = 0.001 g^2, bias-corrected m_hat = g, v_hat = g^2,
  // so each weight moves by lr * g / (|g| + eps) = lr * sign(g).
  auto after1 = ds.call<dense_weights>(dense, pull_dense_atom::value);
  EXPECT_EQ(after1.step, 1u);
  ASSERT_EQ(after1.weights.size(), 3u);
  EXPECT_NEAR(after1.weights[0], 0.9f, 1e-6);
  EXPECT_NEAR(after1.weights[1], -1.9f, 1e-6);
  EXPECT_NEAR(after1.weights[2], 0.4f, 1e-6);

  EXPECT_EQ(ds.call<uint64_t>(dense, push_dense_atom::value, g2), 2u);
  // Step 2 by hand, in double: m2 = 0.9 m1 + 0.1 g2, v2 = 0.999 v1 + 0.001 g2^2,
  // m_hat = m2 / (1 - 0.81), v_hat = v2 / (1 - 0.998001).
  auto after2 = ds.call<dense_weights>(dense, pull_dense_atom::value);
  EXPECT_EQ(after2.step, 2u);
  for (size_t i = 0; i < 3; ++i) {
    const double m1 = 0.1 * g1[i], v1 = 0.001 * g1[i] * g1[i];
    const double m2 = 0.9 * m1 + 0.1 * g2[i], v2 = 0.999 * v1 + 0.001 * g2[i] * g2[i];
    const double m_hat = m2 / (1 - 0.81), v_hat = v2 / (1 - 0.998001);
    const double expected = after1.weights[i] - 0.1 * m_hat / (std::sqrt(v_hat) + 1e-8);
    EXPECT_NEAR(after2.weights[i], expected, 1e-5) << "weight " << i;
  }
  // Worked out for weight 0: m2 = 0.145, v2 = 0.00124975, m_hat = 0.763158,
  // v_hat = 0.625250, w = 0.9 - 0.1 * 0.763158 / 0.790728 = 0.803487.
  EXPECT_NEAR(after2.weights[0], 0.803487f, 1e-5);

  // A push of the wrong size is an error and changes nothing.
  auto bad = ds.ask<uint64_t>(dense, push_dense_atom::value, std::vector<float>{1.0f});
  ds.run_until([&] { return bad->done(); });
  EXPECT_TRUE(bad->error);
  EXPECT_EQ(ds.call<dense_weights>(dense, pull_dense_atom::value).step, 2u);
  caf::anon_send_exit(dense, caf::exit_reason::user_shutdown);
  ds.drain_jobs();
}

// --- (1) the exact-sum test --------------------------------------------------------

struct exact_sum_setup {
  static constexpr uint32_t dim = 4;
  static constexpr uint32_t workers = 3;
  static constexpr uint64_t batches = 40;
  static constexpr uint32_t examples = 6;
  static constexpr uint32_t features = 5;
  static constexpr uint64_t key_space = 1500;
};

cluster_config exact_sum_cluster(training_mode mode, const std::filesystem::path& dir) {
  using S = exact_sum_setup;
  cluster_config c;
  c.name = "exact-sum";
  c.mode = mode;
  c.partitions = 64;
  c.pass_batches = 3;
  c.table.name = "exact";
  c.table.layout = row_layout{S::dim, optimizer_kind::sgd, true};
  c.table.optimizer.kind = optimizer_kind::sgd;
  c.table.optimizer.learning_rate = 1.0f;
  c.table.initializer.kind = initializer_kind::zeros;
  shard_config shard;
  shard.dram.capacity_bytes = 20 << 10;  // a few hundred rows: most rows cycle through LMDB
  shard.lmdb.map_bytes = size_t{64} << 20;
  shard.flush_batch_rows = 16;
  shard.max_flushes_in_flight = 2;
  shard.flush_on_own_thread = false;  // deterministic on the test_coordinator
  add_shards(c, 2, dir, shard);
  cache_config cache;
  cache.geometry.sets = 2;  // 64 rows per cache tier
  cache.staleness = 4;
  add_caches(c, 2, cache);
  for (uint32_t w = 0; w < S::workers; ++w) {
    worker_config wc;
    wc.index = w;
    wc.batch_size = S::examples;
    wc.prefetch_depth = 2;
    wc.max_in_flight = 2;
    c.workers.push_back(wc);
  }
  return c;
}

// Replays every worker's batches: key -> exact weights.
std::map<uint64_t, std::vector<float>> exact_sums() {
  using S = exact_sum_setup;
  std::map<uint64_t, std::vector<float>> sums;
  for (uint32_t w = 0; w < S::workers; ++w) {
    synthetic_batches source(w, S::batches, S::examples, S::features, S::key_space);
    for (auto b = source.next(0); !b->examples.empty(); b = source.next(0))
      for (const auto& ex : b->examples)
        for (const auto& f : ex.features) {
          auto& row = sums[f.key];
          row.resize(S::dim, 0.0f);
          for (uint32_t e = 0; e < S::dim; ++e) row[e] += increment(f.key, e, f.slot);
        }
  }
  return sums;
}

class ExactSum : public ::testing::TestWithParam<training_mode> {};

TEST_P(ExactSum, EveryKeyHoldsTheExactSumUnderEvictionPressure) {
  using S = exact_sum_setup;
  temp_dir dir;
  const auto config = exact_sum_cluster(GetParam(), dir.path());
  const auto sums = exact_sums();
  auto bad_rows = std::make_shared<uint64_t>(0);
  worker_seams seams;
  seams.batches = [](const worker_config& wc) -> expected<std::shared_ptr<batch_source>> {
    return std::shared_ptr<batch_source>(std::make_shared<synthetic_batches>(
        wc.index, S::batches, S::examples, S::features, S::key_space));
  };
  seams.gradients = [bad_rows](const worker_config&) -> std::shared_ptr<gradient_source> {
    return std::make_shared<increment_gradients>(S::dim, bad_rows);
  };
  seams.initial_dense = std::vector<float>{};

  {
    deterministic_system ds;
    uint64_t reported_batches = 0;
    auto cluster = spawn_training_cluster(
        ds.system(), config, seams,
        [&reported_batches](const training_progress& p) { reported_batches = p.batches; });
    ASSERT_TRUE(cluster) << cluster.err().to_string();
    auto summary = ds.call<training_summary>(cluster->coordinator, run_atom::value);
    EXPECT_EQ(summary.batches, S::workers * S::batches);
    EXPECT_EQ(summary.examples, S::workers * S::batches * S::examples);
    EXPECT_EQ(reported_batches, S::workers * S::batches);
    if (GetParam() == training_mode::pass) {
      // ceil(40 / 3) passes carry batches; the data's end is seen in the next.
      EXPECT_GE(summary.passes, (S::batches + 2) / 3);
    }
    EXPECT_EQ(*bad_rows, 0u) << "a lookup served a row that is not a partial sum";

    // Eviction pressure was real: rows went down to LMDB and came back.
    uint64_t flushed = 0, cache_evictions = 0;
    for (auto& shard : cluster->shards)
      flushed += ds.call<tier_stats>(shard, stats_atom::value).flushed_rows;
    for (auto& cache : cluster->caches)
      cache_evictions += ds.call<tier_stats>(cache, stats_atom::value).evictions;
    EXPECT_GT(flushed, sums.size() / 2);
    // Dirty evictions from the caches exist in pass mode only (async
    // caches hold clean copies).
    if (GetParam() == training_mode::pass) {
      EXPECT_GT(cache_evictions, 0u);
    }

    // Read back through the shards (authoritative after the drain).
    std::vector<uint64_t> keys;
    for (const auto& [key, sum] : sums) keys.push_back(key);
    const auto groups = cluster->map.group(keys);
    const size_t record_bytes = config.table.layout.record_bytes();
    size_t mismatches = 0;
    for (size_t s = 0; s < groups.size(); ++s) {
      std::vector<uint64_t> shard_keys;
      for (uint32_t pos : groups[s]) shard_keys.push_back(keys[pos]);
      auto reply = ds.call<pull_reply>(cluster->shards[s], pull_atom::value, shard_keys);
      ASSERT_EQ(reply.rows.records.size(), shard_keys.size() * record_bytes);
      for (size_t j = 0; j < shard_keys.size(); ++j) {
        const float* w = weights_of(reinterpret_cast<const std::byte*>(reply.rows.records.data()) +
                                    j * record_bytes);
        const auto& want = sums.at(shard_keys[j]);
        for (uint32_t e = 0; e < S::dim; ++e)
          if (w[e] != want[e] && mismatches++ < 10)
            ADD_FAILURE() << "key " << shard_keys[j] << " element " << e << ": " << w[e]
                          << " != " << want[e];
      }
    }
    EXPECT_EQ(mismatches, 0u);
    cluster->stop();
    ds.drain_jobs();
  }

  // Acknowledged updates survived the graceful stop: the LMDB environments
  // alone hold every key's exact sum.
  size_t found = 0, mismatches = 0;
  for (const auto& shard : config.shards) {
    auto tier = lmdb_tier::open(config.table.layout, shard.lmdb);
    ASSERT_TRUE(tier) << tier.err().to_string();
    std::vector<uint64_t> keys;
    for (const auto& [key, sum] : sums) keys.push_back(key);
    const size_t record_bytes = config.table.layout.record_bytes();
    std::vector<std::byte> records(keys.size() * record_bytes);
    std::vector<uint32_t> misses;
    ASSERT_TRUE((*tier)->lookup(keys, rows_span{records.data(), record_bytes}, misses));
    std::set<uint32_t> missed(misses.begin(), misses.end());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (missed.count(static_cast<uint32_t>(i))) continue;
      ++found;
      const float* w = weights_of(records.data() + i * record_bytes);
      for (uint32_t e = 0; e < S::dim; ++e)
        if (w[e] != sums.at(keys[i])[e]) ++mismatches;
    }
  }
  EXPECT_EQ(found, sums.size());
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, ExactSum,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "Async" : "Pass";
                         });

// --- the exact-sum test on CAF's threaded scheduler -------------------------------

// The same workload with real concurrency (2 scheduler threads, ssd_flush on
// its own thread) and passes far larger than the caches: a batch has ~870
// distinct keys, a pass ~3,000, the two cache tiers hold 2 x 16 sets x 32 =
// 1,024 rows. Rows are evicted dirty while pulls for them are in flight,
// pass-mode pushes overflow the cache, and shards cycle rows through LMDB.
// Message orders vary from run to run; before the fix described in
// docs/actors.md ("Lost updates when a pass outgrows the cache") every run
// of the pass-mode case ended with ~1,500 of ~3,200 keys wrong. Run it with
// --gtest_repeat=20 after touching the cache tier.
struct threaded_setup {
  static constexpr uint32_t dim = 4;
  static constexpr uint32_t workers = 3;
  static constexpr uint64_t batches = 120;
  static constexpr uint32_t examples = 128;
  static constexpr uint32_t features = 8;
  static constexpr uint64_t key_space = 3200;
};

cluster_config threaded_cluster(training_mode mode, const std::filesystem::path& dir) {
  using S = threaded_setup;
  cluster_config c;
  c.name = "exact-sum-threaded";
  c.mode = mode;
  c.partitions = 64;
  c.pass_batches = 3;
  c.threads = 2;
  c.table = strata::testing::exact_sum_table(S::dim);
  shard_config shard;
  shard.dram.capacity_bytes = 96 << 10;  // fewer rows than keys: rows cycle through LMDB
  shard.lmdb.map_bytes = size_t{64} << 20;
  shard.flush_batch_rows = 64;
  shard.max_flushes_in_flight = 2;
  shard.flush_on_own_thread = true;
  add_shards(c, 2, dir, shard);
  cache_config cache;
  cache.geometry.sets = 16;  // 512 rows per cache tier
  cache.staleness = 4;
  add_caches(c, 2, cache);
  for (uint32_t w = 0; w < S::workers; ++w) {
    worker_config wc;
    wc.index = w;
    wc.batch_size = S::examples;
    wc.prefetch_depth = 2;
    wc.max_in_flight = 2;
    c.workers.push_back(wc);
  }
  return c;
}

class ExactSumThreaded : public ::testing::TestWithParam<training_mode> {};

TEST_P(ExactSumThreaded, EveryKeyHoldsTheExactSumWhenAPassOutgrowsTheCaches) {
  using S = threaded_setup;
  temp_dir dir;
  const auto config = threaded_cluster(GetParam(), dir.path());
  // key -> exact weights, replaying every worker's batches.
  std::map<uint64_t, std::vector<float>> sums;
  for (uint32_t w = 0; w < S::workers; ++w) {
    synthetic_batches source(w, S::batches, S::examples, S::features, S::key_space);
    for (auto b = source.next(0); !b->examples.empty(); b = source.next(0))
      for (const auto& ex : b->examples)
        for (const auto& f : ex.features) {
          auto& row = sums[f.key];
          row.resize(S::dim, 0.0f);
          for (uint32_t e = 0; e < S::dim; ++e) row[e] += increment(f.key, e, f.slot);
        }
  }
  auto bad_rows = std::make_shared<uint64_t>(0);
  worker_seams seams;
  seams.batches = [](const worker_config& wc) -> expected<std::shared_ptr<batch_source>> {
    return std::shared_ptr<batch_source>(std::make_shared<synthetic_batches>(
        wc.index, S::batches, S::examples, S::features, S::key_space));
  };
  seams.gradients = [bad_rows](const worker_config&) -> std::shared_ptr<gradient_source> {
    return std::make_shared<increment_gradients>(S::dim, bad_rows);
  };
  seams.initial_dense = std::vector<float>{};

  caf::actor_system_config system_config;
  add_message_types(system_config);
  add_training_message_types(system_config);
  system_config.set("scheduler.max-threads", size_t{config.threads});
  system_config.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system system{system_config};
  auto cluster = spawn_training_cluster(system, config, seams);
  ASSERT_TRUE(cluster) << cluster.err().to_string();
  caf::scoped_actor self{system};
  std::optional<training_summary> summary;
  self->request(cluster->coordinator, caf::infinite, run_atom::value)
      .receive([&](training_summary& s) { summary = s; },
               [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->batches, S::workers * S::batches);
  EXPECT_EQ(*bad_rows, 0u) << "a lookup served a row that is not a partial sum";

  // The pressure was real: caches evicted, shards flushed to LMDB.
  uint64_t flushed = 0, cache_evictions = 0;
  for (auto& shard : cluster->shards)
    self->request(shard, caf::infinite, stats_atom::value)
        .receive([&](tier_stats& t) { flushed += t.flushed_rows; },
                 [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
  for (auto& cache : cluster->caches)
    self->request(cache, caf::infinite, stats_atom::value)
        .receive([&](tier_stats& t) { cache_evictions += t.evictions; },
                 [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
  EXPECT_GT(flushed, sums.size() / 2);
  EXPECT_GT(cache_evictions, sums.size() / 2);

  // Every key, read through its shard (authoritative after the drain).
  std::vector<uint64_t> keys;
  for (const auto& [key, sum] : sums) keys.push_back(key);
  const auto groups = cluster->map.group(keys);
  const size_t record_bytes = config.table.layout.record_bytes();
  size_t wrong_keys = 0;
  for (size_t s = 0; s < groups.size(); ++s) {
    std::vector<uint64_t> shard_keys;
    for (uint32_t pos : groups[s]) shard_keys.push_back(keys[pos]);
    pull_reply reply;
    self->request(cluster->shards[s], caf::infinite, pull_atom::value, shard_keys)
        .receive([&](pull_reply& r) { reply = std::move(r); },
                 [&](caf::error& err) { ADD_FAILURE() << system.render(err); });
    ASSERT_EQ(reply.rows.records.size(), shard_keys.size() * record_bytes);
    for (size_t j = 0; j < shard_keys.size(); ++j) {
      const float* w = weights_of(reinterpret_cast<const std::byte*>(reply.rows.records.data()) +
                                  j * record_bytes);
      const auto& want = sums.at(shard_keys[j]);
      bool wrong = false;
      for (uint32_t e = 0; e < S::dim; ++e) wrong = wrong || w[e] != want[e];
      if (wrong && wrong_keys++ < 5)
        ADD_FAILURE() << "key " << shard_keys[j] << ": " << w[0] << " != " << want[0]
                      << " (element 0)";
    }
  }
  EXPECT_EQ(wrong_keys, 0u) << "of " << keys.size() << " keys";
  cluster->stop();
}

INSTANTIATE_TEST_SUITE_P(Modes, ExactSumThreaded,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "Async" : "Pass";
                         });

// --- end to end: run_local_cluster on real and synthetic data ---------------------

// A model-training cluster of `workers` workers splitting `data` (a Criteo
// TSV file) by line, two shards, two cache tiers.

class SampleFile : public ::testing::TestWithParam<training_mode> {};

// The PaddleRec sample (100 real Criteo rows) trains end to end; afterwards
// exactly the keys it holds are stored: 1256 distinct categorical (slot,
// value) keys (key_counts.txt, empty values excluded) plus its integer
// buckets.
TEST_P(SampleFile, TrainsEndToEndAndStoresEveryKey) {
  const std::filesystem::path sample =
      std::filesystem::path(STRATA_SAMPLE_DATA) / "paddlerec_criteo_raw_sample_train.txt";
  ASSERT_TRUE(std::filesystem::exists(sample)) << "the sample data ships in tests/data: " << sample;
  model::reader_config data;
  data.format = model::data_format::criteo_tsv;
  data.path = sample;

  // The keys, independently of the cluster; Criteo slots 0..12 are the
  // integer columns, 13..38 the categorical ones.
  std::set<uint64_t> all_keys, categorical_keys;
  {
    auto reader = model::reader::open(data);
    ASSERT_TRUE(reader) << reader.err().to_string();
    for (auto b = (*reader)->next_batch(1000); b && !b->examples.empty();
         b = (*reader)->next_batch(1000))
      for (const auto& ex : b->examples)
        for (const auto& f : ex.features) {
          all_keys.insert(f.key);
          if (f.slot >= 13) categorical_keys.insert(f.key);
        }
  }
  ASSERT_EQ(categorical_keys.size(), 1256u);

  temp_dir dir;
  auto config = model_cluster(GetParam(), dir.path(), data, 2);
  // Several epochs over the 100 rows, evaluated on the same rows: a model
  // that trains end to end fits them (an untrained one scores about 0.5).
  constexpr uint32_t epochs = 10;
  for (auto& w : config.workers) {
    w.batch_size = 16;
    w.epochs = epochs;
  }
  config.pass_batches = 2;
  config.heldout = data;
  auto report = run_local_cluster(config);
  ASSERT_TRUE(report) << report.err().to_string();
  EXPECT_EQ(report->examples, 100u * epochs);
  EXPECT_EQ(report->bad_lines, 0u);
  EXPECT_EQ(report->heldout_examples, 100u);
  EXPECT_GT(report->heldout_auc, 0.8) << "the model did not fit the rows it trained on";
  EXPECT_TRUE(std::isfinite(report->heldout_logloss));
  EXPECT_EQ(report->tiers.size(), 4u);  // two shards, two caches
  EXPECT_EQ(report->stored_keys, all_keys.size());

  // Open the environments the stopped cluster left: every categorical key
  // is there, and nothing else but the integer buckets.
  size_t stored_categorical = 0, stored_total = 0;
  for (const auto& shard : config.shards) {
    auto tier = lmdb_tier::open(config.table.layout, shard.lmdb);
    ASSERT_TRUE(tier) << tier.err().to_string();
    stored_total += (*tier)->size();
    std::vector<uint64_t> keys(categorical_keys.begin(), categorical_keys.end());
    const size_t record_bytes = config.table.layout.record_bytes();
    std::vector<std::byte> records(keys.size() * record_bytes);
    std::vector<uint32_t> misses;
    ASSERT_TRUE((*tier)->lookup(keys, rows_span{records.data(), record_bytes}, misses));
    stored_categorical += keys.size() - misses.size();
  }
  EXPECT_EQ(stored_categorical, 1256u);
  EXPECT_EQ(stored_total, all_keys.size());
  std::printf("[ sample ] mode %s: %.0f examples/s, train loss %.4f, auc %.4f, logloss %.4f\n",
              GetParam() == training_mode::async ? "async" : "pass", report->examples_per_s,
              report->train_loss, report->heldout_auc, report->heldout_logloss);
}

INSTANTIATE_TEST_SUITE_P(Modes, SampleFile,
                         ::testing::Values(training_mode::async, training_mode::pass),
                         [](const auto& info) {
                           return info.param == training_mode::async ? "Async" : "Pass";
                         });

// Synthetic data from a planted logistic model: training reaches a held-out
// AUC within 0.01 of the planted model's own AUC.
void train_on_planted_data(training_mode mode, uint64_t rows, uint64_t heldout_rows,
                           uint32_t epochs) {
  temp_dir dir;
  model::datagen_config gen;
  gen.output = dir.path() / "planted.tsv";
  gen.rows = rows + heldout_rows;
  // 50 values per slot and strong planted weights: enough occurrences per
  // key that estimation noise stays well inside the 0.01 AUC margin (with
  // 770 values per slot and the default stddev 0.7, 200k rows end ~0.04
  // below the planted AUC however long the cluster trains).
  gen.distinct_keys = 1300;
  gen.weight_stddev = 1.5;
  gen.seed = 11;
  auto planted = model::generate(gen);
  ASSERT_TRUE(planted) << planted.err().to_string();

  model::reader_config train;
  train.path = gen.output;
  train.limit = rows;
  auto config = model_cluster(mode, dir.path(), train, 2);
  for (auto& w : config.workers) {
    w.data.limit = rows / 2;
    w.epochs = epochs;
  }
  config.heldout.path = gen.output;
  config.heldout.skip = rows;
  config.heldout_examples = heldout_rows;
  double last_loss = 0;
  auto report =
      run_local_cluster(config, [&](const training_progress& p) { last_loss = p.recent_loss; });
  ASSERT_TRUE(report) << report.err().to_string();
  EXPECT_EQ(report->examples, rows / 2 * 2 * epochs);
  EXPECT_EQ(report->heldout_examples, heldout_rows);
  std::printf(
      "[ planted ] %s, %llu rows x %u epochs: %.0f examples/s (%.1f s), train loss %.4f; "
      "held-out auc %.4f logloss %.4f; planted auc %.4f logloss %.4f\n",
      mode == training_mode::async ? "async" : "pass", static_cast<unsigned long long>(rows),
      epochs, report->examples_per_s, report->seconds, report->train_loss, report->heldout_auc,
      report->heldout_logloss, planted->auc, planted->logloss);
  EXPECT_GT(report->heldout_auc, planted->auc - 0.01);
}

// 500k generated rows: 450k to train on (one epoch, two workers), 50k held out.
TEST(PlantedModel, AsyncReachesPlantedAuc) {
  train_on_planted_data(training_mode::async, 450000, 50000, 1);
}
TEST(PlantedModel, PassReachesPlantedAuc) {
  train_on_planted_data(training_mode::pass, 450000, 50000, 1);
}

}  // namespace
}  // namespace strata::actors
