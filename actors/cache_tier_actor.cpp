#include "actors/cache_tier_actor.hpp"

#include "actors/cache_internal.hpp"

namespace strata::actors {
namespace cache_detail {

std::shared_ptr<pending_fill> acquire_fill(cache_state& st) {
  for (auto& f : st.fills) {
    if (f.use_count() != 1) continue;  // a lookup, prefetch or pull still holds it
    f->positions.clear();
    f->not_admitted.clear();
    f->outstanding = 0;
    f->promise = {};
    f->reply = false;
    f->ahead = false;
    f->then = nullptr;
    f->fail = nullptr;
    f->started = 0;
    return f;
  }
  auto f = std::make_shared<pending_fill>();
  // Bounded: fills beyond the list are used once (a burst of prefetches).
  if (st.fills.size() < 16) st.fills.push_back(f);
  return f;
}

void check_flush_waiters(cache_pointer self) {
  auto& st = self->state;
  if (st.write_backs_in_flight > 0 || st.flush_waiters.empty()) return;
  // Rows were lost: never ok after a fail-stop.
  for (auto& p : st.flush_waiters) {
    if (st.fatal)
      p.deliver(st.fatal);
    else
      p.deliver(ok_atom::value);
  }
  st.flush_waiters.clear();
}

void pin(cache_pointer self, const std::vector<uint64_t>& keys) {
  for (uint64_t k : keys) ++self->state.pinned[k];
}

// Releases the evicted rows of `keys` acknowledged while they were pinned.
void unpin(cache_pointer self, const std::vector<uint64_t>& keys) {
  auto& st = self->state;
  for (uint64_t k : keys) {
    auto it = st.pinned.find(k);
    if (it == st.pinned.end() || --it->second > 0) continue;
    st.pinned.erase(it);
    auto acked = st.acked_pinned.find(k);
    if (acked == st.acked_pinned.end()) continue;
    if (auto ev = st.evicted.find(k);
        ev != st.evicted.end() && meta_of(ev->second.data()).version == acked->second)
      st.evicted.erase(ev);
    st.acked_pinned.erase(acked);
  }
}

// Sends whole rows back to their shards, keeping them readable until acked.
void write_back(cache_pointer self, const std::vector<uint64_t>& keys,
                const std::vector<std::byte>& records) {
  auto& st = self->state;
  if (keys.empty()) return;
  const auto& groups = group_keys(st.map, keys, st.write_back_groups);
  for (uint32_t s = 0; s < groups.size(); ++s) {
    if (groups[s].empty()) continue;
    row_batch batch;
    batch.keys.reserve(groups[s].size());
    batch.records.resize(groups[s].size() * st.record_bytes);
    for (size_t j = 0; j < groups[s].size(); ++j) {
      const uint32_t i = groups[s][j];
      batch.keys.push_back(keys[i]);
      const std::byte* rec = records.data() + size_t{i} * st.record_bytes;
      std::memcpy(batch.records.data() + j * st.record_bytes, rec, st.record_bytes);
      st.evicted[keys[i]].assign(rec, rec + st.record_bytes);
    }
    st.stats.flushed_rows += batch.keys.size();
    ++st.write_backs_in_flight;
    send_write_back(self, st.shards[s], std::make_shared<row_batch>(std::move(batch)), 1);
  }
}

void send_write_back(cache_pointer self, shard_actor shard, std::shared_ptr<row_batch> sent,
                     int attempt) {
  self->request(shard, caf::infinite, write_back_atom::value, *sent)
      .then(
          [self, sent](ok_atom) {
            auto& st = self->state;
            for (size_t j = 0; j < sent->keys.size(); ++j) {
              auto it = st.evicted.find(sent->keys[j]);
              const auto* rec =
                  reinterpret_cast<const std::byte*>(sent->records.data()) + j * st.record_bytes;
              if (it == st.evicted.end() ||
                  meta_of(it->second.data()).version != meta_of(rec).version)
                continue;
              if (st.pinned.count(sent->keys[j]))
                st.acked_pinned[sent->keys[j]] = meta_of(rec).version;
              else
                st.evicted.erase(it);
            }
            --st.write_backs_in_flight;
            check_flush_waiters(self);
          },
          [self, shard, sent, attempt](caf::error& err) {
            auto& st = self->state;
            // The rows stay in `evicted` (readable) and are sent again: the
            // shard keeps the newer of two versions, so a repeat is harmless.
            if (attempt < write_back_attempts && !st.fatal) {
              send_write_back(self, shard, sent, attempt + 1);
              return;
            }
            --st.write_backs_in_flight;
            fail_stop(self, err, sent->keys.size());
          });
}

void fail_stop(cache_pointer self, const caf::error& cause, size_t rows) {
  auto& st = self->state;
  if (st.fatal) return;
  std::string text = st.stats.name + " fail-stopped: a write-back of " + std::to_string(rows) +
                     " rows failed " + std::to_string(write_back_attempts) + " times: ";
  const auto& context = cause.context();
  text += context.match_elements<std::string>() ? context.get_as<std::string>(0)
                                                : caf::to_string(cause);
  st.fatal = caf::make_error(caf::sec::runtime_error, text);
  caf::aout(self) << "strata: fatal: " << text << "\n";
  for (auto& p : st.flush_waiters) p.deliver(st.fatal);
  st.flush_waiters.clear();
}

// Inserts rows; evicted dirty rows go back to their shards. In async mode
// each record's access tick is stamped with this tier's batch clock: the
// time it was fetched, which the staleness check reads back.
void insert(cache_pointer self, const std::vector<uint64_t>& keys, std::byte* records, bool dirty) {
  auto& st = self->state;
  if (keys.empty()) return;
  if (st.mode == training_mode::async)
    for (size_t i = 0; i < keys.size(); ++i)
      meta_of(records + i * st.record_bytes).tick = static_cast<uint32_t>(st.clock);
  auto& ev_keys = st.ev_keys;
  auto& ev_rows = st.ev_rows;
  ev_keys.resize(keys.size());
  ev_rows.resize(keys.size() * st.record_bytes);
  cache_counts counts;
  const size_t before = st.cache->size();
  run_sync("cache insert", [&](cache_completion done) {
    st.cache->insert(host_span(std::span<const uint64_t>(keys)),
                     host_span(std::span<const std::byte>(records, keys.size() * st.record_bytes)),
                     dirty, host_span(std::span<uint64_t>(ev_keys)),
                     host_span(std::span<std::byte>(ev_rows)), counts, std::move(done));
  });
  // Every row pushed out, clean or dirty; only dirty ones are written back.
  // New keys took a slot each; the cache grew by fewer if some evicted.
  const size_t new_keys = keys.size() - counts.skipped - counts.replaced;
  st.stats.inserts += new_keys;
  st.stats.evictions += before + new_keys - st.cache->size();
  if (counts.evicted > 0) {
    ev_keys.resize(counts.evicted);
    ev_rows.resize(size_t{counts.evicted} * st.record_bytes);
    write_back(self, ev_keys, ev_rows);
  }
}

void finish_fill(cache_pointer self, const std::shared_ptr<pending_fill>& fill) {
  if (fill->outstanding > 0) return;
  if (fill->reply) {
    self->state.lookup_latency.observe(self->state.now() - fill->started);
    // The requester's keys go back with the rows (no copy); a pass-mode
    // push (`then`) still reads them.
    if (fill->then)
      fill->rows.keys = fill->keys;
    else
      fill->rows.keys = std::move(fill->keys);
    fill->promise.deliver(lookup_reply{std::move(fill->rows)});
  }
  if (fill->then) fill->then();
  // The fill goes back to st.fills: it must not keep the actor (the
  // promise) or a push (its callbacks) alive.
  fill->promise = {};
  fill->then = nullptr;
  fill->fail = nullptr;
}

// Serves `keys` into fill->rows from the cache, the evicted buffer and, for
// the rest, the shards (one pull per shard); calls finish_fill at the end.
void fill_rows(cache_pointer self, std::shared_ptr<pending_fill> fill, bool count_stats) {
  auto& st = self->state;
  const auto& keys = fill->keys;
  st.bytes_pool.refill(fill->rows.records, keys.size() * st.record_bytes);  // the last reply took its buffer
  fill->rows.records.resize(keys.size() * st.record_bytes);
  auto* out = reinterpret_cast<std::byte*>(fill->rows.records.data());
  auto& misses = fill->misses;
  misses.resize(keys.size());
  cache_counts counts;
  run_sync("cache query", [&](cache_completion done) {
    st.cache->query(host_span(std::span<const uint64_t>(keys)),
                    host_span(std::span<std::byte>(out, fill->rows.records.size())),
                    host_span(std::span<uint32_t>(misses)), counts, std::move(done));
  });
  misses.resize(counts.misses);
  if (st.mode == training_mode::async) {
    // Copies older than `staleness` lookups are refreshed from the shard.
    std::vector<uint32_t> stale;
    size_t m = 0;
    for (uint32_t i = 0; i < keys.size(); ++i) {
      if (m < misses.size() && misses[m] == i) {
        ++m;
        continue;
      }
      const uint64_t fetched = meta_of(out + size_t{i} * st.record_bytes).tick;
      if (fetched + st.config.staleness < st.clock) stale.push_back(i);
    }
    if (!stale.empty()) {
      misses.insert(misses.end(), stale.begin(), stale.end());
      std::sort(misses.begin(), misses.end());
    }
  }
  if (count_stats) {
    st.stats.hits += keys.size() - misses.size();
    st.stats.misses += misses.size();
  }
  fill->next_position.resize(keys.size());
  auto& wanted = fill->wanted;
  wanted.clear();
  for (uint32_t i : misses) {
    if (!st.evicted.empty()) {
      auto ev = st.evicted.find(keys[i]);
      if (ev != st.evicted.end()) {
        std::memcpy(out + size_t{i} * st.record_bytes, ev->second.data(), st.record_bytes);
        continue;
      }
    }
    auto [first, inserted] = fill->positions.try_emplace(keys[i], i);
    if (inserted) {
      fill->next_position[i] = pending_fill::no_position;
      wanted.push_back(keys[i]);
    } else {  // chained in front of the key's earlier positions
      fill->next_position[i] = *first;
      *first = i;
    }
  }
  if (fill->positions.empty()) {
    finish_fill(self, fill);
    return;
  }
  std::sort(wanted.begin(), wanted.end());
  const auto& groups = group_keys(st.map, wanted, st.fill_groups);
  for (uint32_t s = 0; s < groups.size(); ++s) {
    if (groups[s].empty()) continue;
    std::vector<uint64_t> part = st.keys_pool.take(groups[s].size());
    part.reserve(groups[s].size());
    for (uint32_t i : groups[s]) part.push_back(wanted[i]);
    ++fill->outstanding;
    const double sent = st.now();
    auto got = [self, fill, sent](pull_reply& reply) {
      auto& st = self->state;
      st.pull_latency.observe(st.now() - sent);
      auto* out = reinterpret_cast<std::byte*>(fill->rows.records.data());
      const auto* in = reinterpret_cast<const std::byte*>(reply.rows.records.data());
      // The shard's answer predates whatever this tier did to the
      // keys since the pull was sent: a row brought in by another
      // fill and updated here (still resident, or evicted dirty and
      // in the evicted buffer, whose release waits for an ack that
      // the shard sends after this reply). The newest copy is served
      // and inserted.
      auto& resident = fill->resident;
      auto& absent = fill->absent;
      resident.resize(reply.rows.records.size());
      absent.resize(reply.rows.keys.size());
      cache_counts q;
      run_sync("cache query", [&](cache_completion done) {
        st.cache->query(host_span(std::span<const uint64_t>(reply.rows.keys)),
                        host_span(std::span<std::byte>(resident)),
                        host_span(std::span<uint32_t>(absent)), q, std::move(done));
      });
      absent.resize(q.misses);
      auto& admitted_keys = fill->admitted_keys;
      auto& admitted_rows = fill->admitted_rows;
      admitted_keys.clear();
      admitted_rows.clear();
      size_t a = 0;
      for (size_t j = 0; j < reply.rows.keys.size(); ++j) {
        const std::byte* rec = in + j * st.record_bytes;
        const bool is_resident = !(a < absent.size() && absent[a] == j);
        if (!is_resident) ++a;
        const std::byte* cached = resident.data() + j * st.record_bytes;
        if (is_resident && meta_of(cached).version >= meta_of(rec).version) rec = cached;
        if (!st.evicted.empty())
          if (auto ev = st.evicted.find(reply.rows.keys[j]);
              ev != st.evicted.end() && meta_of(ev->second.data()).version > meta_of(rec).version)
            rec = ev->second.data();
        if (!reply.admitted.empty() && !reply.admitted[j]) {
          fill->not_admitted.try_emplace(reply.rows.keys[j], 1);
          ++st.stats.admission_rejections;
        }
        fill->for_each_position(reply.rows.keys[j], [&](uint32_t pos) {
          std::memcpy(out + size_t{pos} * st.record_bytes, rec, st.record_bytes);
        });
        if (reply.admitted.empty() || reply.admitted[j]) {
          admitted_keys.push_back(reply.rows.keys[j]);
          admitted_rows.insert(admitted_rows.end(), rec, rec + st.record_bytes);
        }
      }
      insert(self, admitted_keys, admitted_rows.data(), false);
      st.keys_pool.give(std::move(reply.rows.keys));
      st.bytes_pool.give(std::move(reply.rows.records));
      st.bytes_pool.give(std::move(reply.admitted));
      --fill->outstanding;
      finish_fill(self, fill);
    };
    auto failed = [fill](caf::error& err) {
      if (fill->reply) fill->promise.deliver(err);
      if (fill->fail) fill->fail(err);
      fill->reply = false;
      fill->promise = {};
      fill->then = nullptr;
      fill->fail = nullptr;
    };
    if (fill->ahead)
      self->request(st.shards[s], caf::infinite, pull_atom::value, prefetch_atom::value,
                    std::move(part))
          .then(std::move(got), std::move(failed));
    else
      self->request(st.shards[s], caf::infinite, pull_atom::value, std::move(part))
          .then(std::move(got), std::move(failed));
  }
}

}  // namespace cache_detail

namespace {

using namespace cache_detail;

// Writes every dirty row back; `promise` is answered once all are acked.
void write_back_all(cache_pointer self, caf::typed_response_promise<ok_atom> promise) {
  auto& st = self->state;
  std::vector<uint64_t> keys(st.cache->size());
  std::vector<std::byte> rows(keys.size() * st.record_bytes);
  cache_counts counts;
  run_sync("cache dump", [&](cache_completion done) {
    st.cache->dump(host_span(std::span<uint64_t>(keys)), host_span(std::span<std::byte>(rows)),
                   false, true, counts, std::move(done));
  });
  keys.resize(counts.hits);
  rows.resize(size_t{counts.hits} * st.record_bytes);
  st.flush_waiters.push_back(promise);
  write_back(self, keys, rows);
  check_flush_waiters(self);
}

// The backend is built before the spawn (so that a failure is the spawn's
// error) and handed over through a shared holder (CAF copies arguments).
using backend_holder = std::shared_ptr<std::unique_ptr<cache_backend>>;

cache_tier_actor::behavior_type cache_behavior(cache_pointer self, cache_config config,
                                               training_mode mode, std::vector<shard_actor> shards,
                                               partition_map map, backend_holder backend) {
  auto& st = self->state;
  st.config = std::move(config);
  st.mode = mode;
  st.shards = std::move(shards);
  st.map = std::move(map);
  st.cache = std::move(*backend);
  st.record_bytes = st.config.table.layout.record_bytes();
  st.stats.name = "cache " + std::to_string(st.config.index);
  return {
      [self](lookup_atom, std::vector<uint64_t>& keys) -> caf::result<lookup_reply> {
        if (self->state.fatal) return self->state.fatal;
        auto& st = self->state;
        ++st.clock;
        st.stats.lookups += keys.size();
        auto fill = acquire_fill(st);
        fill->started = st.now();
        st.keys_pool.give(std::move(fill->keys));
        fill->keys = std::move(keys);
        fill->promise = self->make_response_promise<lookup_reply>();
        fill->reply = true;
        fill_rows(self, fill, true);
        return fill->promise;
      },
      [self](prefetch_atom, std::vector<uint64_t>& keys) {
        if (self->state.fatal) return;
        auto& st = self->state;
        ++st.stats.prefetch_requests;
        st.stats.prefetch_rows += keys.size();
        auto fill = acquire_fill(st);
        st.keys_pool.give(std::move(fill->keys));
        fill->keys = std::move(keys);
        fill->ahead = true;
        fill_rows(self, fill, false);
      },
      [self](push_atom, push_request& req) -> caf::result<push_ack> {
        if (self->state.fatal) return self->state.fatal;
        auto& st = self->state;
        if (req.grads.size() != req.keys.size() * st.config.table.layout.dim)
          return caf::make_error(caf::sec::runtime_error, "push with a wrong gradient size");
        ++st.stats.pushes;
        st.stats.push_rows += req.keys.size();
        st.bytes_pool.give(std::move(req.spare_records));  // a lookup reply's, returned
        auto promise = self->make_response_promise<push_ack>();
        const double started = st.now();
        if (st.mode == training_mode::async) {
          push_to_shards(self, req, promise, started);
          return promise;
        }
        // Times the push from arrival to acknowledgement.
        push_done done = [self, promise, started](push_ack ack) mutable {
          self->state.push_latency.observe(self->state.now() - started);
          promise.deliver(std::move(ack));
        };
        push_failed fail = [promise](caf::error& err) mutable { promise.deliver(err); };
        apply_in_cache(self, req, std::move(done), std::move(fail));
        return promise;
      },
      [](pass_start_atom, uint64_t) -> ok_atom { return ok_atom::value; },
      [self](pass_end_atom, uint64_t) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        auto promise = self->make_response_promise<ok_atom>();
        write_back_all(self, promise);
        return promise;
      },
      [self](drain_atom) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        auto promise = self->make_response_promise<ok_atom>();
        write_back_all(self, promise);
        return promise;
      },
      [self](map_atom, const routing_table& table) -> caf::result<ok_atom> {
        auto& st = self->state;
        if (table.epoch <= st.map.epoch()) return ok_atom::value;  // not newer
        if (table.owners.size() != st.map.partitions() || table.shards.empty() ||
            std::any_of(table.owners.begin(), table.owners.end(),
                        [&](uint32_t o) { return o >= table.shards.size(); }))
          return caf::make_error(caf::sec::invalid_argument,
                                 st.stats.name + ": map of epoch " + std::to_string(table.epoch) +
                                     " does not match its " + std::to_string(st.map.partitions()) +
                                     " partitions and " + std::to_string(table.shards.size()) +
                                     " shards");
        // Requests already sent under the old map are forwarded by the
        // shard that no longer owns their keys.
        st.map =
            partition_map(table.epoch, table.owners, static_cast<uint32_t>(table.shards.size()));
        st.shards.clear();
        for (const auto& shard : table.shards)
          st.shards.push_back(caf::actor_cast<shard_actor>(shard));
        return ok_atom::value;
      },
      [self](stats_atom) -> tier_stats {
        auto& st = self->state;
        tier_stats out = st.stats;
        out.kind = "cache";
        out.index = st.config.index;
        out.rows = st.cache->size();
        out.capacity_rows = st.config.geometry.capacity_rows();
        out.bytes = out.rows * st.record_bytes;
        out.capacity_bytes = out.capacity_rows * st.record_bytes;
        out.write_behind_rows = st.evicted.size();
        out.mailbox_depth = self->mailbox().size();
        out.latencies = {make_snapshot("cache_lookup", st.lookup_latency),
                         make_snapshot("pull", st.pull_latency),
                         make_snapshot("push", st.push_latency)};
        return out;
      },
  };
}

}  // namespace

expected<cache_tier_actor> spawn_cache_tier(caf::actor_system& system, const cache_config& config,
                                            training_mode mode, std::vector<shard_actor> shards,
                                            partition_map map) {
  auto backend = std::make_shared<std::unique_ptr<cache_backend>>();
  if (config.make_backend) {
    auto made = config.make_backend(config.table.layout, config.geometry);
    if (!made)
      return error(made.err().code(),
                   "cache tier " + std::to_string(config.index) + ": " + made.err().message());
    if ((*made)->memory() != memory_kind::host)
      return error(errc::invalid_argument, "cache tier " + std::to_string(config.index) +
                                               ": the backend must take host buffers");
    *backend = std::move(*made);
  } else {
    *backend = std::make_unique<cpu_cache>(config.table.layout, config.geometry);
  }
  return system.spawn(cache_behavior, config, mode, std::move(shards), std::move(map),
                      std::move(backend));
}

}  // namespace strata::actors
