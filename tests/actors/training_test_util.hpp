// Helpers of the training-level actor tests: a deterministic actor system
// on CAF's bare test_coordinator, and the exact-sum test's synthetic
// batches and integer gradients (docs/architecture.md, Semantics: The
// exact-sum test).
#pragma once

#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "actors/coordinator_actor.hpp"
#include "actors/training_protocol.hpp"
#include "actors/worker_actor.hpp"
#include "model/reader.hpp"

namespace strata::actors {

// --- a deterministic actor system ------------------------------------------------

struct test_config : caf::actor_system_config {
  test_config() {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.verbosity", caf::atom("quiet"));
    actors::add_message_types(*this);
    actors::add_training_message_types(*this);
  }
};

class deterministic_system {
 public:
  deterministic_system()
      : system_(config_),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {}
  caf::actor_system& system() { return system_; }

  template <class Reply>
  struct answer {
    std::optional<Reply> value;
    std::optional<caf::error> error;
    bool done() const { return value || error; }
  };

  // Sends a request from a fresh client actor; the answer fills in as the
  // scheduler runs.
  template <class Reply, class Handle, class... Ts>
  std::shared_ptr<answer<Reply>> ask(Handle handle, Ts... xs) {
    auto out = std::make_shared<answer<Reply>>();
    system_.spawn([out, handle, xs...](caf::event_based_actor* self) {
      self->request(handle, caf::infinite, xs...)
          .then([out](Reply& r) { out->value = std::move(r); },
                [out](caf::error& e) { out->error = e; });
    });
    return out;
  }

  // Runs jobs (and timeouts) until `done()` or nothing is left to do.
  // Actors on their own threads (if any) are waited for, up to a deadline.
  template <class Done>
  void run_until(Done done, std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      if (sched_.run(1) > 0) continue;  // one job at a time: `done` is checked between jobs
      if (sched_.trigger_timeouts() > 0) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  template <class Reply, class Handle, class... Ts>
  Reply call(Handle handle, Ts... xs) {
    auto a = ask<Reply>(handle, xs...);
    run_until([&] { return a->done(); });
    EXPECT_FALSE(a->error) << (a->error ? system_.render(*a->error) : "");
    EXPECT_TRUE(a->value) << "no reply";
    return a->value ? std::move(*a->value) : Reply{};
  }

  // Runs whatever is queued (e.g. exits), so the system can shut down.
  void drain_jobs() { sched_.run(); }

 private:
  test_config config_;
  caf::actor_system system_;
  caf::scheduler::test_coordinator& sched_;
};

// Synthetic batches: `batches` batches of `examples` examples with
// `features` keys each, drawn (with repeats) from [1, key_space] by a seeded
// LCG, so the test can replay them.
class synthetic_batches final : public batch_source {
 public:
  synthetic_batches(uint64_t seed, uint64_t batches, uint32_t examples, uint32_t features,
                    uint64_t key_space)
      : state_(seed * 0x9E3779B97F4A7C15ULL + 1),
        batches_left_(batches),
        examples_(examples),
        features_(features),
        key_space_(key_space) {}
  expected<model::batch> next(size_t) override {
    model::batch b;
    if (batches_left_ == 0) return b;
    --batches_left_;
    for (uint32_t e = 0; e < examples_; ++e) {
      model::example ex;
      ex.label = static_cast<float>(e % 2);
      for (uint32_t f = 0; f < features_; ++f) {
        state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
        ex.features.push_back({f, 1 + (state_ >> 33) % key_space_, 1.0f});
      }
      b.examples.push_back(std::move(ex));
    }
    return b;
  }
  uint64_t bad_lines() const override { return 0; }

 private:
  uint64_t state_;
  uint64_t batches_left_;
  uint32_t examples_, features_;
  uint64_t key_space_;
};

// The integer increment of element `e` of key `key` seen in slot `slot`.
inline float increment(uint64_t key, uint32_t e, uint32_t slot) {
  return static_cast<float>(1 + (key * 7 + e * 3 + slot) % 5);
}

// Pushes negated increments (the tables apply w -= lr * grad with lr 1), and
// checks that every row it is served holds whole numbers (sums so far).
class increment_gradients final : public gradient_source {
 public:
  increment_gradients(uint32_t dim, std::shared_ptr<uint64_t> bad_rows)
      : dim_(dim), bad_rows_(std::move(bad_rows)) {}
  model::batch_result compute(const model::batch& batch, std::span<const float> rows,
                              std::span<const float>) override {
    model::batch_result out;
    for (float w : rows)
      if (w < 0 || w != std::floor(w)) ++*bad_rows_;
    for (const auto& ex : batch.examples)
      for (const auto& f : ex.features)
        for (uint32_t e = 0; e < dim_; ++e) out.row_grads.push_back(-increment(f.key, e, f.slot));
    return out;
  }

 private:
  uint32_t dim_;
  std::shared_ptr<uint64_t> bad_rows_;
};

// Appends `count` shards to c, each `base` with its index, the cluster's
// table and partitions, and its LMDB environment under dir/<prefix><i>.
inline void add_shards(cluster_config& c, uint32_t count, const std::filesystem::path& dir,
                       shard_config base, const std::string& prefix = "shard") {
  for (uint32_t s = 0; s < count; ++s) {
    shard_config sc = base;
    sc.index = s;
    sc.table = c.table;
    sc.lmdb.directory = dir / (prefix + std::to_string(s));
    sc.lmdb.table = c.table.name;
    sc.lmdb.partitions = c.partitions;
    c.shards.push_back(std::move(sc));
  }
}

// Appends `count` cache tiers to c, each `base` with its index and the
// cluster's table.
inline void add_caches(cluster_config& c, uint32_t count, cache_config base) {
  for (uint32_t i = 0; i < count; ++i) {
    cache_config cc = base;
    cc.index = i;
    cc.table = c.table;
    c.caches.push_back(std::move(cc));
  }
}

// A CTR-model cluster (Adagrad rows, 2 shards under `dir`, 2 cache tiers,
// `workers` workers reading disjoint windows of `data`).
inline cluster_config model_cluster(training_mode mode, const std::filesystem::path& dir,
                                    const model::reader_config& data, uint32_t workers) {
  cluster_config c;
  c.name = "train";
  c.mode = mode;
  c.partitions = 256;
  c.pass_batches = 16;
  c.threads = 2;
  c.model.slots = 39;
  c.model.embedding_dim = 8;
  c.model.hidden = {32, 16};
  c.table.name = "ctr";
  c.table.layout = row_layout{c.model.row_dim(), optimizer_kind::adagrad, true};
  c.table.optimizer.kind = optimizer_kind::adagrad;
  c.table.optimizer.learning_rate = 0.05f;
  // Gradients are of the batch's mean loss (~1/batch per occurrence): a
  // large starting accumulator would freeze the rows for thousands of steps.
  c.table.optimizer.initial_accumulator = 1e-6f;
  c.table.initializer.kind = initializer_kind::normal;
  c.table.initializer.normal_stddev = 0.01f;
  c.table.initializer.seed = 3;
  c.dense.learning_rate = 0.002f;
  shard_config shard;
  shard.dram.capacity_bytes = size_t{64} << 20;
  shard.lmdb.map_bytes = size_t{1} << 30;
  add_shards(c, 2, dir, shard);
  cache_config cache;
  cache.geometry.sets = 1024;
  add_caches(c, 2, cache);
  for (uint32_t w = 0; w < workers; ++w) {
    worker_config wc;
    wc.index = w;
    wc.data = data;
    wc.data.shard_index = w;
    wc.data.shard_count = workers;
    wc.batch_size = 256;
    c.workers.push_back(wc);
  }
  return c;
}

}  // namespace strata::actors
