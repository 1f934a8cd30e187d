#include "actors/ssd_flush_actor.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <thread>

#include "actors/error.hpp"
#include "actors/row_batch_util.hpp"

namespace strata::actors {
namespace {

struct flush_state {
  std::unique_ptr<lmdb_tier> writer;
  const clock_source* clock = nullptr;
  // A batch that failed every attempt: later batches are refused at once
  // (nothing is written past a hole; the shard fail-stops).
  caf::error failure;
  static inline const char* name = "ssd_flush";
};

ssd_flush_actor::behavior_type flush_behavior(ssd_flush_actor::stateful_pointer<flush_state> self,
                                              std::shared_ptr<std::unique_ptr<lmdb_tier>> writer,
                                              const clock_source* clock) {
  self->state.writer = std::move(*writer);
  self->state.clock = clock;
  return {
      [self](flush_atom, uint64_t seq, const row_batch& rows) -> caf::result<uint64_t, double> {
        lmdb_tier& tier = *self->state.writer;
        if (!well_formed(rows, tier.layout()))
          return caf::make_error(caf::sec::runtime_error,
                                 "malformed flush batch " + std::to_string(seq));
        if (self->state.failure) return self->state.failure;
        row_buffer none(tier.layout());
        const double start = self->state.clock->now_seconds();
        auto st = tier.store(rows.keys, rows_of(rows, tier.layout()), true, none);
        if (st) return {seq, self->state.clock->now_seconds() - start};
        // Retried in place, so the next batch waits behind this one. A
        // failed transaction was aborted: LMDB holds the previous state.
        const error first = st.err();
        for (int attempt = 1; !st && attempt < flush_attempts; ++attempt) {
          std::this_thread::sleep_for(std::chrono::milliseconds(flush_backoff_ms[attempt - 1]));
          st = tier.store(rows.keys, rows_of(rows, tier.layout()), true, none);
        }
        // The first failure is the cause (a full disk can leave LMDB's
        // environment failed, so later attempts report that instead).
        if (!st) {
          std::string text = "flush batch " + std::to_string(seq) + " (" +
                             std::to_string(rows.keys.size()) + " rows) failed " +
                             std::to_string(flush_attempts) + " times: " + first.message();
          if (st.err().message() != first.message()) text += "; last: " + st.err().message();
          self->state.failure = to_caf(error(first.code(), text));
          return self->state.failure;
        }
        return {seq, self->state.clock->now_seconds() - start};
      },
      [self](checkpoint_atom, const std::string& dir) -> caf::result<uint64_t> {
        if (self->state.failure) return self->state.failure;
        lmdb_tier& tier = *self->state.writer;
        auto st = tier.sync();
        if (!st) return to_caf(st.err());
        st = tier.copy_compacted(dir);
        if (!st) return to_caf(st.err());
        return uint64_t{tier.size()};
      },
      [self](erase_atom, const std::vector<uint32_t>& partitions) -> caf::result<uint64_t> {
        if (self->state.failure) return self->state.failure;
        lmdb_tier& tier = *self->state.writer;
        std::vector<uint64_t> keys;
        for (uint32_t p : partitions) {
          auto st =
              tier.range_scan(p, [&keys](uint64_t key, const std::byte*) { keys.push_back(key); });
          if (!st) return to_caf(st.err());
        }
        if (keys.empty()) return uint64_t{0};
        auto st = tier.erase(keys);
        if (!st) return to_caf(st.err());
        return uint64_t{keys.size()};
      },
      [self](drain_atom) -> caf::result<ok_atom> {
        if (self->state.failure) return self->state.failure;
        auto st = self->state.writer->sync();
        if (!st) return to_caf(st.err());
        return ok_atom::value;
      },
  };
}

}  // namespace

ssd_flush_actor spawn_ssd_flush(caf::actor_system& system, std::unique_ptr<lmdb_tier> writer,
                                bool own_thread, const clock_source* clock) {
  // CAF copies spawn arguments: hand the unique_ptr over through a shared box.
  auto box = std::make_shared<std::unique_ptr<lmdb_tier>>(std::move(writer));
  if (own_thread) return system.spawn<caf::detached>(flush_behavior, box, clock);
  return system.spawn(flush_behavior, box, clock);
}

}  // namespace strata::actors
