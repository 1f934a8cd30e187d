// The shard's side of scaling: routing, forwarding and the migration copy.
#include "actors/shard_internal.hpp"

namespace strata::actors::shard_detail {

// --- scaling: routing, forwarding, migration -----------------------------------

// The shard that serves `key` if it is not this one (null: this one). A
// fenced partition goes to its destination; after a commit, the map says.
caf::actor owner_elsewhere(const shard_state& st, uint64_t key) {
  if (!st.routing && !(st.out && st.out->fenced)) return {};
  const uint32_t p = partition_of(key, st.config.lmdb.partitions);
  if (st.out && st.out->fenced)
    if (auto it = st.out->destination.find(p); it != st.out->destination.end()) return it->second;
  if (st.routing && st.routing->owners[p] != st.config.index)
    return st.routing->shards[st.routing->owners[p]];
  return {};
}

key_split split_keys(const shard_state& st, const std::vector<uint64_t>& keys,
                     const caf::actor_addr& from) {
  key_split out;
  const bool from_source = from && std::find(st.migrating_in.begin(), st.migrating_in.end(),
                                             from) != st.migrating_in.end();
  for (uint32_t i = 0; i < keys.size(); ++i) {
    caf::actor other = owner_elsewhere(st, keys[i]);
    if (!other || (from_source && other.address() == from)) {
      out.local.push_back(i);
      continue;
    }
    auto it = std::find_if(out.remote.begin(), out.remote.end(),
                           [&](const auto& r) { return r.first == other; });
    if (it == out.remote.end()) {
      out.remote.emplace_back(other, std::vector<uint32_t>{});
      it = out.remote.end() - 1;
    }
    it->second.push_back(i);
  }
  return out;
}

std::vector<uint64_t> pick(const std::vector<uint64_t>& keys, const std::vector<uint32_t>& at) {
  std::vector<uint64_t> out;
  out.reserve(at.size());
  for (uint32_t i : at) out.push_back(keys[i]);
  return out;
}

// Copy phase: records keys of moving partitions that this shard serves.
void touch(shard_state& st, const std::vector<uint64_t>& keys) {
  if (!st.out || st.out->fenced) return;
  for (uint64_t k : keys)
    if (st.out->destination.count(partition_of(k, st.config.lmdb.partitions)))
      st.out->touched.insert(k);
}

namespace {

// Sends one copied batch as migrate_in; its acknowledgement frees a window slot.
void send_batch(shard_pointer self, const caf::actor& destination, row_batch batch) {
  auto& m = *self->state.out;
  m.copied.rows += batch.keys.size();
  m.copied.bytes += batch.records.size();
  ++m.in_flight;
  self->request(caf::actor_cast<shard_actor>(destination), caf::infinite, migrate_in_atom::value,
                std::move(batch))
      .then(
          [self](ok_atom) {
            if (!self->state.out) return;
            --self->state.out->in_flight;
            copy_next(self);
          },
          [self](caf::error& err) {
            auto& o = self->state.out;
            if (o && o->copy_promise) {
              o->copy_promise->deliver(err);
              o->copy_promise.reset();
            }
          });
}

// A one-shot timer: answers after `nanoseconds` on the actor clock (the
// test scheduler's simulated one in deterministic tests), so a paced copy
// waits without blocking the shard's thread: pulls and pushes go on.
caf::behavior copy_timer(caf::event_based_actor* self) {
  return {[self](uint64_t nanoseconds) -> caf::result<ok_atom> {
    auto promise = self->make_response_promise<ok_atom>();
    self->delayed_send(self, std::chrono::nanoseconds(nanoseconds), ok_atom::value);
    self->become([self, promise](ok_atom) mutable {
      promise.deliver(ok_atom::value);
      self->quit();
    });
    return promise;
  }};
}

// The copy rate limit: a batch of `rows` goes once the copy's start plus
// (rows copied so far + rows) / limit has passed on the actor clock;
// otherwise it waits in m.paced for a timer. True if it was held back.
bool pace(shard_pointer self, const caf::actor& destination, row_batch& batch) {
  auto& st = self->state;
  auto& m = *st.out;
  const uint64_t limit = st.config.migration_rows_per_s;
  if (limit == 0) return false;
  const auto now = self->clock().now();
  if (!m.copy_start) m.copy_start = now;
  const auto due = *m.copy_start + std::chrono::nanoseconds(static_cast<int64_t>(
                                       static_cast<double>(m.copied.rows + batch.keys.size()) *
                                       1e9 / static_cast<double>(limit)));
  if (due <= now) return false;
  m.paced.emplace(destination, std::move(batch));
  const uint64_t epoch = m.order.epoch;
  auto timer = self->spawn(copy_timer);
  self->request(timer, caf::infinite,
                static_cast<uint64_t>(std::chrono::nanoseconds(due - now).count()))
      .then([self, epoch](ok_atom) {
        auto& o = self->state.out;
        if (!o || o->order.epoch != epoch || !o->paced || !o->copy_promise) return;
        auto [to, held] = std::move(*o->paced);
        o->paced.reset();
        send_batch(self, to, std::move(held));
        copy_next(self);
      });
  return true;
}

}  // namespace

// Streams the next partitions of the copy phase (a window of batches in
// flight; one LMDB range scan per partition, so other messages interleave),
// paced by shard_config::migration_rows_per_s.
void copy_next(shard_pointer self) {
  auto& st = self->state;
  if (!st.out || !st.out->copy_promise || st.out->paced) return;
  auto& m = *st.out;
  const size_t record_bytes = st.config.table.layout.record_bytes();
  while (m.in_flight < migration_window && m.next < m.order.partitions.size()) {
    const uint32_t partition = m.order.partitions[m.next];
    const caf::actor destination = m.order.destinations[m.next];
    ++m.next;
    row_batch batch;
    auto s = st.chain->durable()->range_scan(partition, [&](uint64_t key, const std::byte* rec) {
      batch.keys.push_back(key);
      const auto* bytes = reinterpret_cast<const uint8_t*>(rec);
      batch.records.insert(batch.records.end(), bytes, bytes + record_bytes);
    });
    if (!s) {
      m.copy_promise->deliver(to_caf(s.err()));
      m.copy_promise.reset();
      return;
    }
    if (batch.keys.empty()) continue;
    if (pace(self, destination, batch)) return;
    send_batch(self, destination, std::move(batch));
  }
  if (m.next == m.order.partitions.size() && m.in_flight == 0) {
    m.copy_promise->deliver(m.copied);
    m.copy_promise.reset();
  }
}
// The newest row of each key, walking DRAM, write-behind and LMDB without
// promoting or initializing; keys found nowhere are skipped.
expected<row_buffer> newest_rows(tier_chain& chain, const std::vector<uint64_t>& keys) {
  const row_layout& layout = chain.table().layout;
  row_buffer out(layout);
  std::vector<uint64_t> remaining = keys;
  std::vector<std::byte> scratch;
  for (row_store* tier : chain.tiers()) {
    if (remaining.empty()) break;
    scratch.resize(remaining.size() * layout.record_bytes());
    std::vector<uint32_t> misses;
    STRATA_TRY(tier->lookup(remaining, {scratch.data(), layout.record_bytes()}, misses));
    std::vector<uint64_t> next;
    size_t m = 0;
    for (uint32_t j = 0; j < remaining.size(); ++j) {
      if (m < misses.size() && misses[m] == j) {
        ++m;
        next.push_back(remaining[j]);
      } else {
        out.append(remaining[j], scratch.data() + size_t{j} * layout.record_bytes());
      }
    }
    remaining = std::move(next);
  }
  return out;
}

// DRAM holds the newest copy, then the write-behind buffer, then LMDB:
// the first tier a key is found in wins.
expected<row_batch> partition_rows(shard_state& st, uint32_t partition) {
  const uint32_t partitions = st.config.lmdb.partitions;
  const size_t record_bytes = st.config.table.layout.record_bytes();
  row_batch out;
  std::unordered_set<uint64_t> seen;
  auto take = [&](uint64_t key, const std::byte* rec) {
    if (partition_of(key, partitions) != partition || !seen.insert(key).second) return;
    out.keys.push_back(key);
    const auto* bytes = reinterpret_cast<const uint8_t*>(rec);
    out.records.insert(out.records.end(), bytes, bytes + record_bytes);
  };
  STRATA_TRY(st.chain->dram().dump(take));
  STRATA_TRY(st.chain->write_behind().dump(take));
  STRATA_TRY(st.chain->durable()->range_scan(partition, take));
  return out;
}

}  // namespace strata::actors::shard_detail
