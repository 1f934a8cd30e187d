// The admin API tests' cluster (tests/deploy/admin_test.cpp,
// hostile_admin_test.cpp): two LMDB shards, one cache tier, two workers,
// on CAF's threaded scheduler.
#pragma once

#include <caf/all.hpp>
#include <filesystem>
#include <string>

#include "actors/coordinator_actor.hpp"
#include "tests/actors/training_test_util.hpp"

namespace strata::deploy {

struct threaded_config : caf::actor_system_config {
  threaded_config() {
    set("scheduler.max-threads", 2);
    set("logger.verbosity", caf::atom("quiet"));
    actors::add_message_types(*this);
    actors::add_training_message_types(*this);
  }
};

constexpr uint32_t dim = 4;

inline actors::cluster_config admin_cluster(const std::filesystem::path& dir) {
  using namespace strata::actors;
  cluster_config c;
  c.name = "admin-test";
  c.partitions = 64;
  c.table.name = "t";
  c.table.layout = row_layout{dim, optimizer_kind::sgd, true};
  c.table.optimizer.kind = optimizer_kind::sgd;
  c.table.optimizer.learning_rate = 1.0f;
  c.table.initializer.kind = initializer_kind::zeros;
  c.checkpoint.directory = dir / "checkpoints";
  c.checkpoint.round_batches = 8;
  c.checkpoint.at_stop = false;
  for (uint32_t s = 0; s < 2; ++s) {
    shard_config sc;
    sc.index = s;
    sc.table = c.table;
    sc.dram.capacity_bytes = 64 << 10;
    sc.lmdb.directory = dir / ("shard" + std::to_string(s));
    sc.lmdb.table = c.table.name;
    sc.lmdb.partitions = c.partitions;
    sc.lmdb.map_bytes = size_t{64} << 20;
    c.shards.push_back(sc);
  }
  cache_config cc;
  cc.table = c.table;
  cc.geometry.sets = 4;
  cc.geometry.slabs_per_set = 1;
  cc.staleness = 4;
  c.caches.push_back(cc);
  for (uint32_t w = 0; w < 2; ++w) {
    worker_config wc;
    wc.index = w;
    wc.batch_size = 8;
    wc.prefetch_depth = 1;
    wc.max_in_flight = 2;
    c.workers.push_back(wc);
  }
  return c;
}

// Seams for a cluster that trains only when asked: increments as
// gradients (no model), far more synthetic data than a test trains.
// `bad_rows` counts rows the increments found wrong.
inline actors::worker_seams admin_seams(
    std::shared_ptr<uint64_t> bad_rows = std::make_shared<uint64_t>(0)) {
  using namespace strata::actors;
  worker_seams seams;
  seams.batches = [](const worker_config& wc) -> expected<std::shared_ptr<batch_source>> {
    return std::shared_ptr<batch_source>(
        std::make_shared<synthetic_batches>(wc.index, 100'000'000, 8, 5, 5000));
  };
  seams.gradients = [bad_rows](const worker_config&) -> std::shared_ptr<gradient_source> {
    return std::make_shared<increment_gradients>(dim, bad_rows);
  };
  seams.initial_dense = std::vector<float>{};
  return seams;
}

}  // namespace strata::deploy
