#include "actors/shard_actor.hpp"

#include <cstdlib>
#include <string_view>

#include "actors/checkpoint.hpp"
#include "actors/shard_internal.hpp"

namespace strata::actors {
namespace {

using namespace shard_detail;

// A pull of keys this shard serves.
// The request's key vector becomes the reply's (the keys are the same), so
// the requester gets its buffer back.
caf::error pull_local(shard_pointer self, std::vector<uint64_t> owned, pull_reply& reply,
                      bool ahead) {
  auto& st = self->state;
  const row_layout& layout = st.config.table.layout;
  const double start = st.config.clock->now_seconds();
  reply.rows.keys = std::move(owned);
  const std::vector<uint64_t>& keys = reply.rows.keys;
  touch(st, keys);
  reply.rows.records.resize(keys.size() * layout.record_bytes());
  const uint64_t rows_before = st.read_timer->rows();
  auto s = st.chain->lookup(keys, rows_of(reply.rows, layout), &reply.admitted);
  if (!s) return to_caf(s.err());
  count_pull(st, keys.size(), st.read_timer->rows() - rows_before, ahead);
  maybe_flush(self);
  st.metrics.pull.observe(st.config.clock->now_seconds() - start);
  return {};
}

// A pull (ahead: a cache tier's prefetch fill): local keys served here,
// keys a newer map gives another shard forwarded there (as the same kind
// of pull) and merged into one reply.
caf::result<pull_reply> serve_pull(shard_pointer self, std::vector<uint64_t>& keys,
                                   bool ahead) {
  if (self->state.fatal) return self->state.fatal;
  if (write_behind_full(self)) return caf::skip;
  if (all_keys_local(self->state)) {
    if (self->state.async_reads) return pull_async(self, std::move(keys), ahead);
    pull_reply reply;
    if (auto err = pull_local(self, std::move(keys), reply, ahead)) return err;
    return reply;
  }
  auto split = split_keys(self->state, keys, sender_of(self));
  if (split.remote.empty()) {
    pull_reply reply;
    if (auto err = pull_local(self, std::move(keys), reply, ahead)) return err;
    return reply;
  }
  // Some keys belong elsewhere (a fenced partition, a late request
  // under an older map): serve ours, forward the rest, merge.
  const size_t rb = self->state.config.table.layout.record_bytes();
  auto merged = std::make_shared<pull_reply>();
  merged->rows.keys = keys;
  merged->rows.records.resize(keys.size() * rb);
  merged->admitted.assign(keys.size(), 1);
  auto place = [merged, rb](const std::vector<uint32_t>& at, const pull_reply& part) {
    for (size_t j = 0; j < at.size(); ++j) {
      std::memcpy(merged->rows.records.data() + size_t{at[j]} * rb,
                  part.rows.records.data() + j * rb, rb);
      if (!part.admitted.empty()) merged->admitted[at[j]] = part.admitted[j];
    }
  };
  if (!split.local.empty()) {
    pull_reply local;
    if (auto err = pull_local(self, pick(keys, split.local), local, ahead)) return err;
    place(split.local, local);
  }
  auto promise = self->make_response_promise<pull_reply>();
  auto missing = std::make_shared<size_t>(split.remote.size());
  for (auto& [other, at] : split.remote) {
    auto got = [merged, place, at = at, missing, promise](pull_reply& part) mutable {
      place(at, part);
      if (--*missing == 0) promise.deliver(std::move(*merged));
    };
    auto failed = [promise](caf::error& err) mutable { promise.deliver(err); };
    auto to = caf::actor_cast<shard_actor>(other);
    if (ahead)
      self->request(to, caf::infinite, pull_atom::value, prefetch_atom::value, pick(keys, at))
          .then(std::move(got), std::move(failed));
    else
      self->request(to, caf::infinite, pull_atom::value, pick(keys, at))
          .then(std::move(got), std::move(failed));
  }
  return promise;
}

// A push of keys this shard serves: applied, the updated rows of the
// distinct keys appended to `reply`. A push whose id (with these keys) was
// applied before is a client's retry: answered with the current rows, not
// applied again.
caf::error push_local(shard_pointer self, push_request& req, push_reply& reply) {
  auto& st = self->state;
  auto& chain = *st.chain;
  const row_layout& layout = st.config.table.layout;
  const double start = st.config.clock->now_seconds();
  const uint64_t fingerprint = push_fingerprint(req.id, req.keys);
  const bool duplicate = st.applied_pushes.seen(fingerprint);
  touch(st, req.keys);
  status s;
  if (duplicate) {
    ++st.metrics.duplicate_pushes;
  } else {
    st.max_push_epoch = std::max(st.max_push_epoch, req.epoch);
    s = chain.push(req.keys, req.grads.data(), layout.dim, nullptr);
    if (!s) return to_caf(s.err());
    st.applied_pushes.remember(fingerprint);
  }
  auto& unique = st.push_unique;
  unique.assign(req.keys.begin(), req.keys.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  const size_t pushed_keys = req.keys.size();
  const size_t before = reply.rows.keys.size();
  if (before == 0 && reply.rows.keys.capacity() < req.keys.capacity()) {
    // req.keys is not read again: its buffer carries the reply's keys back.
    req.keys.clear();
    reply.rows.keys.swap(req.keys);
  }
  reply.rows.keys.insert(reply.rows.keys.end(), unique.begin(), unique.end());
  reply.rows.records.resize(reply.rows.keys.size() * layout.record_bytes());
  s = chain.lookup(
      unique,
      {reinterpret_cast<std::byte*>(reply.rows.records.data()) + before * layout.record_bytes(),
       layout.record_bytes()},
      nullptr);
  if (!s) return to_caf(s.err());
  if (duplicate) {
    maybe_flush(self);  // the lookup may have evicted dirty rows
    return {};
  }
  if (auto& sink = st.config.updates)
    sink->rows_updated(layout, unique,
                       {reinterpret_cast<const std::byte*>(reply.rows.records.data()) +
                            before * layout.record_bytes(),
                        layout.record_bytes()});
  maybe_flush(self);
  auto& m = st.metrics;
  ++m.pushes;
  m.push_rows += pushed_keys;
  m.push.observe(st.config.clock->now_seconds() - start);
  return {};
}

shard_actor::behavior_type shard_behavior(shard_pointer self, shard_config config,
                                          std::shared_ptr<std::unique_ptr<tier_chain>> chain,
                                          ssd_flush_actor flusher, shard_reader_actor reader,
                                          bool async_reads) {
  auto& st = self->state;
  st.config = std::move(config);
  st.chain = std::move(*chain);
  st.flusher = flusher;
  st.reader = reader;
  st.probe = row_buffer(st.config.table.layout);
  st.async_reads = async_reads;
  st.read_timer = std::make_unique<lmdb_read_timer>(st.config.clock, &st.metrics.lmdb_read);
  st.chain->set_observer(st.read_timer.get());
  // A restored shard: the TTL clock and admission sketch of the checkpoint.
  st.chain->set_tick(st.config.restored_tick);
  if (auto* sketch = st.chain->sketch();
      sketch && st.config.restored_sketch.size() == sketch->counters().size())
    sketch->load(st.config.restored_sketch);
  self->link_to(flusher);
  self->link_to(reader);
  const row_layout layout = st.config.table.layout;
  return {
      [self](pull_atom, std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
        return serve_pull(self, keys, /*ahead=*/false);
      },
      [self](pull_atom, prefetch_atom, std::vector<uint64_t>& keys) -> caf::result<pull_reply> {
        return serve_pull(self, keys, /*ahead=*/true);
      },
      [self, layout](push_atom, push_request& req) -> caf::result<push_reply> {
        if (self->state.fatal) return self->state.fatal;
        if (write_behind_full(self)) return caf::skip;
        if (req.grads.size() != req.keys.size() * layout.dim)
          return caf::make_error(caf::sec::runtime_error,
                                 "push of " + std::to_string(req.keys.size()) + " keys carries " +
                                     std::to_string(req.grads.size()) + " floats, expected dim " +
                                     std::to_string(layout.dim) + " each");
        settle_parked(self, req.keys);
        // The gradient vector goes back with the reply (push_reply::grads).
        auto applied_here = [&]() -> caf::result<push_reply> {
          push_reply reply;
          if (auto err = push_local(self, req, reply)) return err;
          req.grads.clear();
          reply.grads = std::move(req.grads);
          return reply;
        };
        if (all_keys_local(self->state)) return applied_here();
        auto split = split_keys(self->state, req.keys, sender_of(self));
        if (split.remote.empty()) return applied_here();
        auto sub = [&req, &layout](const std::vector<uint32_t>& at) {
          push_request part;
          part.epoch = req.epoch;
          part.id = req.id;  // each owner dedups its part
          for (uint32_t i : at) {
            part.keys.push_back(req.keys[i]);
            part.grads.insert(part.grads.end(), req.grads.begin() + size_t{i} * layout.dim,
                              req.grads.begin() + size_t{i + 1} * layout.dim);
          }
          return part;
        };
        auto merged = std::make_shared<push_reply>();
        if (!split.local.empty()) {
          push_request local = sub(split.local);
          if (auto err = push_local(self, local, *merged)) return err;
        }
        auto promise = self->make_response_promise<push_reply>();
        auto missing = std::make_shared<size_t>(split.remote.size());
        for (auto& [other, at] : split.remote)
          self->request(caf::actor_cast<shard_actor>(other), caf::infinite, push_atom::value,
                        sub(at))
              .then(
                  [merged, missing, promise](push_reply& part) mutable {
                    auto& m = merged->rows;
                    m.keys.insert(m.keys.end(), part.rows.keys.begin(), part.rows.keys.end());
                    m.records.insert(m.records.end(), part.rows.records.begin(),
                                     part.rows.records.end());
                    if (--*missing == 0) promise.deliver(std::move(*merged));
                  },
                  [promise](caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self, layout](write_back_atom, const row_batch& rows) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        if (write_behind_full(self)) return caf::skip;
        if (!well_formed(rows, layout))
          return caf::make_error(caf::sec::runtime_error, "malformed write-back batch");
        settle_parked(self, rows.keys);
        auto split = split_keys(self->state, rows.keys, sender_of(self));
        const size_t rb = layout.record_bytes();
        auto sub = [&rows, rb](const std::vector<uint32_t>& at) {
          row_batch part;
          for (uint32_t i : at) {
            part.keys.push_back(rows.keys[i]);
            part.records.insert(part.records.end(), rows.records.begin() + size_t{i} * rb,
                                rows.records.begin() + size_t{i + 1} * rb);
          }
          return part;
        };
        if (!split.local.empty()) {
          const row_batch local = split.remote.empty() ? rows : sub(split.local);
          touch(self->state, local.keys);
          auto s = self->state.chain->write_back(local.keys, rows_of(local, layout));
          if (!s) return to_caf(s.err());
          // Serving ignores a row not newer than its copy, so an ignored
          // (older) write-back row is harmless to publish.
          if (auto& sink = self->state.config.updates)
            sink->rows_updated(layout, local.keys, rows_of(local, layout));
          self->state.metrics.write_back_rows += local.keys.size();
          maybe_flush(self);
        }
        if (split.remote.empty()) return ok_atom::value;
        auto promise = self->make_response_promise<ok_atom>();
        auto missing = std::make_shared<size_t>(split.remote.size());
        for (auto& [other, at] : split.remote)
          self->request(caf::actor_cast<shard_actor>(other), caf::infinite, write_back_atom::value,
                        sub(at))
              .then(
                  [missing, promise](ok_atom) mutable {
                    if (--*missing == 0) promise.deliver(ok_atom::value);
                  },
                  [promise](caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self, layout](prefetch_atom, const std::vector<uint64_t>& all_keys) -> caf::result<void> {
        if (self->state.fatal) return {};
        if (write_behind_full(self)) return caf::skip;
        std::vector<uint64_t> picked;
        bool some_remote = false;
        if (!all_keys_local(self->state)) {
          auto split = split_keys(self->state, all_keys, sender_of(self));
          for (auto& [other, at] : split.remote)
            self->send(caf::actor_cast<shard_actor>(other), prefetch_atom::value,
                       pick(all_keys, at));
          some_remote = !split.remote.empty();
          if (some_remote) picked = pick(all_keys, split.local);
        }
        const std::vector<uint64_t>& keys = some_remote ? picked : all_keys;
        if (keys.empty()) return {};
        touch(self->state, keys);
        ++self->state.metrics.prefetch_requests;
        self->state.metrics.prefetch_rows += keys.size();
        // The cold keys are read off this thread and installed when read.
        if (self->state.async_reads) {
          prefetch_async(self, keys);
          return {};
        }
        auto& scratch = self->state.probe;
        scratch.clear();
        for (uint64_t k : keys) scratch.append(k);
        const uint64_t rows_before = self->state.read_timer->rows();
        auto s = self->state.chain->lookup(keys, scratch.rows(), nullptr);
        self->state.metrics.prefetch_ssd_rows += self->state.read_timer->rows() - rows_before;
        if (!s) caf::aout(self) << "strata: prefetch failed: " << s.err().to_string() << "\n";
        maybe_flush(self);
        return {};
      },
      [self](tick_atom, uint32_t tick) {
        if (self->state.fatal) return;
        auto& st = self->state;
        st.chain->set_tick(tick);
        const uint64_t expired = st.chain->dram().stats().expired;
        auto s = st.chain->expire();
        if (!s) caf::aout(self) << "strata: TTL expiry failed: " << s.err().to_string() << "\n";
        // Expired rows get tombstones, written by the chain (now, or after
        // the flushes in flight), not by a flush batch: a read sent before
        // may hold an older copy of any of them (shard_read.cpp).
        if (st.chain->dram().stats().expired != expired && !st.reads.empty())
          st.erased_at = ++st.flush_gen;
      },
      [self, layout](drain_atom) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        settle_all_parked(self);
        auto& st = self->state;
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
      [self, layout](checkpoint_atom, uint64_t epoch) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        settle_all_parked(self);
        auto& st = self->state;
        if (st.config.checkpoint_root.empty())
          return caf::make_error(caf::sec::invalid_argument,
                                 "shard " + std::to_string(st.config.index) + ": checkpoint " +
                                     std::to_string(epoch) +
                                     " asked, but this node has no checkpoint directory "
                                     "(manifest: checkpoint.dir)");
        if (epoch == 0)
          return caf::make_error(caf::sec::invalid_argument,
                                 "shard " + std::to_string(st.config.index) +
                                     ": checkpoint epoch 0 (epochs start at 1)");
        const std::string dir =
            shard_checkpoint_dir(st.config.checkpoint_root / checkpoint_name(epoch),
                                 st.config.index)
                .string();
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
        if (self->state.fatal) return self->state.fatal;
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
      [self](migrate_atom, const migration_order& order) -> caf::result<migration_stats> {
        if (self->state.fatal) return self->state.fatal;
        settle_all_parked(self);
        auto& st = self->state;
        const std::string who = "shard " + std::to_string(st.config.index);
        if (st.out)
          return caf::make_error(caf::sec::invalid_argument,
                                 who + ": a migration is already in progress");
        if (order.partitions.size() != order.destinations.size())
          return caf::make_error(caf::sec::invalid_argument,
                                 who + ": migration order with " +
                                     std::to_string(order.partitions.size()) + " partitions but " +
                                     std::to_string(order.destinations.size()) + " destinations");
        auto& m = st.out.emplace();
        m.order = order;
        for (size_t i = 0; i < order.partitions.size(); ++i) {
          if (order.partitions[i] >= st.config.lmdb.partitions || !order.destinations[i])
            return caf::make_error(
                caf::sec::invalid_argument,
                who + ": bad migration of partition " + std::to_string(order.partitions[i]));
          m.destination[order.partitions[i]] = order.destinations[i];
        }
        // Rows above LMDB may be newer than LMDB's: they go again at the fence.
        const uint32_t partitions = st.config.lmdb.partitions;
        auto note = [&m, partitions](uint64_t key, const std::byte*) {
          if (m.destination.count(partition_of(key, partitions))) m.touched.insert(key);
        };
        auto s = st.chain->dram().dump(note);
        if (s) s = st.chain->write_behind().dump(note);
        if (!s) {
          st.out.reset();
          return to_caf(s.err());
        }
        auto promise = self->make_response_promise<migration_stats>();
        m.copy_promise = promise;
        copy_next(self);
        return promise;
      },
      [self](fence_atom, uint64_t epoch) -> caf::result<migration_stats> {
        if (self->state.fatal) return self->state.fatal;
        settle_all_parked(self);
        auto& st = self->state;
        const std::string who = "shard " + std::to_string(st.config.index);
        if (!st.out || st.out->order.epoch != epoch)
          return caf::make_error(caf::sec::invalid_argument,
                                 who + ": no migration to epoch " + std::to_string(epoch));
        if (st.out->copy_promise || st.out->fenced)
          return caf::make_error(
              caf::sec::invalid_argument,
              who + ": fence before the copy of epoch " + std::to_string(epoch) + " completed");
        auto& m = *st.out;
        std::vector<uint64_t> keys(m.touched.begin(), m.touched.end());
        std::sort(keys.begin(), keys.end());
        auto rows = newest_rows(*st.chain, keys);
        if (!rows) return to_caf(rows.err());
        // One batch per destination, sent before anything is forwarded
        // there (per-pair FIFO): the destination has them first.
        std::vector<std::pair<caf::actor, row_batch>> batches;
        const size_t rb = st.config.table.layout.record_bytes();
        migration_stats delta;
        for (size_t i = 0; i < rows->size(); ++i) {
          const caf::actor& to =
              m.destination.at(partition_of(rows->key(i), st.config.lmdb.partitions));
          auto it = std::find_if(batches.begin(), batches.end(),
                                 [&](const auto& b) { return b.first == to; });
          if (it == batches.end()) {
            batches.emplace_back(to, row_batch{});
            it = batches.end() - 1;
          }
          it->second.keys.push_back(rows->key(i));
          const auto* rec = reinterpret_cast<const uint8_t*>(rows->record(i));
          it->second.records.insert(it->second.records.end(), rec, rec + rb);
          ++delta.rows;
          delta.bytes += rb;
        }
        // Every destination gets a batch, an empty one too: it learns this
        // shard migrates to it (split_keys) before anything is forwarded.
        for (const auto& [p, to] : m.destination)
          if (std::none_of(batches.begin(), batches.end(),
                           [&, &to = to](const auto& b) { return b.first == to; }))
            batches.emplace_back(to, row_batch{});
        m.fenced = true;
        m.touched.clear();
        auto promise = self->make_response_promise<migration_stats>();
        if (batches.empty()) {
          promise.deliver(delta);
          return promise;
        }
        auto missing = std::make_shared<size_t>(batches.size());
        for (auto& [to, batch] : batches)
          self->request(caf::actor_cast<shard_actor>(to), caf::infinite, migrate_in_atom::value,
                        std::move(batch))
              .then(
                  [missing, promise, delta](ok_atom) mutable {
                    if (--*missing == 0) promise.deliver(delta);
                  },
                  [promise](caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self, layout](migrate_in_atom, const row_batch& rows) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        if (write_behind_full(self)) return caf::skip;
        settle_all_parked(self);
        auto& st = self->state;
        if (!well_formed(rows, layout))
          return caf::make_error(
              caf::sec::runtime_error,
              "shard " + std::to_string(st.config.index) + ": malformed migration batch");
        row_buffer spilled(layout);
        auto s = st.chain->dram().store(rows.keys, rows_of(rows, layout), true, spilled);
        row_buffer none(layout);
        if (s) s = st.chain->write_behind().store(spilled.keys(), spilled.rows(), true, none);
        if (!s) return to_caf(s.err());
        st.metrics.migrated_in_rows += rows.keys.size();
        if (auto from = sender_of(self);
            from && std::find(st.migrating_in.begin(), st.migrating_in.end(), from) ==
                        st.migrating_in.end())
          st.migrating_in.push_back(from);
        maybe_flush(self);
        return ok_atom::value;
      },
      [self](resend_atom, uint32_t partition) -> caf::result<row_batch> {
        if (self->state.fatal) return self->state.fatal;
        settle_all_parked(self);
        auto rows = shard_detail::partition_rows(self->state, partition);
        if (!rows) return to_caf(rows.err());
        return std::move(*rows);
      },
      [self](commit_atom, const routing_table& table) -> caf::result<ok_atom> {
        if (self->state.fatal) return self->state.fatal;
        settle_all_parked(self);
        auto& st = self->state;
        const std::string who = "shard " + std::to_string(st.config.index);
        if (table.owners.size() != st.config.lmdb.partitions ||
            std::any_of(table.owners.begin(), table.owners.end(),
                        [&](uint32_t o) { return o >= table.shards.size(); }))
          return caf::make_error(caf::sec::invalid_argument,
                                 who + ": committed map of epoch " + std::to_string(table.epoch) +
                                     " does not cover its " +
                                     std::to_string(st.config.lmdb.partitions) + " partitions");
        if (st.routing && st.routing->epoch >= table.epoch) return ok_atom::value;
        const uint32_t me = st.config.index;
        // A drain gave this index a successor on another node (shards[me]
        // is not this actor): this one owns nothing and forwards all. The
        // successor is appended so no owner names this shard's index.
        routing_table routing = table;
        if (me < routing.shards.size() && routing.shards[me].address() != self->address()) {
          const auto successor = static_cast<uint32_t>(routing.shards.size());
          routing.shards.push_back(routing.shards[me]);
          for (auto& o : routing.owners)
            if (o == me) o = successor;
        }
        st.routing = routing;
        st.out.reset();
        st.migrating_in.clear();
        // Rows of partitions owned elsewhere: out of DRAM now (their owner
        // holds them); out of LMDB once the write-behind is flushed.
        std::vector<uint64_t> foreign;
        auto s = st.chain->dram().dump([&](uint64_t key, const std::byte*) {
          if (routing.owners[partition_of(key, st.config.lmdb.partitions)] != me)
            foreign.push_back(key);
        });
        if (s) s = st.chain->dram().erase(foreign);
        if (!s) return to_caf(s.err());
        st.erase_partitions.clear();
        for (uint32_t p = 0; p < routing.owners.size(); ++p)
          if (routing.owners[p] != me) st.erase_partitions.push_back(p);
        st.erase_pending = true;
        auto promise = self->make_response_promise<ok_atom>();
        st.commit_waiters.push_back(promise);
        maybe_flush(self);
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
        // A waiting pull's rows were counted once when its read was
        // installed (LMDB hits, initializer rows): its own lookup of them in
        // DRAM is not counted again (shard_read.cpp).
        const uint64_t again = m.installed_rows_served;
        out.hits = cs.hits_per_tier.empty() ? 0 : cs.hits_per_tier[0] - again;
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
        out.pulls = m.pulls;
        out.lmdb_waits = m.lmdb_waits;
        out.lookup_rows = m.lookup_rows;
        out.lookup_ssd_wait_rows = m.lookup_ssd_wait_rows;
        out.prefetch_ssd_rows = m.prefetch_ssd_rows;
        out.admission_rejections = cs.not_admitted + cs.dropped_pushes;
        out.ttl_expirations = dram.stats().expired;
        out.pushes = m.pushes;
        out.push_rows = m.push_rows;
        out.duplicate_pushes = m.duplicate_pushes;
        out.push_id_evictions = self->state.applied_pushes.evictions();
        out.chain_hits = cs.hits_per_tier;
        if (!out.chain_hits.empty()) out.chain_hits[0] -= again;
        out.initialized = cs.initialized;
        out.rows = dram.size();
        out.bytes = dram.memory_bytes();
        out.capacity_rows = dram.capacity_rows();
        out.capacity_bytes = st.config.dram.capacity_bytes;
        out.lmdb_rows = chain.durable() ? chain.durable()->size() : 0;
        out.flushes_in_flight = st.in_flight.size();
        out.write_behind_rows = chain.write_behind().size();
        out.write_behind_stalls = m.write_behind_stalls;
        out.write_behind_peak_rows = m.write_behind_peak_rows;
        out.write_behind_stall_seconds = stall_seconds(st);
        out.mailbox_depth = self->mailbox().size();
        out.latencies = {make_snapshot("pull", m.pull), make_snapshot("push", m.push),
                         make_snapshot("flush", m.flush), make_snapshot("lmdb_read", m.lmdb_read),
                         make_snapshot("lmdb_write", m.lmdb_write)};
        return out;
      },
  };
}

}  // namespace

expected<shard_actor> spawn_shard(caf::actor_system& system, const shard_config& config,
                                  std::shared_ptr<shard_read_gate> read_gate) {
  auto reader = lmdb_tier::open(config.table.layout, config.lmdb);
  if (!reader) return reader.err();
  lmdb_tier_config writer_config = config.lmdb;
  writer_config.shared_handle = true;
  auto writer = lmdb_tier::open(config.table.layout, writer_config);
  if (!writer) return writer.err();
  const bool read_gate_given = read_gate != nullptr;
  auto read_handle = lmdb_tier::open(config.table.layout, writer_config);
  if (!read_handle) return read_handle.err();
  auto flusher =
      spawn_ssd_flush(system, std::move(*writer), config.flush_on_own_thread, config.clock);
  auto read_actor = spawn_shard_reader(system, std::move(*read_handle), config.flush_on_own_thread,
                                       std::move(read_gate));
  auto chain = std::make_shared<std::unique_ptr<tier_chain>>(std::make_unique<tier_chain>(
      config.table, config.chain, std::make_unique<dram_tier>(config.table.layout, config.dram),
      std::move(*reader)));
  // The reader is opt-in (docs/tiers.md): with it, a scaling test's
  // timing assertion fails and no gain was measured on 2 cores.
  const char* async = std::getenv("STRATA_SHARD_ASYNC_READS");
  const bool async_reads = read_gate_given || (async != nullptr && std::string_view(async) == "1");
  return system.spawn(shard_behavior, config, chain, flusher, read_actor, async_reads);
}

}  // namespace strata::actors
