#include "actors/shard_actor.hpp"

#include <deque>
#include <map>

#include <caf/all.hpp>

#include "actors/error.hpp"
#include "actors/row_batch_util.hpp"
#include "actors/ssd_flush_actor.hpp"

namespace strata::actors {
namespace {

struct shard_state {
  shard_config config;
  std::unique_ptr<tier_chain> chain;
  ssd_flush_actor flusher;
  std::map<uint64_t, row_batch> in_flight;  // seq -> batch (kept for a retry)
  std::vector<caf::typed_response_promise<ok_atom>> drain_waiters;
  bool draining = false;
  caf::error flush_error;  // a flush that failed twice; drain reports it
  uint64_t flushed_rows = 0;
  static inline const char* name = "shard";
};

using shard_pointer = shard_actor::stateful_pointer<shard_state>;

void maybe_flush(shard_pointer self);

void send_flush(shard_pointer self, uint64_t seq, bool retry) {
  auto& st = self->state;
  self->request(st.flusher, caf::infinite, flush_atom::value, seq, st.in_flight.at(seq))
      .then(
          [self](uint64_t done) {
            auto& s = self->state;
            s.flushed_rows += s.in_flight[done].keys.size();
            s.in_flight.erase(done);
            s.chain->flushed(done);
            maybe_flush(self);
          },
          [self, seq, retry](caf::error& err) {
            if (!retry) {
              send_flush(self, seq, true);  // one retry; the rows stay readable meanwhile
              return;
            }
            self->state.flush_error = std::move(err);
            for (auto& p : self->state.drain_waiters) p.deliver(self->state.flush_error);
            self->state.drain_waiters.clear();
          });
}

// Sends write-behind batches to ssd_flush: when enough rows are queued (or
// while draining), and while fewer than max_flushes_in_flight are out.
void maybe_flush(shard_pointer self) {
  auto& st = self->state;
  auto& wb = st.chain->write_behind();
  while (st.in_flight.size() < st.config.max_flushes_in_flight && wb.queued_rows() > 0 &&
         (st.draining || wb.queued_rows() >= st.config.flush_batch_rows)) {
    row_buffer rows;
    uint64_t seq = 0;
    if (!st.chain->take_flush(rows, seq)) break;
    st.in_flight.emplace(seq, to_batch(rows));
    send_flush(self, seq, false);
  }
  if (st.draining && st.in_flight.empty() && wb.queued_rows() == 0 && !st.drain_waiters.empty()) {
    // Everything is written: make it durable, then answer.
    auto waiters = std::move(st.drain_waiters);
    st.drain_waiters.clear();
    st.draining = false;
    self->request(st.flusher, caf::infinite, drain_atom::value)
        .then(
            [waiters](ok_atom) mutable {
              for (auto& p : waiters) p.deliver(ok_atom::value);
            },
            [waiters](caf::error& err) mutable {
              for (auto& p : waiters) p.deliver(err);
            });
  }
}

shard_actor::behavior_type shard_behavior(shard_pointer self, shard_config config,
                                          std::shared_ptr<std::unique_ptr<tier_chain>> chain,
                                          ssd_flush_actor flusher) {
  auto& st = self->state;
  st.config = std::move(config);
  st.chain = std::move(*chain);
  st.flusher = flusher;
  self->link_to(flusher);
  const row_layout layout = st.config.table.layout;
  return {
      [self, layout](pull_atom, const std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
        pull_reply reply;
        reply.rows.keys = keys;
        reply.rows.records.resize(keys.size() * layout.record_bytes());
        auto s = self->state.chain->lookup(keys, rows_of(reply.rows, layout), &reply.admitted);
        if (!s) return to_caf(s.err());
        maybe_flush(self);
        return reply;
      },
      [self, layout](push_atom, const push_request& req) -> caf::result<push_reply> {
        auto& chain = *self->state.chain;
        if (req.grads.size() != req.keys.size() * layout.dim)
          return caf::make_error(caf::sec::runtime_error,
                                 "push of " + std::to_string(req.keys.size()) + " keys carries " +
                                     std::to_string(req.grads.size()) + " floats, expected dim " +
                                     std::to_string(layout.dim) + " each");
        auto s = chain.push(req.keys, req.grads.data(), layout.dim, nullptr);
        if (!s) return to_caf(s.err());
        // Reply with the updated rows of the distinct keys.
        push_reply reply;
        std::vector<uint64_t> unique = req.keys;
        std::sort(unique.begin(), unique.end());
        unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
        reply.rows.keys = unique;
        reply.rows.records.resize(unique.size() * layout.record_bytes());
        s = chain.lookup(unique, rows_of(reply.rows, layout), nullptr);
        if (!s) return to_caf(s.err());
        maybe_flush(self);
        return reply;
      },
      [self, layout](write_back_atom, const row_batch& rows) -> caf::result<ok_atom> {
        if (!well_formed(rows, layout))
          return caf::make_error(caf::sec::runtime_error, "malformed write-back batch");
        auto s = self->state.chain->write_back(rows.keys, rows_of(rows, layout));
        if (!s) return to_caf(s.err());
        maybe_flush(self);
        return ok_atom::value;
      },
      [self, layout](prefetch_atom, const std::vector<uint64_t>& keys) {
        std::vector<std::byte> scratch(keys.size() * layout.record_bytes());
        auto s = self->state.chain->lookup(keys, {scratch.data(), layout.record_bytes()}, nullptr);
        if (!s) caf::aout(self) << "strata: prefetch failed: " << s.err().to_string() << "\n";
        maybe_flush(self);
      },
      [self](tick_atom, uint32_t tick) {
        self->state.chain->set_tick(tick);
        auto s = self->state.chain->expire();
        if (!s) caf::aout(self) << "strata: TTL expiry failed: " << s.err().to_string() << "\n";
      },
      [self, layout](drain_atom) -> caf::result<ok_atom> {
        auto& st = self->state;
        if (st.flush_error) return st.flush_error;
        // Every dirty DRAM row joins the write-behind queue, then all of it
        // is flushed; the reply comes once LMDB is synced.
        row_buffer dirty(layout);
        auto s = st.chain->dram().take_dirty(dirty);
        if (!s) return to_caf(s.err());
        row_buffer none(layout);
        s = st.chain->write_behind().store(dirty.keys(), dirty.rows(), true, none);
        if (!s) return to_caf(s.err());
        auto promise = self->make_response_promise<ok_atom>();
        st.drain_waiters.push_back(promise);
        st.draining = true;
        maybe_flush(self);
        return promise;
      },
      [self](stats_atom) -> tier_stats {
        auto& st = self->state;
        auto& chain = *st.chain;
        tier_stats out;
        out.name = "shard " + std::to_string(st.config.index);
        // Lookups of the chain: served by DRAM, or missed it (served below
        // DRAM or by the initializer).
        const auto& chain_stats = chain.stats();
        out.hits = chain_stats.hits_per_tier.empty() ? 0 : chain_stats.hits_per_tier[0];
        out.misses = chain_stats.initialized;
        for (size_t t = 1; t < chain_stats.hits_per_tier.size(); ++t)
          out.misses += chain_stats.hits_per_tier[t];
        out.evictions = chain.dram().stats().evictions;
        out.flushed_rows = st.flushed_rows;
        out.rows = chain.dram().size();
        out.chain_hits = chain.stats().hits_per_tier;
        out.initialized = chain.stats().initialized;
        out.lmdb_rows = chain.durable() ? chain.durable()->size() : 0;
        out.flushes_in_flight = st.in_flight.size();
        out.write_behind_rows = chain.write_behind().size();
        return out;
      },
  };
}

}  // namespace

expected<shard_actor> spawn_shard(caf::actor_system& system, const shard_config& config) {
  auto reader = lmdb_tier::open(config.table.layout, config.lmdb);
  if (!reader) return reader.err();
  lmdb_tier_config writer_config = config.lmdb;
  writer_config.shared_handle = true;
  auto writer = lmdb_tier::open(config.table.layout, writer_config);
  if (!writer) return writer.err();
  auto flusher = spawn_ssd_flush(system, std::move(*writer), config.flush_on_own_thread);
  auto chain = std::make_shared<std::unique_ptr<tier_chain>>(std::make_unique<tier_chain>(
      config.table, config.chain, std::make_unique<dram_tier>(config.table.layout, config.dram),
      std::move(*reader)));
  return system.spawn(shard_behavior, config, chain, flusher);
}

}  // namespace strata::actors
