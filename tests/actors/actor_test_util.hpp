// Deterministic actor tests: an actor system on CAF's bare test_coordinator
// (every message runs when the test says so), and a blocking-free way to
// ask an actor something and read the answer after running the scheduler.
#pragma once

#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <optional>

#include "actors/config.hpp"
#include "actors/protocol.hpp"

namespace strata::testing {

struct test_system_config : caf::actor_system_config {
  test_system_config() {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.verbosity", caf::atom("quiet"));
    actors::add_message_types(*this);
  }
};

// A shard of `table` for tests: LMDB under root/shard<index> (64
// partitions), a DRAM tier of about `dram_rows` rows, small flush batches
// (8 rows, 2 in flight) and ssd_flush on the test scheduler.
inline actors::shard_config test_shard_config(const std::filesystem::path& root, uint32_t index,
                                              const table_config& table, size_t dram_rows) {
  actors::shard_config c;
  c.index = index;
  c.table = table;
  c.dram.capacity_bytes = dram_tier::budget_for_rows(table.layout, c.dram.policy, dram_rows);
  c.lmdb.directory = root / ("shard" + std::to_string(index));
  c.lmdb.table = table.name;
  c.lmdb.partitions = 64;
  c.lmdb.map_bytes = size_t{1} << 30;
  c.flush_batch_rows = 8;
  c.max_flushes_in_flight = 2;
  c.flush_on_own_thread = false;  // everything on the test scheduler
  return c;
}

class actor_harness {
 public:
  actor_harness()
      : system_(config_),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {}
  caf::actor_system& system() { return system_; }
  caf::scheduler::test_coordinator& sched() { return sched_; }

  // Sends a request from a fresh client actor; the result is filled in as
  // the scheduler runs (run() or run_except()).
  template <class Reply>
  struct answer {
    std::optional<Reply> value;
    std::optional<caf::error> error;
  };
  template <class Reply, class Handle, class... Ts>
  std::shared_ptr<answer<Reply>> ask(Handle handle, Ts... xs) {
    auto out = std::make_shared<answer<Reply>>();
    system_.spawn([out, handle, xs...](caf::event_based_actor* self) {
      self->request(handle, caf::infinite, xs...)
          .then([out](Reply r) { out->value = std::move(r); },
                [out](caf::error& e) { out->error = e; });
    });
    return out;
  }
  // Asks and runs every job until quiet; fails the test on an error.
  template <class Reply, class Handle, class... Ts>
  Reply call(Handle handle, Ts... xs) {
    auto a = ask<Reply>(handle, xs...);
    sched_.run();
    EXPECT_FALSE(a->error) << (a->error ? system_.render(*a->error) : "");
    EXPECT_TRUE(a->value) << "no reply";
    return a->value ? *a->value : Reply{};
  }
  // Runs every job except those of actors named `held` (a stateful
  // actor's State::name): their messages wait, as if that actor were slow.
  size_t run_except_named(const std::string& held) {
    return sched_.run_jobs_filtered([held](caf::resumable* job) {
      auto* actor = dynamic_cast<caf::local_actor*>(job);
      return actor == nullptr || held != actor->name();
    });
  }

 private:
  test_system_config config_;
  caf::actor_system system_;
  caf::scheduler::test_coordinator& sched_;
};

}  // namespace strata::testing
