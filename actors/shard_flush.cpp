// The shard's flush/drain/cut pipeline: write-behind batches to ssd_flush,
// the drain's sync, the checkpoint cut and the erase after a commit.
#include "actors/shard_internal.hpp"

namespace strata::actors::shard_detail {

double stall_seconds(const shard_state& st) {
  const auto& m = st.metrics;
  return m.write_behind_stall_seconds +
         (m.stalled_since ? st.config.clock->now_seconds() - *m.stalled_since : 0.0);
}

void end_stall(shard_state& st) {
  st.metrics.write_behind_stall_seconds = stall_seconds(st);
  st.metrics.stalled_since.reset();
}

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

// After a commit, once the write-behind is flushed: the rows of partitions
// owned elsewhere leave LMDB; then the commit is answered.
void erase_foreign(shard_pointer self) {
  auto& st = self->state;
  st.erase_pending = false;
  auto partitions = std::move(st.erase_partitions);
  st.erase_partitions.clear();
  auto answer = [self](caf::error err) {
    auto waiters = std::move(self->state.commit_waiters);
    self->state.commit_waiters.clear();
    for (auto& p : waiters) {
      if (err)
        p.deliver(err);
      else
        p.deliver(ok_atom::value);
    }
  };
  if (partitions.empty()) {
    answer({});
    return;
  }
  self->request(st.flusher, caf::infinite, erase_atom::value, std::move(partitions))
      .then(
          [self, answer](uint64_t) {
            note_landed(self->state, nullptr);
            answer({});
          },
          [self, answer](caf::error& err) {
            note_landed(self->state, nullptr);
            answer(err);
          });
}

void send_flush(shard_pointer self, uint64_t seq, row_batch batch) {
  auto& st = self->state;
  st.metrics.flush_started[seq] = st.config.clock->now_seconds();
  st.in_flight.emplace(seq, batch.keys);
  self->request(st.flusher, caf::infinite, flush_atom::value, seq, std::move(batch))
      .then(
          [self](uint64_t done, double write_seconds) {
            auto& s = self->state;
            if (s.fatal) return;
            auto& m = s.metrics;
            m.flush.observe(s.config.clock->now_seconds() - m.flush_started[done]);
            m.flush_started.erase(done);
            m.lmdb_write.observe(write_seconds);
            ++m.flush_batches;
            auto landed = s.in_flight.find(done);
            if (landed != s.in_flight.end()) {
              m.flush_bytes += landed->second.size() * s.config.table.layout.encoded_bytes();
              note_landed(s, &landed->second);
              s.in_flight.erase(landed);
            }
            s.chain->flushed(done);
            maybe_flush(self);
          },
          // ssd_flush retried the batch in order; it still failed.
          [self](caf::error& err) { fail_stop(self, err); });
}

std::string message_of(const caf::error& err) {
  const auto& context = err.context();
  if (context.match_elements<std::string>()) return context.get_as<std::string>(0);
  return caf::to_string(err);
}

void fail_stop(shard_pointer self, const caf::error& cause) {
  auto& st = self->state;
  if (st.fatal) return;
  const std::string text = "shard " + std::to_string(st.config.index) + " fail-stopped (LMDB " +
                           st.config.lmdb.directory.string() + "): " + message_of(cause);
  st.fatal = caf::make_error(caf::sec::runtime_error, text);
  caf::aout(self) << "strata: fatal: " << text << "\n";
  for (auto& p : st.drain_waiters) p.deliver(st.fatal);
  st.drain_waiters.clear();
  st.draining = false;
  if (st.cut) {
    st.cut->promise.deliver(st.fatal);
    st.cut.reset();
  }
  for (auto& p : st.commit_waiters) p.deliver(st.fatal);
  st.commit_waiters.clear();
  st.erase_pending = false;
  if (st.out && st.out->copy_promise) {
    st.out->copy_promise->deliver(st.fatal);
    st.out->copy_promise.reset();
  }
  for (auto& p : st.parked) p.promise.deliver(st.fatal);
  st.parked.clear();
  st.parked_cold.clear();
  // Nothing more is written: the write-behind stops here and never grows.
  st.in_flight.clear();
  end_stall(st);  // held requests now get the error
}

namespace {

bool over_queue_bound(const shard_state& st) {
  const size_t bound = size_t{st.config.max_queued_flush_batches} * st.config.flush_batch_rows;
  return st.chain->write_behind().queued_rows() >= bound;
}

}  // namespace

bool write_behind_full(shard_pointer self) {
  auto& st = self->state;
  if (st.fatal || !over_queue_bound(st)) return false;
  // Whatever grew the queue (a read's install, a duplicate push's lookup)
  // may not have sent a flush: send what can go now, so a held request
  // always has a flush in flight to wait for.
  maybe_flush(self);
  if (st.fatal || !over_queue_bound(st)) return false;
  auto& m = st.metrics;
  if (!m.stalled_since) {
    ++m.write_behind_stalls;
    m.stalled_since = st.config.clock->now_seconds();
  }
  return true;
}

// Sends write-behind batches to ssd_flush: when enough rows are queued (or
// while draining), and while fewer than max_flushes_in_flight are out.
void maybe_flush(shard_pointer self) {
  auto& st = self->state;
  if (st.fatal) return;
  auto& wb = st.chain->write_behind();
  const bool flush_all = st.draining || st.erase_pending;
  while (st.in_flight.size() < st.config.max_flushes_in_flight && wb.queued_rows() > 0 &&
         (flush_all || wb.queued_rows() >= st.config.flush_batch_rows)) {
    // The rows are copied once, from the write-behind into the message.
    const size_t rb = st.config.table.layout.record_bytes();
    row_batch batch;
    batch.keys.reserve(wb.queued_rows());
    batch.records.reserve(wb.queued_rows() * rb);
    uint64_t seq = 0;
    const bool taken = st.chain->take_flush_into(
        [&batch, rb](uint64_t key, const std::byte* rec) {
          batch.keys.push_back(key);
          const auto* bytes = reinterpret_cast<const uint8_t*>(rec);
          batch.records.insert(batch.records.end(), bytes, bytes + rb);
        },
        seq);
    if (!taken) break;
    send_flush(self, seq, std::move(batch));
  }
  st.metrics.write_behind_peak_rows =
      std::max<uint64_t>(st.metrics.write_behind_peak_rows, wb.size());
  if (!over_queue_bound(st)) end_stall(st);
  if (st.draining && st.in_flight.empty() && wb.queued_rows() == 0 && st.cut) take_cut(self);
  if (st.erase_pending && st.in_flight.empty() && wb.queued_rows() == 0) erase_foreign(self);
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

}  // namespace strata::actors::shard_detail
