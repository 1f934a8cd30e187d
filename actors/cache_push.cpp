// The cache tier's pushes: pass mode applies them in the cache, async mode
// forwards them to the owning shards.
#include "actors/cache_internal.hpp"

namespace strata::actors::cache_detail {

// Pass mode: applies gradients in the cache; missing rows are pulled first.
// Rows that still don't fit (a batch larger than the cache) are updated
// here all the same and written back (apply_overflow). Versions for the ack
// are read right after each update, before a later insert can evict the row.
struct pass_push {
  push_request req;
  push_ack ack;
  push_done done;
  push_failed fail;
};

// Updates the positions `which` of p->req in the cache; returns the
// positions (into p->req) that missed and records the others' versions.
std::vector<uint32_t> update_positions(cache_pointer self, pass_push& p,
                                       const std::vector<uint32_t>& which) {
  auto& st = self->state;
  const uint32_t dim = st.config.table.layout.dim;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  for (uint32_t i : which) {
    keys.push_back(p.req.keys[i]);
    grads.insert(grads.end(), p.req.grads.begin() + size_t{i} * dim,
                 p.req.grads.begin() + size_t{i + 1} * dim);
  }
  std::vector<uint32_t> misses(keys.size());
  cache_counts counts;
  run_sync("cache update", [&](cache_completion done) {
    st.cache->update(host_span(std::span<const uint64_t>(keys)),
                     host_span(std::span<const float>(grads)), st.config.table.optimizer,
                     host_span(std::span<uint32_t>(misses)), counts, std::move(done));
  });
  misses.resize(counts.misses);
  std::vector<std::byte> rows(keys.size() * st.record_bytes);
  std::vector<uint32_t> absent(keys.size());
  cache_counts q;
  run_sync("cache query", [&](cache_completion done) {
    st.cache->query(host_span(std::span<const uint64_t>(keys)),
                    host_span(std::span<std::byte>(rows)), host_span(std::span<uint32_t>(absent)),
                    q, std::move(done));
  });
  absent.resize(q.misses);
  std::vector<uint32_t> missed;
  size_t m = 0, a = 0;
  for (uint32_t j = 0; j < keys.size(); ++j) {
    const bool is_miss = m < misses.size() && misses[m] == j;
    if (is_miss) ++m;
    const bool is_absent = a < absent.size() && absent[a] == j;
    if (is_absent) ++a;
    if (is_miss) {
      missed.push_back(which[j]);
    } else if (!is_absent) {
      p.ack.versions[which[j]] = meta_of(rows.data() + size_t{j} * st.record_bytes).version;
    }
  }
  return missed;
}

// Keys of a pass push that still don't fit after their rows came in (the
// batch evicted them again): this cache still owns them for the pass, so it
// applies the update itself to the newest copy (the evicted buffer's or the
// pulled one) and hands the result to write_back() like an evicted dirty
// row; it stays readable in the evicted buffer until the shard confirms.
// Duplicates are summed in batch order, one optimizer step per key.
void apply_overflow(cache_pointer self, pass_push& p, const std::vector<uint32_t>& positions,
                    const pending_fill& pulled) {
  auto& st = self->state;
  const row_layout& layout = st.config.table.layout;
  const uint32_t dim = layout.dim;
  std::vector<uint64_t> keys;
  std::unordered_map<uint64_t, std::vector<float>> summed;
  for (uint32_t i : positions) {
    const uint64_t k = p.req.keys[i];
    auto [it, first] = summed.try_emplace(k, p.req.grads.begin() + size_t{i} * dim,
                                          p.req.grads.begin() + size_t{i + 1} * dim);
    if (first) {
      keys.push_back(k);
    } else {
      for (uint32_t j = 0; j < dim; ++j) it->second[j] += p.req.grads[size_t{i} * dim + j];
    }
  }
  std::vector<std::byte> rows(keys.size() * st.record_bytes);
  std::vector<uint64_t> written;
  std::vector<std::byte> written_rows;
  std::unordered_map<uint64_t, uint64_t> version;
  // The row the fill served for each key (from the evicted buffer or a pull).
  std::unordered_map<uint64_t, const std::byte*> served;
  const auto* served_rows = reinterpret_cast<const std::byte*>(pulled.rows.records.data());
  for (size_t i = 0; i < pulled.keys.size(); ++i)
    served.try_emplace(pulled.keys[i], served_rows + i * st.record_bytes);
  for (size_t j = 0; j < keys.size(); ++j) {
    const uint64_t k = keys[j];
    if (pulled.not_admitted.contains(k)) continue;  // dropped: version stays 0
    std::byte* rec = rows.data() + j * st.record_bytes;
    const std::byte* newest = nullptr;
    if (auto it = served.find(k); it != served.end()) newest = it->second;
    if (auto ev = st.evicted.find(k);
        ev != st.evicted.end() &&
        (newest == nullptr || meta_of(ev->second.data()).version > meta_of(newest).version))
      newest = ev->second.data();
    STRATA_ASSERT(newest != nullptr, "an overflowing pass-mode key has no row");
    std::memcpy(rec, newest, st.record_bytes);
    apply_optimizer(st.config.table.optimizer, layout, rec, summed[k].data());
    version[k] = meta_of(rec).version;
    written.push_back(k);
    written_rows.insert(written_rows.end(), rec, rec + st.record_bytes);
  }
  for (uint32_t i : positions)
    if (auto it = version.find(p.req.keys[i]); it != version.end()) p.ack.versions[i] = it->second;
  write_back(self, written, written_rows);
}

void apply_in_cache(cache_pointer self, const push_request& req, push_done done, push_failed fail) {
  auto p = std::make_shared<pass_push>();
  p->req = req;
  p->ack.versions.assign(req.keys.size(), 0);
  p->done = std::move(done);
  p->fail = std::move(fail);
  std::vector<uint32_t> all(req.keys.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  auto misses = update_positions(self, *p, all);
  if (misses.empty()) {
    p->done(std::move(p->ack));
    return;
  }
  // Bring the missing rows in, then apply their gradients. The keys stay
  // pinned meanwhile: a row served now may be updated, evicted and
  // acknowledged before the last pull returns, and the overflow must then
  // find that newer version in the evicted buffer.
  auto fill = acquire_fill(self->state);
  fill->keys.clear();
  for (uint32_t i : misses) fill->keys.push_back(req.keys[i]);
  pin(self, fill->keys);
  fill->fail = [self, p, keys = fill->keys](caf::error& err) {
    unpin(self, keys);
    p->fail(err);
  };
  pending_fill* pulled = fill.get();  // alive while `then` runs (finish_fill holds it)
  fill->then = [self, p, misses, pulled]() {
    auto still = update_positions(self, *p, misses);
    if (!still.empty()) apply_overflow(self, *p, still, *pulled);
    unpin(self, pulled->keys);
    p->done(std::move(p->ack));
  };
  fill_rows(self, fill, false);
}

// Answers a forwarded push; its entry goes back to st.pushes, not holding
// the actor (the promise).
void finish_push(cache_pointer self, pending_push& p) {
  self->state.push_latency.observe(self->state.now() - p.started);
  p.promise.deliver(std::move(p.ack));
  p.promise = {};
}

// The owning shards apply the gradients and return the updated rows, which
// refresh this cache's copies; the promise gets the per-position versions.
// The vectors of the parts sent come from the tier's pools, which the
// request and the shards' replies refill.
void push_to_shards(cache_pointer self, push_request& req,
                    caf::typed_response_promise<push_ack> promise, double started) {
  auto& st = self->state;
  const uint32_t dim = st.config.table.layout.dim;
  const auto& groups = group_keys(st.map, req.keys, st.push_groups);
  std::shared_ptr<pending_push> p;
  for (auto& q : st.pushes)
    if (q.use_count() == 1) {
      p = q;
      break;
    }
  if (!p) {
    p = std::make_shared<pending_push>();
    // Bounded: pushes beyond the list are used once.
    if (st.pushes.size() < 16) st.pushes.push_back(p);
  }
  p->outstanding = 0;
  p->failed = false;
  p->started = started;
  p->promise = std::move(promise);
  st.keys_pool.refill(p->ack.versions, req.keys.size());
  p->ack.versions.assign(req.keys.size(), 0);
  for (uint32_t s = 0; s < groups.size(); ++s) {
    if (groups[s].empty()) continue;
    push_request part;
    part.epoch = req.epoch;
    part.keys = st.keys_pool.take(groups[s].size());
    part.grads = st.floats_pool.take(groups[s].size() * dim);
    part.keys.reserve(groups[s].size());
    part.grads.reserve(groups[s].size() * dim);
    for (uint32_t i : groups[s]) {
      part.keys.push_back(req.keys[i]);
      part.grads.insert(part.grads.end(), req.grads.begin() + size_t{i} * dim,
                        req.grads.begin() + size_t{i + 1} * dim);
    }
    ++p->outstanding;
    self->request(st.shards[s], caf::infinite, push_atom::value, std::move(part))
        .then(
            [self, p](push_reply& reply) {
              auto& st = self->state;
              auto* in = reinterpret_cast<std::byte*>(reply.rows.records.data());
              auto& version = st.push_versions;
              version.clear();
              for (size_t j = 0; j < reply.rows.keys.size(); ++j)
                version[reply.rows.keys[j]] = meta_of(in + j * st.record_bytes).version;
              for (size_t i = 0; i < p->keys.size(); ++i)
                if (const uint64_t* v = version.find(p->keys[i])) p->ack.versions[i] = *v;
              if (st.mode == training_mode::async) insert(self, reply.rows.keys, in, false);
              st.keys_pool.give(std::move(reply.rows.keys));
              st.bytes_pool.give(std::move(reply.rows.records));
              st.floats_pool.give(std::move(reply.grads));
              if (--p->outstanding == 0 && !p->failed) finish_push(self, *p);
            },
            [p](caf::error& err) {
              if (!p->failed) p->promise.deliver(err);
              p->failed = true;
              p->promise = {};
            });
  }
  // The request's vectors: its keys stay for the replies, its gradients go
  // back to the worker with the acknowledgement (the shards' replies refill
  // the floats pool with the parts' vectors), and so does a key vector when
  // the pool holds more than it needs (the worker's prefetches bring them).
  st.keys_pool.give(std::move(p->keys));
  p->keys = std::move(req.keys);
  req.grads.clear();
  p->ack.grads = std::move(req.grads);
  if (st.keys_pool.size() > 4) p->ack.spare_keys = st.keys_pool.take(SIZE_MAX);  // the largest
  if (p->outstanding == 0) finish_push(self, *p);
}

}  // namespace strata::actors::cache_detail
