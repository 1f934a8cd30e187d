#include "actors/shard_reader.hpp"

#include <caf/all.hpp>

#include "actors/error.hpp"

namespace strata::actors {
namespace {

struct reader_state {
  std::unique_ptr<lmdb_tier> tier;
  std::shared_ptr<shard_read_gate> gate;
  std::vector<std::byte> rows;  // one read's rows, kept between reads
  std::vector<uint32_t> misses;
  // Replies held by the gate (tests).
  std::vector<std::pair<caf::typed_response_promise<row_batch>, row_batch>> held;
  static inline const char* name = "shard_reader";
};

shard_reader_actor::behavior_type reader_behavior(
    shard_reader_actor::stateful_pointer<reader_state> self,
    std::shared_ptr<std::unique_ptr<lmdb_tier>> tier, std::shared_ptr<shard_read_gate> gate) {
  self->state.tier = std::move(*tier);
  self->state.gate = std::move(gate);
  return {
      [self](shard_read_atom, const std::vector<uint64_t>& keys) -> caf::result<row_batch> {
        auto& st = self->state;
        const size_t rb = st.tier->layout().record_bytes();
        st.rows.resize(keys.size() * rb);
        st.misses.clear();
        auto s = st.tier->lookup(keys, {st.rows.data(), rb}, st.misses);
        if (!s) return to_caf(s.err());
        row_batch found;
        found.keys.reserve(keys.size() - st.misses.size());
        found.records.resize((keys.size() - st.misses.size()) * rb);
        size_t m = 0, n = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (m < st.misses.size() && st.misses[m] == i) {
            ++m;
            continue;
          }
          found.keys.push_back(keys[i]);
          std::memcpy(found.records.data() + n * rb, st.rows.data() + i * rb, rb);
          ++n;
        }
        if (st.gate && st.gate->hold) {
          auto promise = self->make_response_promise<row_batch>();
          st.held.emplace_back(promise, std::move(found));
          return promise;
        }
        return found;
      },
      [self](shard_read_release_atom) {
        auto held = std::move(self->state.held);
        self->state.held.clear();
        for (auto& [promise, rows] : held) promise.deliver(std::move(rows));
      },
  };
}

}  // namespace

shard_reader_actor spawn_shard_reader(caf::actor_system& system, std::unique_ptr<lmdb_tier> tier,
                                      bool own_thread, std::shared_ptr<shard_read_gate> gate) {
  // CAF copies spawn arguments: hand the unique_ptr over through a shared box.
  auto box = std::make_shared<std::unique_ptr<lmdb_tier>>(std::move(tier));
  shard_reader_actor reader = own_thread ? system.spawn<caf::detached>(reader_behavior, box, gate)
                                         : system.spawn(reader_behavior, box, gate);
  if (gate) gate->reader = reader.address();
  return reader;
}

void shard_read_gate::release() {
  hold = false;
  if (auto r = caf::actor_cast<shard_reader_actor>(reader))
    caf::anon_send(r, shard_read_release_atom::value);
}

}  // namespace strata::actors
