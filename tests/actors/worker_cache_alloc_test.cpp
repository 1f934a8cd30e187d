// Allocations per trained batch, by actor and in all (issue 17: "no
// allocation or copy per batch on the hot path", target 0 on the worker and
// cache paths).
//
// A worker, its cache tier and two shards (DRAM small enough that rows
// cycle through LMDB) train on CAF's deterministic scheduler, one job (one
// message handled by one actor) at a time; every allocation made while a
// job runs is charged to the actor that runs it. That covers the actor's
// own code and what CAF does on its behalf inside the handler (the message
// and mailbox element of each send, the response handler of each request,
// the response promise's reply). The batch source and the gradient source
// (reader and model, not part of the hot path) are subtracted.
//
// The bounds below are what this code reaches; what is left is CAF's per
// message (see the comments at the bounds). A change that adds an
// allocation per batch to the worker or the cache fails here, counts not
// times, so the test is deterministic.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
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

struct excluded {
  uint64_t allocations = 0;
};

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

constexpr uint32_t dim = 8;
constexpr uint32_t examples = 128;
constexpr uint32_t features = 26;
constexpr uint64_t key_space = 30000;
constexpr uint64_t warmup = 100;
constexpr uint64_t measured = 200;

// Allocations per measured batch, by actor name ("strata.worker",
// "cache_tier", "shard", "ssd_flush", "strata.dense", "other"), and the
// cache's requests to the shards per batch ("requests to shards").
using by_actor = std::map<std::string, double>;

by_actor allocations_by_actor(training_mode mode, const std::filesystem::path& dir) {
  deterministic_system ds;
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(ds.system().scheduler());
  table_config table;
  table.name = "t";
  table.layout = row_layout{dim, optimizer_kind::adagrad, true};
  table.optimizer.kind = optimizer_kind::adagrad;
  table.optimizer.learning_rate = 0.05f;
  const uint32_t partitions = 64;
  std::vector<shard_actor> shards;
  for (uint32_t s = 0; s < 2; ++s) {
    shard_config sc;
    sc.index = s;
    sc.table = table;
    sc.dram.capacity_bytes = size_t{256} << 10;  // rows cycle through LMDB
    sc.lmdb.directory = dir / ("shard" + std::to_string(s));
    sc.lmdb.table = table.name;
    sc.lmdb.partitions = partitions;
    sc.lmdb.map_bytes = size_t{256} << 20;
    sc.flush_batch_rows = 512;
    sc.flush_on_own_thread = false;
    auto shard = spawn_shard(ds.system(), sc);
    EXPECT_TRUE(shard) << shard.err().to_string();
    if (!shard) return {};
    shards.push_back(*shard);
  }
  cache_config cc;
  cc.table = table;
  cc.geometry.sets = 64;  // 2048 rows, a few batches of keys
  auto cache = spawn_cache_tier(ds.system(), cc, mode, shards, partition_map(partitions, 2));
  EXPECT_TRUE(cache) << cache.err().to_string();
  if (!cache) return {};
  auto dense = spawn_dense(ds.system(), dense_config{}, std::vector<float>{});
  EXPECT_TRUE(dense) << dense.err().to_string();
  if (!dense) return {};

  auto ex = std::make_shared<excluded>();
  worker_config wc;
  wc.batch_size = examples;
  wc.pull_dense_every = 0;
  worker_peers peers;
  peers.mode = mode;
  peers.caches = {*cache};
  peers.dense = *dense;
  auto worker = spawn_worker(
      ds.system(), wc, table.layout, peers,
      std::make_shared<counted_batches>(ex, warmup + measured, examples, features, key_space),
      std::make_shared<counted_gradients>(ex, dim));

  std::map<std::string, uint64_t> counts;
  auto run = [&](uint64_t batches, bool count) {
    auto result = std::make_shared<std::optional<worker_result>>();
    ds.system().spawn([worker, batches, result](caf::event_based_actor* self) -> caf::behavior {
      self->request(worker, caf::infinite, run_atom::value, batches, uint64_t{0})
          .then([self, result](worker_result& r) {
            *result = r;
            self->quit();
          });
      return {[](progress_atom, const progress_report&) {}};
    });
    // One job at a time, charged to the actor that runs it.
    while (!result->has_value() && sched.has_job()) {
      auto* actor = dynamic_cast<caf::local_actor*>(sched.jobs.front());
      std::string name = actor != nullptr ? actor->name() : "other";
      if (name != "strata.worker" && name != "cache_tier" && name != "shard" &&
          name != "ssd_flush" && name != "strata.dense")
        name = "other";
      const uint64_t before = alloc_count::thread_total();
      const uint64_t ex_before = ex->allocations;
      sched.run_once();
      const uint64_t made = alloc_count::thread_total() - before - (ex->allocations - ex_before);
      if (count) counts[name] += made;
    }
    EXPECT_TRUE(result->has_value());
    EXPECT_EQ(result->has_value() ? (*result)->batches : 0u, batches);
  };
  auto shard_messages = [&] {  // pulls and pushes the shards have handled
    uint64_t n = 0;
    for (auto& sh : shards) {
      auto st = ds.call<tier_stats>(sh, stats_atom::value);
      n += st.pulls + st.pushes;
    }
    return n;
  };
  run(warmup, false);
  const uint64_t shard_messages_before = shard_messages();
  run(measured, true);
  counts["requests to shards"] = shard_messages() - shard_messages_before;

  auto stats = ds.call<tier_stats>(shards[0], stats_atom::value);
  EXPECT_GT(stats.flushed_rows, 0u);
  EXPECT_GT(stats.chain_hits.size() > 2 ? stats.chain_hits[2] : 0u, 0u) << "no LMDB hits";
  for (auto& s : shards) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*cache, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*dense, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  ds.drain_jobs();
  by_actor out;
  for (const auto& [name, n] : counts) out[name] = static_cast<double>(n) / measured;
  return out;
}

// What CAF 0.17 allocates per message, measured the same way: a send of a
// moved vector, a request (message plus its response handler), a reply
// delivered through a response promise, and the handling of that reply.
struct caf_costs {
  double send = 0, request = 0, reply = 0, handle_reply = 0;
};

caf_costs measure_caf_costs() {
  deterministic_system ds;
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(ds.system().scheduler());
  constexpr int rounds = 50;
  auto pool = std::make_shared<std::vector<std::vector<uint64_t>>>();
  for (int i = 0; i < 4 * rounds; ++i) pool->emplace_back(64, uint64_t{1});
  auto take = [pool] {
    auto v = std::move(pool->back());
    pool->pop_back();
    return v;
  };
  // Whatever arrives is kept (reserved up front: no allocation of ours).
  auto kept = std::make_shared<std::vector<std::vector<uint64_t>>>();
  kept->reserve(4 * rounds);
  auto receiver = ds.system().spawn([kept, take](caf::event_based_actor* self) -> caf::behavior {
    return {
        [kept](prefetch_atom, std::vector<uint64_t>& v) { kept->push_back(std::move(v)); },
        [self, kept, take](lookup_atom, std::vector<uint64_t>& v) {
          kept->push_back(std::move(v));
          auto promise = self->make_response_promise<std::vector<uint64_t>>();
          promise.deliver(take());
          return promise;
        },
    };
  });
  auto* receiver_ptr = caf::actor_cast<caf::abstract_actor*>(receiver);
  caf::abstract_actor* requester = nullptr;
  bool requests_sent = false;
  uint64_t receiver_allocs = 0, requester_allocs = 0;
  auto run_all = [&] {
    while (sched.has_job()) {
      auto* job = dynamic_cast<caf::abstract_actor*>(sched.jobs.front());
      const bool handles_reply = job == requester && requests_sent;
      const uint64_t before = alloc_count::thread_total();
      sched.run_once();
      const uint64_t made = alloc_count::thread_total() - before;
      if (job == receiver_ptr) receiver_allocs += made;
      if (handles_reply) requester_allocs += made;
    }
  };
  run_all();
  caf_costs out;
  ds.system().spawn([&](caf::event_based_actor* self) {
    for (int i = 0; i < rounds; ++i) {
      const uint64_t before = alloc_count::thread_total();
      self->send(receiver, prefetch_atom::value, take());
      out.send += static_cast<double>(alloc_count::thread_total() - before) / rounds;
    }
  });
  run_all();
  receiver_allocs = 0;
  ds.system().spawn([&](caf::event_based_actor* self) {
    requester = self;
    for (int i = 0; i < rounds; ++i) {
      const uint64_t before = alloc_count::thread_total();
      self->request(receiver, caf::infinite, lookup_atom::value, take())
          .then([kept](std::vector<uint64_t>& v) { kept->push_back(std::move(v)); });
      out.request += static_cast<double>(alloc_count::thread_total() - before) / rounds;
    }
    requests_sent = true;
  });
  run_all();
  out.reply = static_cast<double>(receiver_allocs) / rounds;
  out.handle_reply = static_cast<double>(requester_allocs) / rounds;
  caf::anon_send_exit(receiver, caf::exit_reason::user_shutdown);
  ds.drain_jobs();
  return out;
}

void print(const char* what, const by_actor& per) {
  double sum = 0;
  for (const auto& [name, n] : per) {
    if (name == "requests to shards") continue;
    std::cout << what << " allocations per batch, " << name << ": " << n << "\n";
    sum += n;
  }
  std::cout << what << " allocations per batch, all: " << sum << "\n";
}

TEST(WorkerCacheAllocations, WhatCafAllocatesPerMessage) {
  const caf_costs c = measure_caf_costs();
  std::cout << "CAF allocations: send " << c.send << ", request " << c.request << ", reply "
            << c.reply << ", handling a reply " << c.handle_reply << "\n";
  // The remainder on the worker and cache paths is made of these.
  EXPECT_GT(c.send + c.request + c.reply + c.handle_reply, 0.0);
}

TEST(WorkerCacheAllocations, AsyncPerBatchByActor) {
  const caf_costs c = measure_caf_costs();
  temp_dir dir;
  auto per = allocations_by_actor(training_mode::async, dir.path());
  print("async", per);
  ASSERT_TRUE(per.count("strata.worker"));
  ASSERT_TRUE(per.count("cache_tier"));
  // CAF's share per batch. Worker: a prefetch and a progress report
  // (sends), a lookup and a push (requests). Cache: the lookup's reply and
  // the push's acknowledgement (replies), its pulls and push parts to the
  // shards (requests, counted by the shards).
  const double worker_caf = 2 * c.send + 2 * c.request;
  const double cache_caf = 2 * c.reply + per["requests to shards"] * c.request;
  const double worker_own = per["strata.worker"] - worker_caf;
  const double cache_own = per["cache_tier"] - cache_caf;
  std::cout << "worker: " << per["strata.worker"] << " = " << worker_caf << " CAF + "
            << worker_own << " own; cache: " << per["cache_tier"] << " = " << cache_caf
            << " CAF + " << cache_own << " own (" << per["requests to shards"]
            << " requests to shards per batch)\n";
  // Before (commit 49267a8): worker 23.0, cache 30.2 allocations per batch;
  // then 8.1 (1.8 own) and 18.2 (1.4 own): a push's key and gradient
  // vectors, the lookup reply's record buffer and the gradient vector of a
  // push split over two shards never came back. Now buffers travel back
  // (push_ack's grads and spare_keys, push_request's spare_records,
  // push_reply's grads, a shard's reply keys in the request's vector):
  // 6.05 and 16.2, nothing but CAF's per message. The CAF estimate above is
  // an average (a prefetch is not sent for a batch looked up at once), so
  // "own" may come out slightly below 0; the totals are exact counts.
  EXPECT_LE(worker_own, 0.3);
  EXPECT_LE(cache_own, 0.3);
  EXPECT_LE(per["strata.worker"], 6.3);
  EXPECT_LE(per["cache_tier"], 16.6);
}

// The whole hierarchy: worker, cache, shards, their flush actors, dense
// and CAF's messages between them.
TEST(HotPathAllocations, AsyncWorkerCacheShardPerBatch) {
  temp_dir dir;
  auto per = allocations_by_actor(training_mode::async, dir.path());
  double all = 0;
  for (const auto& [name, n] : per)
    if (name != "requests to shards") all += n;
  std::cout << "allocations per batch (async, worker + cache + shards + CAF): " << all << "\n";
  // 31,620 before the flat maps and reused buffers (~10 per key position);
  // 121.5 after them; 94.6 once the worker and the cache reuse their
  // pipeline slots and message vectors; 84.3 once buffers travel back in
  // the replies. Most of what is left is the shards' (54 per batch: their
  // reply records and flush batches) and CAF's.
  ASSERT_GT(all, 0.0);
  EXPECT_LE(all, 88.0);
}

}  // namespace
}  // namespace strata::actors
