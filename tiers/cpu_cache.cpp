#include "tiers/cpu_cache.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "common/hash.hpp"
#include "common/prefetch.hpp"

namespace strata {
namespace {

constexpr uint8_t slot_valid = 1;
constexpr uint8_t slot_dirty = 2;

// One position of a batch, sorted into processing order: set, then key,
// then position (so duplicates of a key are adjacent and in batch order).
struct batch_entry {
  uint32_t set;
  uint32_t pos;
  uint64_t key;
  bool operator<(const batch_entry& o) const {
    if (set != o.set) return set < o.set;
    if (key != o.key) return key < o.key;
    return pos < o.pos;
  }
};

template <class T>
bool is_host(const memory_span<T>& s) {
  return s.kind() == memory_kind::host;
}

error bad_argument(std::string what) {
  return error(errc::invalid_argument, "cpu_cache: " + std::move(what));
}

}  // namespace

struct cpu_cache::impl {
  row_layout layout;
  cache_geometry geometry;
  size_t record_bytes;  // caller-visible record size (packed batches)
  size_t arena_stride;  // record_bytes rounded up so row_meta stays aligned
  uint32_t set_slots;

  // Slot metadata and records, indexed by set * set_slots + slot.
  std::vector<uint64_t> keys;
  std::vector<uint64_t> ticks;
  std::vector<uint8_t> flags;
  std::vector<std::byte> arena;
  size_t resident = 0;
  uint64_t tick = 0;

  // Scratch reused across calls (no allocation in steady state).
  std::vector<batch_entry> order;
  std::vector<uint8_t> missed;
  std::vector<float> grad_sum;

  impl(row_layout l, cache_geometry g)
      : layout(l),
        geometry(g),
        record_bytes(l.record_bytes()),
        arena_stride((l.record_bytes() + alignof(row_meta) - 1) / alignof(row_meta) *
                     alignof(row_meta)),
        set_slots(g.set_slots()) {
    STRATA_ASSERT(g.sets > 0 && g.slabs_per_set > 0, "cpu_cache: empty geometry");
    STRATA_ASSERT(l.dim > 0, "cpu_cache: layout with dim 0");
    const size_t slots = size_t{g.sets} * set_slots;
    keys.assign(slots, 0);
    ticks.assign(slots, 0);
    flags.assign(slots, 0);
    arena.assign(slots * arena_stride, std::byte{0});
  }

  std::byte* record(size_t slot) { return arena.data() + slot * arena_stride; }

  // Sorts the batch into processing order (set, key, position).
  void sort_batch(const uint64_t* batch_keys, size_t n) {
    order.resize(n);
    for (size_t i = 0; i < n; ++i)
      order[i] = batch_entry{cache_set_of(batch_keys[i], geometry.sets), static_cast<uint32_t>(i),
                             batch_keys[i]};
    std::sort(order.begin(), order.end());
  }

  // Absolute slot index of `key` in `set`, or -1.
  ptrdiff_t find(uint32_t set, uint64_t key) const {
    return find_from(size_t{set} * set_slots, key);
  }
  // The same, given the set's first slot.
  ptrdiff_t find_from(size_t base, uint64_t key) const {
    for (size_t s = base; s < base + set_slots; ++s)
      if ((flags[s] & slot_valid) && keys[s] == key) return static_cast<ptrdiff_t>(s);
    return -1;
  }

  // The slot a new key takes in `set`: the lowest empty slot, else the one
  // with the smallest tick (ties: lowest index).
  size_t victim(uint32_t set) const {
    const size_t base = size_t{set} * set_slots;
    size_t best = base;
    for (size_t s = base; s < base + set_slots; ++s) {
      if (!(flags[s] & slot_valid)) return s;
      if (ticks[s] < ticks[best]) best = s;
    }
    return best;
  }

  void prefetch_set(uint32_t set) const {
    prefetch_bytes(keys.data() + size_t{set} * set_slots, set_slots * sizeof(uint64_t));
    prefetch_line(flags.data() + size_t{set} * set_slots);
  }
  void prefetch_record(size_t slot) { prefetch_bytes(record(slot), record_bytes); }
  // The set's ticks, which an insert's victim scan reads (4 lines at 32 slots).
  void prefetch_ticks(uint32_t set) const {
    prefetch_bytes(ticks.data() + size_t{set} * set_slots, set_slots * sizeof(uint64_t));
  }

  // Calls fn(first, last) for each run of equal keys in `order`. Rows of a
  // large cache are DRAM misses (a latency for the set's keys, another for
  // the record), so while one run is handled the loads of later ones are
  // started, counted in runs (a key's duplicates are one): the set `far`
  // runs ahead, and the record of the key `near` runs ahead if it is
  // resident (its set prefetched far - near runs before). `inserting` (an
  // insert, whose keys that are not resident take a victim slot): the set's
  // ticks come with it, and a key that is not resident gets its victim's
  // record prefetched instead (the insert writes it). Prefetches only: each
  // run finds its slot when its turn comes, so runs before it may change
  // its set first.
  template <bool inserting, class Fn>
  void for_each_key(Fn&& fn) {
    constexpr size_t far = 16, near = 8;
    const size_t n = order.size();
    // Run starts ahead: `far_at` is the start of the run `far` runs after
    // the current one, `near_at` of the one `near` runs after.
    auto next_run = [&](size_t at) {
      const uint64_t key = order[at].key;
      const uint32_t set = order[at].set;
      do ++at;
      while (at < n && order[at].key == key && order[at].set == set);
      return at;
    };
    auto prefetch_far = [&](size_t at) {
      prefetch_set(order[at].set);
      if constexpr (inserting) prefetch_ticks(order[at].set);
    };
    auto prefetch_near = [&](size_t at) {
      const batch_entry& ahead = order[at];
      if (const ptrdiff_t slot = find(ahead.set, ahead.key); slot >= 0)
        prefetch_record(static_cast<size_t>(slot));
      else if constexpr (inserting)
        prefetch_record(victim(ahead.set));
    };
    size_t far_at = 0, near_at = n;
    for (size_t r = 0; r < far && far_at < n; ++r) {
      if (r == near) near_at = far_at;
      prefetch_far(far_at);
      far_at = next_run(far_at);
    }
    for (size_t first = 0; first < n;) {
      if (far_at < n) {
        prefetch_far(far_at);
        far_at = next_run(far_at);
      }
      if (near_at < n) {
        prefetch_near(near_at);
        near_at = next_run(near_at);
      }
      const size_t last = next_run(first);
      fn(first, last);
      first = last;
    }
  }
};

cpu_cache::cpu_cache(row_layout layout, cache_geometry geometry)
    : impl_(std::make_unique<impl>(layout, geometry)) {}

cpu_cache::~cpu_cache() = default;

const row_layout& cpu_cache::layout() const { return impl_->layout; }
const cache_geometry& cpu_cache::geometry() const { return impl_->geometry; }
size_t cpu_cache::size() const { return impl_->resident; }

namespace {

// A query's lookup (query and query_weights): advances the tick, stamps
// each hit's slot and hands on_hit(position, record) its record; a miss's
// position goes to miss_indices. A query changes nothing but the touched
// slots' tick, which is the same for the whole batch (queries may overlap
// each other: the tick and the stamps are atomic): unlike insert and
// update it needs no set/key ordering, so keys are served in batch order.
template <class Impl, class OnHit>  // Impl: cpu_cache::impl (private, so deduced)
void for_each_hit(Impl& m, memory_span<const uint64_t> keys,
                  memory_span<uint32_t> miss_indices, cache_counts& counts, OnHit on_hit) {
  // Atomic (relaxed): queries may overlap (concurrent_queries()); on x86
  // the stamp is a plain store.
  const uint64_t tick =
      std::atomic_ref<uint64_t>(m.tick).fetch_add(1, std::memory_order_relaxed) + 1;
  // Rows of a large cache are DRAM misses: a row costs one memory latency
  // for its set's keys and another for its record. Keys go in blocks: the
  // block's set metadata is prefetched, then its slots found and their
  // records prefetched, then the hits handed on in batch order, so a
  // block's loads overlap instead of following each other.
  constexpr size_t block = 16;
  const size_t n = keys.size();
  size_t bases[block];     // each key's set: its first slot
  ptrdiff_t slots[block];  // each key's slot, or -1
  for (size_t first = 0; first < n; first += block) {
    const size_t count = std::min(block, n - first);
    const uint64_t* batch = keys.data() + first;
    for (size_t j = 0; j < count; ++j) {
      const uint32_t set = cache_set_of(batch[j], m.geometry.sets);
      bases[j] = size_t{set} * m.set_slots;
      m.prefetch_set(set);
    }
    for (size_t j = 0; j < count; ++j) {
      slots[j] = m.find_from(bases[j], batch[j]);
      if (slots[j] >= 0) m.prefetch_record(static_cast<size_t>(slots[j]));
    }
    for (size_t j = 0; j < count; ++j) {
      const size_t i = first + j;
      if (slots[j] < 0) {
        miss_indices.data()[counts.misses++] = static_cast<uint32_t>(i);
        continue;
      }
      const auto slot = static_cast<size_t>(slots[j]);
      std::atomic_ref<uint64_t>(m.ticks[slot]).store(tick, std::memory_order_relaxed);
      on_hit(i, m.record(slot));
      ++counts.hits;
    }
  }
}

}  // namespace

void cpu_cache::query(memory_span<const uint64_t> keys, memory_span<std::byte> rows,
                      memory_span<uint32_t> miss_indices, cache_counts& counts,
                      cache_completion done) {
  counts = {};
  auto finish = [&](status st) {
    if (done) done(std::move(st));
  };
  impl& m = *impl_;
  const size_t n = keys.size();
  if (!is_host(keys) || !is_host(rows) || !is_host(miss_indices))
    return finish(bad_argument("query: buffers must be host memory"));
  if (n > UINT32_MAX) return finish(bad_argument("query: batch larger than 2^32 keys"));
  if (rows.size() < n * m.record_bytes)
    return finish(bad_argument("query: rows buffer holds fewer than keys.size() records"));
  if (miss_indices.size() < n)
    return finish(bad_argument("query: miss_indices capacity below keys.size()"));

  for_each_hit(m, keys, miss_indices, counts, [&](size_t i, const std::byte* record) {
    std::memcpy(rows.data() + i * m.record_bytes, record, m.record_bytes);
  });
  finish({});
}

void cpu_cache::query_weights(memory_span<const uint64_t> keys, memory_span<std::byte> versions,
                              memory_span<std::byte> weights, memory_span<uint32_t> miss_indices,
                              cache_counts& counts, cache_completion done) {
  counts = {};
  auto finish = [&](status st) {
    if (done) done(std::move(st));
  };
  impl& m = *impl_;
  const size_t n = keys.size();
  if (auto ok = check_query_weights(*this, n, keys.kind(), versions, weights, miss_indices); !ok)
    return finish(std::move(ok));
  if (n > UINT32_MAX) return finish(bad_argument("query: batch larger than 2^32 keys"));
  for_each_hit(m, keys, miss_indices, counts, [&](size_t i, const std::byte* record) {
    copy_version_and_weights(record, m.layout.dim, i, versions.data(), weights.data());
  });
  finish({});
}

void cpu_cache::insert(memory_span<const uint64_t> keys, memory_span<const std::byte> rows,
                       bool dirty, memory_span<uint64_t> evicted_keys,
                       memory_span<std::byte> evicted_rows, cache_counts& counts,
                       cache_completion done) {
  counts = {};
  auto finish = [&](status st) {
    if (done) done(std::move(st));
  };
  impl& m = *impl_;
  const size_t n = keys.size();
  if (!is_host(keys) || !is_host(rows) || !is_host(evicted_keys) || !is_host(evicted_rows))
    return finish(bad_argument("insert: buffers must be host memory"));
  if (n > UINT32_MAX) return finish(bad_argument("insert: batch larger than 2^32 keys"));
  if (rows.size() < n * m.record_bytes)
    return finish(bad_argument("insert: rows buffer holds fewer than keys.size() records"));
  if (evicted_keys.size() < n || evicted_rows.size() < n * m.record_bytes)
    return finish(bad_argument("insert: evicted buffers hold fewer than keys.size() rows"));

  ++m.tick;
  m.sort_batch(keys.data(), n);
  const uint8_t new_flags = dirty ? (slot_valid | slot_dirty) : slot_valid;
  m.for_each_key<true>([&](size_t first, size_t last) {
    const uint32_t set = m.order[first].set;
    const uint64_t key = m.order[first].key;
    // Duplicates collapse to the copy with the highest version (ties: the
    // first position); the others are skipped.
    const std::byte* best = rows.data() + size_t{m.order[first].pos} * m.record_bytes;
    for (size_t i = first + 1; i < last; ++i) {
      const std::byte* cand = rows.data() + size_t{m.order[i].pos} * m.record_bytes;
      if (meta_of(cand).version > meta_of(best).version) best = cand;
    }
    counts.skipped += static_cast<uint32_t>(last - first - 1);

    ptrdiff_t found = m.find(set, key);
    if (found >= 0) {
      const size_t slot = static_cast<size_t>(found);
      m.ticks[slot] = m.tick;
      row_meta& resident = meta_of(m.record(slot));
      if (meta_of(best).version > resident.version) {
        std::memcpy(m.record(slot), best, m.record_bytes);
        m.flags[slot] = new_flags;
        ++counts.replaced;
      } else {
        // The same row again (a refresh): it keeps its bytes, but takes the
        // newer access metadata (the cache tier stamps when it fetched).
        if (meta_of(best).version == resident.version && meta_of(best).tick > resident.tick) {
          resident.tick = meta_of(best).tick;
          resident.freq = meta_of(best).freq;
        }
        ++counts.skipped;
      }
      return;
    }
    const size_t slot = m.victim(set);
    if (m.flags[slot] & slot_valid) {
      if (m.flags[slot] & slot_dirty) {
        evicted_keys.data()[counts.evicted] = m.keys[slot];
        std::memcpy(evicted_rows.data() + size_t{counts.evicted} * m.record_bytes, m.record(slot),
                    m.record_bytes);
        ++counts.evicted;
      }
      --m.resident;
    }
    m.keys[slot] = key;
    m.ticks[slot] = m.tick;
    m.flags[slot] = new_flags;
    std::memcpy(m.record(slot), best, m.record_bytes);
    ++m.resident;
  });
  finish({});
}

void cpu_cache::update(memory_span<const uint64_t> keys, memory_span<const float> grads,
                       const optimizer_config& optimizer, memory_span<uint32_t> miss_indices,
                       cache_counts& counts, cache_completion done) {
  counts = {};
  auto finish = [&](status st) {
    if (done) done(std::move(st));
  };
  impl& m = *impl_;
  const size_t n = keys.size();
  const size_t dim = m.layout.dim;
  if (!is_host(keys) || !is_host(grads) || !is_host(miss_indices))
    return finish(bad_argument("update: buffers must be host memory"));
  if (n > UINT32_MAX) return finish(bad_argument("update: batch larger than 2^32 keys"));
  if (grads.size() < n * dim)
    return finish(bad_argument("update: grads hold fewer than keys.size() x dim floats"));
  if (miss_indices.size() < n)
    return finish(bad_argument("update: miss_indices capacity below keys.size()"));
  if (optimizer.kind != m.layout.optimizer)
    return finish(bad_argument("update: optimizer " + std::string(to_string(optimizer.kind)) +
                               " does not match the layout's " +
                               std::string(to_string(m.layout.optimizer))));
  if (!m.layout.with_state && m.layout.optimizer != optimizer_kind::sgd)
    return finish(bad_argument("update: serving layout carries no optimizer state"));

  ++m.tick;
  m.sort_batch(keys.data(), n);
  m.missed.assign(n, 0);
  m.grad_sum.resize(dim);
  m.for_each_key<false>([&](size_t first, size_t last) {
    const ptrdiff_t found = m.find(m.order[first].set, m.order[first].key);
    if (found < 0) {
      for (size_t i = first; i < last; ++i) m.missed[m.order[i].pos] = 1;
      return;
    }
    const size_t slot = static_cast<size_t>(found);
    // Sum in batch order: order[first..last) is sorted by position.
    float* sum = m.grad_sum.data();
    std::memcpy(sum, grads.data() + size_t{m.order[first].pos} * dim, dim * sizeof(float));
    for (size_t i = first + 1; i < last; ++i) {
      const float* g = grads.data() + size_t{m.order[i].pos} * dim;
      for (size_t j = 0; j < dim; ++j) sum[j] += g[j];
    }
    apply_optimizer(optimizer, m.layout, m.record(slot), sum);
    m.ticks[slot] = m.tick;
    m.flags[slot] |= slot_dirty;
  });
  for (size_t i = 0; i < n; ++i) {
    if (m.missed[i])
      miss_indices.data()[counts.misses++] = static_cast<uint32_t>(i);
    else
      ++counts.hits;
  }
  finish({});
}

void cpu_cache::dump(memory_span<uint64_t> keys_out, memory_span<std::byte> rows_out,
                     bool include_clean, bool clear_dirty, cache_counts& counts,
                     cache_completion done) {
  counts = {};
  auto finish = [&](status st) {
    if (done) done(std::move(st));
  };
  impl& m = *impl_;
  if (!is_host(keys_out) || !is_host(rows_out))
    return finish(bad_argument("dump: buffers must be host memory"));
  if (keys_out.size() < m.resident || rows_out.size() < m.resident * m.record_bytes)
    return finish(bad_argument("dump: output buffers hold fewer than size() rows"));

  for (size_t slot = 0; slot < m.flags.size(); ++slot) {
    const uint8_t f = m.flags[slot];
    if (!(f & slot_valid)) continue;
    if (!include_clean && !(f & slot_dirty)) continue;
    keys_out.data()[counts.hits] = m.keys[slot];
    std::memcpy(rows_out.data() + size_t{counts.hits} * m.record_bytes, m.record(slot),
                m.record_bytes);
    ++counts.hits;
    if (clear_dirty) m.flags[slot] = slot_valid;
  }
  finish({});
}

void cpu_cache::clear() {
  std::fill(impl_->flags.begin(), impl_->flags.end(), uint8_t{0});
  impl_->resident = 0;
}

}  // namespace strata
