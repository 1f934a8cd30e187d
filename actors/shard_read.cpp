// Reads off the shard's thread: a pull whose keys are all above LMDB (DRAM
// or the write-behind buffer) is answered at once; one with cold keys
// copies its warm rows now, sends the cold keys to the shard's reader and
// waits, parked, while the shard answers other requests. The reader's rows
// are installed (promoted into DRAM through the chain, as a read on this
// thread would) unless the key's copy may have changed since the read:
// a key above LMDB now has the newer copy, and a key whose flush landed
// after the read was sent may have been read before the flush's commit.
#include "actors/shard_internal.hpp"

namespace strata::actors::shard_detail {
namespace {

// Looks up keys[at[j]] for every j through the chain into reply's rows at
// the same positions (reply.rows.keys holds every key).
caf::error lookup_at(shard_state& st, const std::vector<uint64_t>& keys,
                     const std::vector<uint32_t>& at, pull_reply& reply) {
  const row_layout& layout = st.config.table.layout;
  const size_t rb = layout.record_bytes();
  std::vector<uint64_t> sub = pick(keys, at);
  std::vector<uint8_t> records(sub.size() * rb);
  std::vector<uint8_t> admitted;
  auto s = st.chain->lookup(sub, {reinterpret_cast<std::byte*>(records.data()), rb}, &admitted);
  if (!s) return to_caf(s.err());
  for (size_t j = 0; j < at.size(); ++j) {
    std::memcpy(reply.rows.records.data() + size_t{at[j]} * rb, records.data() + j * rb, rb);
    reply.admitted[at[j]] = admitted[j];
  }
  return {};
}

// Splits keys into those above LMDB (warm_at) and the others (cold_at).
status classify(shard_state& st, const std::vector<uint64_t>& keys) {
  auto& dram = st.chain->dram();
  st.warm_at.clear();
  st.cold_at.clear();
  st.probe_keys.clear();
  std::vector<uint32_t>& below = st.probe_misses;  // positions not in DRAM
  std::vector<uint32_t> below_at;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    if (dram.contains(keys[i])) {
      st.warm_at.push_back(i);
    } else {
      st.probe_keys.push_back(keys[i]);
      below_at.push_back(i);
    }
  }
  if (below_at.empty()) return {};
  below.clear();
  auto& wb = st.chain->write_behind();
  if (wb.size() == 0) {
    for (uint32_t j = 0; j < below_at.size(); ++j) below.push_back(j);
  } else {
    st.probe.clear();
    for (uint64_t k : st.probe_keys) st.probe.append(k);
    STRATA_TRY(wb.lookup(st.probe_keys, st.probe.rows(), below));
  }
  size_t m = 0;
  for (uint32_t j = 0; j < below_at.size(); ++j) {
    if (m < below.size() && below[m] == j) {
      ++m;
      st.cold_at.push_back(below_at[j]);
    } else {
      st.warm_at.push_back(below_at[j]);
    }
  }
  return {};
}

void serve(shard_pointer self, parked_pull& p) {
  auto& st = self->state;
  for (uint64_t k : p.cold_keys) {
    uint32_t* n = st.parked_cold.find(k);
    if (n != nullptr && --*n == 0) st.parked_cold.erase(k);
  }
  if (st.fatal) {
    p.promise.deliver(st.fatal);
    return;
  }
  const auto& hits = st.chain->stats().hits_per_tier;
  const uint64_t dram_hits = hits.empty() ? 0 : hits[0];
  if (auto err = lookup_at(st, p.reply.rows.keys, p.cold, p.reply)) {
    p.promise.deliver(std::move(err));
    return;
  }
  if (!hits.empty()) st.metrics.installed_rows_served += hits[0] - dram_hits;
  st.metrics.pull.observe(st.config.clock->now_seconds() - p.started);
  p.promise.deliver(std::move(p.reply));
}

// Answers the parked pulls that `due` picks, in arrival order.
template <class Pick>
void serve_parked_if(shard_pointer self, Pick due) {
  auto& st = self->state;
  bool served = false;
  for (auto it = st.parked.begin(); it != st.parked.end();) {
    if (!due(*it)) {
      ++it;
      continue;
    }
    parked_pull p = std::move(*it);
    it = st.parked.erase(it);
    serve(self, p);
    served = true;
  }
  if (served) maybe_flush(self);
}

// Answers the parked pulls whose reads are all done, in arrival order.
void serve_ready(shard_pointer self) {
  auto& st = self->state;
  const uint64_t done = st.reads.empty() ? st.next_read - 1 : st.reads.front().id - 1;
  serve_parked_if(self, [done](const parked_pull& p) { return p.read <= done; });
}

bool stale(const shard_state& st, uint64_t key, uint64_t sent_at) {
  if (st.erased_at > sent_at) return true;
  const uint64_t* at = st.flushed_at.find(key);
  return at != nullptr && *at > sent_at;
}

// The reader answered read `id` (found: null on an error).
void read_done(shard_pointer self, uint64_t id, const std::vector<uint64_t>& keys,
               const row_batch* found) {
  auto& st = self->state;
  STRATA_ASSERT(!st.reads.empty() && st.reads.front().id == id,
                "shard reads answered out of order");
  const uint64_t sent_at = st.reads.front().flush_gen;
  st.reads.pop_front();
  for (uint64_t k : keys)
    if (const uint64_t* r = st.pending_reads.find(k); r != nullptr && *r == id)
      st.pending_reads.erase(k);
  if (found != nullptr && !st.fatal) {
    // Stage the rows still current, then promote them through the chain
    // (DRAM, counted as LMDB hits; keys not stored get their initializer
    // row), so the waiting pulls find them in DRAM.
    lmdb_tier* durable = st.chain->durable();
    const size_t rb = st.config.table.layout.record_bytes();
    std::vector<uint64_t> current;
    current.reserve(keys.size());
    auto s = classify(st, keys);  // cold_at: positions not above LMDB now
    if (s) {
      size_t j = 0, c = 0;  // found is a subsequence of keys (unique), in order
      for (uint32_t i = 0; i < keys.size(); ++i) {
        const bool hit = j < found->keys.size() && found->keys[j] == keys[i];
        const std::byte* rec =
            hit ? reinterpret_cast<const std::byte*>(found->records.data()) + j * rb : nullptr;
        if (hit) ++j;
        const bool cold = c < st.cold_at.size() && st.cold_at[c] == i;
        if (cold) ++c;
        if (!cold || stale(st, keys[i], sent_at)) continue;
        durable->stage(keys[i], rec);
        current.push_back(keys[i]);
      }
      if (!current.empty()) {
        std::vector<std::byte> scratch(current.size() * rb);
        s = st.chain->lookup(current, {scratch.data(), rb}, nullptr);
      }
      durable->clear_staged();
    }
    if (!s)
      caf::aout(self) << "strata: shard " << st.config.index
                      << ": installing read rows failed: " << s.err().to_string() << "\n";
  }
  if (st.reads.empty()) st.flushed_at.clear();
  maybe_flush(self);  // the install may have evicted dirty rows
  serve_ready(self);
}

// Sends the cold keys not already being read to the reader; returns the
// last read the keys wait for.
uint64_t read_cold(shard_pointer self, const std::vector<uint64_t>& cold_keys) {
  auto& st = self->state;
  uint64_t last = 0;
  std::vector<uint64_t> fresh;
  const uint64_t id = st.next_read;
  for (uint64_t k : cold_keys) {
    auto [at, first] = st.pending_reads.try_emplace(k, id);
    if (first) fresh.push_back(k);
    last = std::max(last, *at);
  }
  if (fresh.empty()) return last;
  ++st.next_read;
  st.reads.push_back({id, st.flush_gen});
  self->request(st.reader, caf::infinite, shard_read_atom::value, fresh)
      .then([self, id, fresh](row_batch& found) { read_done(self, id, fresh, &found); },
            [self, id, fresh](caf::error& err) {
              caf::aout(self) << "strata: shard " << self->state.config.index << ": read of "
                              << fresh.size() << " keys failed: " << message_of(err)
                              << " (the waiting pulls read on the shard's thread)\n";
              read_done(self, id, fresh, nullptr);
            });
  return id;
}

}  // namespace

void count_pull(shard_state& st, size_t rows, uint64_t ssd_rows, bool ahead) {
  ++st.metrics.pulls;
  if (ahead) {
    ++st.metrics.prefetch_requests;
    st.metrics.prefetch_rows += rows;
    st.metrics.prefetch_ssd_rows += ssd_rows;
    return;
  }
  st.metrics.lookup_rows += rows;
  st.metrics.lookup_ssd_wait_rows += ssd_rows;
  if (ssd_rows > 0) ++st.metrics.lmdb_waits;
}

caf::result<pull_reply> pull_async(shard_pointer self, std::vector<uint64_t> owned,
                                   bool ahead) {
  auto& st = self->state;
  const double start = st.config.clock->now_seconds();
  parked_pull p;
  p.started = start;
  // The request's key vector becomes the reply's (the requester gets its
  // buffer back); `keys` stays valid while p is moved into st.parked below.
  p.reply.rows.keys = std::move(owned);
  const std::vector<uint64_t>& keys = p.reply.rows.keys;
  touch(st, keys);
  if (auto s = classify(st, keys); !s) return to_caf(s.err());
  p.reply.rows.records.resize(keys.size() * st.config.table.layout.record_bytes());
  p.reply.admitted.assign(keys.size(), 1);
  count_pull(st, keys.size(), st.cold_at.size(), ahead);
  if (st.cold_at.empty()) {
    // Every row is above LMDB: answered now.
    auto s =
        st.chain->lookup(keys, rows_of(p.reply.rows, st.config.table.layout), &p.reply.admitted);
    if (!s) return to_caf(s.err());
    maybe_flush(self);
    st.metrics.pull.observe(st.config.clock->now_seconds() - start);
    return std::move(p.reply);
  }
  p.cold = st.cold_at;
  p.cold_keys = pick(keys, p.cold);
  if (!st.warm_at.empty()) {
    std::vector<uint32_t> warm = st.warm_at;
    if (auto err = lookup_at(st, keys, warm, p.reply)) return err;
  }
  for (uint64_t k : p.cold_keys) ++*st.parked_cold.try_emplace(k, 0).first;
  p.read = read_cold(self, p.cold_keys);
  p.client = self->current_sender();
  p.promise = self->make_response_promise<pull_reply>();
  auto promise = p.promise;
  st.parked.push_back(std::move(p));
  maybe_flush(self);
  return promise;
}

void prefetch_async(shard_pointer self, const std::vector<uint64_t>& keys) {
  auto& st = self->state;
  if (auto s = classify(st, keys); !s) {
    caf::aout(self) << "strata: prefetch failed: " << s.err().to_string() << "\n";
    return;
  }
  if (st.cold_at.empty()) return;
  st.metrics.prefetch_ssd_rows += st.cold_at.size();
  read_cold(self, pick(keys, st.cold_at));
}

void settle_parked(shard_pointer self, std::span<const uint64_t> keys) {
  auto& st = self->state;
  if (st.parked.empty()) return;
  for (uint64_t k : keys)
    if (st.parked_cold.contains(k)) {
      settle_all_parked(self);
      return;
    }
  // The writer's own pulls: it must get their replies before the answer
  // to this write, as when every read was on this thread; a pass-mode
  // cache that evicted and wrote back a row would otherwise take a late
  // pull's older copy of it for current (ExactSumThreaded/Pass).
  const caf::strong_actor_ptr client = self->current_sender();
  serve_parked_if(self, [&client](const parked_pull& p) { return p.client == client; });
}

void settle_all_parked(shard_pointer self) {
  auto& st = self->state;
  if (st.parked.empty()) return;
  auto parked = std::move(st.parked);
  st.parked.clear();
  for (auto& p : parked) serve(self, p);
  maybe_flush(self);
}

void note_landed(shard_state& st, const std::vector<uint64_t>* keys) {
  ++st.flush_gen;
  if (keys == nullptr) {
    st.erased_at = st.flush_gen;
    if (auto* d = st.chain->durable()) d->clear_staged();
    return;
  }
  if (auto* d = st.chain->durable()) d->unstage(*keys);
  if (st.reads.empty()) return;
  for (uint64_t k : *keys) *st.flushed_at.try_emplace(k, 0).first = st.flush_gen;
}

}  // namespace strata::actors::shard_detail
