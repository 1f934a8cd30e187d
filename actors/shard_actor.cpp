#include "actors/shard_actor.hpp"

#include <caf/all.hpp>
#include <deque>
#include <fstream>
#include <map>
#include <optional>

#include "actors/error.hpp"
#include "actors/row_batch_util.hpp"
#include "actors/ssd_flush_actor.hpp"
#include "common/latency_histogram.hpp"

namespace strata::actors {
namespace {

// Times the LMDB tier's lookups inside the chain (tier 2).
class lmdb_read_timer final : public tier_observer {
 public:
  lmdb_read_timer(const clock_source* clock, latency_histogram* histogram)
      : clock_(clock), histogram_(histogram) {}
  void before_lookup(size_t tier) override {
    if (tier == lmdb_tier_index) start_ = clock_->now_seconds();
  }
  void after_lookup(size_t tier, size_t) override {
    if (tier == lmdb_tier_index) histogram_->observe(clock_->now_seconds() - start_);
  }
  static constexpr size_t lmdb_tier_index = 2;

 private:
  const clock_source* clock_;
  latency_histogram* histogram_;
  double start_ = 0;
};

// Metrics of the shard's own work (the tiers count theirs).
struct shard_metrics {
  latency_histogram pull, push, flush, lmdb_read, lmdb_write;
  uint64_t pushes = 0, push_rows = 0, write_back_rows = 0;
  uint64_t prefetch_requests = 0, prefetch_rows = 0;
  uint64_t flush_batches = 0, flush_bytes = 0;
  std::map<uint64_t, double> flush_started;  // seq -> time sent
};

// A checkpoint's copy, from the cut until ssd_flush answers.
struct checkpoint_copy {
  bool done = false;
  uint64_t rows = 0;
  caf::error failure;
  std::vector<caf::typed_response_promise<uint64_t>> waiters;
};

// A cut waiting for the flushes before it.
struct pending_cut {
  uint64_t epoch = 0;
  std::string dir;
  caf::typed_response_promise<ok_atom> promise;
};

struct shard_state {
  shard_config config;
  shard_metrics metrics;
  std::unique_ptr<lmdb_read_timer> read_timer;
  std::unique_ptr<tier_chain> chain;
  ssd_flush_actor flusher;
  std::map<uint64_t, row_batch> in_flight;  // seq -> batch (kept for a retry)
  std::vector<caf::typed_response_promise<ok_atom>> drain_waiters;
  bool draining = false;
  caf::error flush_error;                      // a flush that failed twice; drain reports it
  uint64_t max_push_epoch = 0;                 // highest checkpoint epoch a push carried
  std::optional<pending_cut> cut;              // at most one cut at a time
  std::map<uint64_t, checkpoint_copy> copies;  // by epoch
  static inline const char* name = "shard";
};

using shard_pointer = shard_actor::stateful_pointer<shard_state>;

void maybe_flush(shard_pointer self);

// Writes the admission sketch's counters (if any) and the TTL clock into the
// shard's checkpoint directory. Errors name the file.
caf::error write_cut_state(shard_state& st, const std::string& dir) {
  const auto path = std::filesystem::path(dir) / "shard.state";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint32_t tick = st.chain->tick();
  const count_min_sketch* sketch = st.chain->sketch();
  const uint64_t words = sketch ? sketch->counters().size() : 0;
  out.write(reinterpret_cast<const char*>(&tick), sizeof tick);
  out.write(reinterpret_cast<const char*>(&words), sizeof words);
  if (sketch)
    out.write(reinterpret_cast<const char*>(sketch->counters().data()),
              static_cast<std::streamsize>(words * sizeof(uint16_t)));
  out.flush();
  if (!out) return caf::make_error(caf::sec::runtime_error, "cannot write " + path.string());
  return {};
}

// Every row of the cut is in LMDB (nothing in flight, nothing queued): the
// copy is queued to ssd_flush now, ahead of any later flush (FIFO), so it
// holds exactly the cut's state; the cut is answered at once.
void take_cut(shard_pointer self) {
  auto& st = self->state;
  pending_cut cut = std::move(*st.cut);
  st.cut.reset();
  if (st.drain_waiters.empty()) st.draining = false;
  if (auto err = write_cut_state(st, cut.dir)) {
    cut.promise.deliver(std::move(err));
    return;
  }
  const uint64_t epoch = cut.epoch;
  st.copies[epoch];
  self->request(st.flusher, caf::infinite, checkpoint_atom::value, cut.dir)
      .then(
          [self, epoch](uint64_t rows) {
            auto& c = self->state.copies[epoch];
            c.done = true;
            c.rows = rows;
            if (c.waiters.empty()) return;  // copied(epoch) picks it up later
            for (auto& p : c.waiters) p.deliver(rows);
            self->state.copies.erase(epoch);
          },
          [self, epoch](caf::error& err) {
            auto& c = self->state.copies[epoch];
            c.done = true;
            c.failure = err;
            if (c.waiters.empty()) return;
            for (auto& p : c.waiters) p.deliver(err);
            self->state.copies.erase(epoch);
          });
  cut.promise.deliver(ok_atom::value);
}

void send_flush(shard_pointer self, uint64_t seq, bool retry) {
  auto& st = self->state;
  st.metrics.flush_started[seq] = st.config.clock->now_seconds();
  self->request(st.flusher, caf::infinite, flush_atom::value, seq, st.in_flight.at(seq))
      .then(
          [self](uint64_t done, double write_seconds) {
            auto& s = self->state;
            auto& m = s.metrics;
            m.flush.observe(s.config.clock->now_seconds() - m.flush_started[done]);
            m.flush_started.erase(done);
            m.lmdb_write.observe(write_seconds);
            ++m.flush_batches;
            m.flush_bytes += s.in_flight[done].keys.size() * s.config.table.layout.encoded_bytes();
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
            if (self->state.cut) {
              self->state.cut->promise.deliver(self->state.flush_error);
              self->state.cut.reset();
            }
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
  if (st.draining && st.in_flight.empty() && wb.queued_rows() == 0 && st.cut) take_cut(self);
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
  st.read_timer = std::make_unique<lmdb_read_timer>(st.config.clock, &st.metrics.lmdb_read);
  st.chain->set_observer(st.read_timer.get());
  // A restored shard: the TTL clock and admission sketch of the checkpoint.
  st.chain->set_tick(st.config.restored_tick);
  if (auto* sketch = st.chain->sketch();
      sketch && st.config.restored_sketch.size() == sketch->counters().size())
    sketch->load(st.config.restored_sketch);
  self->link_to(flusher);
  const row_layout layout = st.config.table.layout;
  return {
      [self, layout](pull_atom, const std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
        const double start = self->state.config.clock->now_seconds();
        pull_reply reply;
        reply.rows.keys = keys;
        reply.rows.records.resize(keys.size() * layout.record_bytes());
        auto s = self->state.chain->lookup(keys, rows_of(reply.rows, layout), &reply.admitted);
        if (!s) return to_caf(s.err());
        maybe_flush(self);
        self->state.metrics.pull.observe(self->state.config.clock->now_seconds() - start);
        return reply;
      },
      [self, layout](push_atom, const push_request& req) -> caf::result<push_reply> {
        auto& chain = *self->state.chain;
        const double start = self->state.config.clock->now_seconds();
        if (req.grads.size() != req.keys.size() * layout.dim)
          return caf::make_error(caf::sec::runtime_error,
                                 "push of " + std::to_string(req.keys.size()) + " keys carries " +
                                     std::to_string(req.grads.size()) + " floats, expected dim " +
                                     std::to_string(layout.dim) + " each");
        self->state.max_push_epoch = std::max(self->state.max_push_epoch, req.epoch);
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
        if (auto& sink = self->state.config.updates)
          sink->rows_updated(layout, reply.rows.keys, rows_of(reply.rows, layout));
        maybe_flush(self);
        auto& m = self->state.metrics;
        ++m.pushes;
        m.push_rows += req.keys.size();
        m.push.observe(self->state.config.clock->now_seconds() - start);
        return reply;
      },
      [self, layout](write_back_atom, const row_batch& rows) -> caf::result<ok_atom> {
        if (!well_formed(rows, layout))
          return caf::make_error(caf::sec::runtime_error, "malformed write-back batch");
        auto s = self->state.chain->write_back(rows.keys, rows_of(rows, layout));
        if (!s) return to_caf(s.err());
        // Serving ignores a row not newer than its copy, so an ignored
        // (older) write-back row is harmless to publish.
        if (auto& sink = self->state.config.updates)
          sink->rows_updated(layout, rows.keys, rows_of(rows, layout));
        self->state.metrics.write_back_rows += rows.keys.size();
        maybe_flush(self);
        return ok_atom::value;
      },
      [self, layout](prefetch_atom, const std::vector<uint64_t>& keys) {
        ++self->state.metrics.prefetch_requests;
        self->state.metrics.prefetch_rows += keys.size();
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
      [self, layout](checkpoint_atom, uint64_t epoch,
                     const std::string& dir) -> caf::result<ok_atom> {
        auto& st = self->state;
        if (st.flush_error) return st.flush_error;
        if (st.cut)
          return caf::make_error(caf::sec::invalid_argument,
                                 "shard " + std::to_string(st.config.index) +
                                     ": a checkpoint cut is already in progress");
        if (st.max_push_epoch > epoch)
          return caf::make_error(caf::sec::runtime_error,
                                 "shard " + std::to_string(st.config.index) + ": checkpoint " +
                                     std::to_string(epoch) + " cut after a push of epoch " +
                                     std::to_string(st.max_push_epoch) +
                                     " arrived: the cut would not be consistent");
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (ec)
          return caf::make_error(caf::sec::runtime_error,
                                 "cannot create checkpoint directory " + dir + ": " + ec.message());
        // Every dirty DRAM row joins the write-behind queue, all of it is
        // flushed, then take_cut() queues the copy.
        row_buffer dirty(layout);
        auto s = st.chain->dram().take_dirty(dirty);
        if (!s) return to_caf(s.err());
        row_buffer none(layout);
        s = st.chain->write_behind().store(dirty.keys(), dirty.rows(), true, none);
        if (!s) return to_caf(s.err());
        auto promise = self->make_response_promise<ok_atom>();
        st.cut = pending_cut{epoch, dir, promise};
        st.draining = true;
        maybe_flush(self);
        return promise;
      },
      [self](copied_atom, uint64_t epoch) -> caf::result<uint64_t> {
        auto& st = self->state;
        auto it = st.copies.find(epoch);
        if (it == st.copies.end())
          return caf::make_error(caf::sec::invalid_argument,
                                 "shard " + std::to_string(st.config.index) +
                                     ": no checkpoint copy of epoch " + std::to_string(epoch));
        if (it->second.done) {
          auto c = std::move(it->second);
          st.copies.erase(it);
          if (c.failure) return c.failure;
          return c.rows;
        }
        auto promise = self->make_response_promise<uint64_t>();
        it->second.waiters.push_back(promise);
        return promise;
      },
      [self](stats_atom) -> tier_stats {
        auto& st = self->state;
        auto& chain = *st.chain;
        const auto& cs = chain.stats();
        const auto& dram = chain.dram();
        const auto& m = st.metrics;
        tier_stats out;
        out.name = "shard " + std::to_string(st.config.index);
        out.kind = "shard";
        out.index = st.config.index;
        // Lookups of the chain: served by DRAM, or missed it (served below
        // DRAM or by the initializer).
        out.hits = cs.hits_per_tier.empty() ? 0 : cs.hits_per_tier[0];
        out.misses = cs.initialized;
        for (size_t t = 1; t < cs.hits_per_tier.size(); ++t) out.misses += cs.hits_per_tier[t];
        out.lookups = out.hits + out.misses;
        out.inserts = cs.promoted + (cs.initialized - cs.not_admitted);
        out.evictions = dram.stats().evictions;
        out.flushed_rows = cs.flushed_rows;
        out.flush_batches = m.flush_batches;
        out.flush_bytes = m.flush_bytes;
        out.write_back_rows = m.write_back_rows;
        out.prefetch_requests = m.prefetch_requests;
        out.prefetch_rows = m.prefetch_rows;
        out.admission_rejections = cs.not_admitted + cs.dropped_pushes;
        out.ttl_expirations = dram.stats().expired;
        out.pushes = m.pushes;
        out.push_rows = m.push_rows;
        out.chain_hits = cs.hits_per_tier;
        out.initialized = cs.initialized;
        out.rows = dram.size();
        out.bytes = dram.memory_bytes();
        out.capacity_rows = dram.capacity_rows();
        out.capacity_bytes = st.config.dram.capacity_bytes;
        out.lmdb_rows = chain.durable() ? chain.durable()->size() : 0;
        out.flushes_in_flight = st.in_flight.size();
        out.write_behind_rows = chain.write_behind().size();
        out.mailbox_depth = self->mailbox().size();
        out.latencies = {make_snapshot("pull", m.pull), make_snapshot("push", m.push),
                         make_snapshot("flush", m.flush), make_snapshot("lmdb_read", m.lmdb_read),
                         make_snapshot("lmdb_write", m.lmdb_write)};
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
  auto flusher =
      spawn_ssd_flush(system, std::move(*writer), config.flush_on_own_thread, config.clock);
  auto chain = std::make_shared<std::unique_ptr<tier_chain>>(std::make_unique<tier_chain>(
      config.table, config.chain, std::make_unique<dram_tier>(config.table.layout, config.dram),
      std::move(*reader)));
  return system.spawn(shard_behavior, config, chain, flusher);
}

}  // namespace strata::actors
