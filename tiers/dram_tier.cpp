#include "tiers/dram_tier.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "common/hash.hpp"
#include "common/prefetch.hpp"

// Memory map of a tier with R-byte records and C = capacity_rows slots:
//
//   arena       C x R     records, slot s at s * R
//   index       B x 16 B  (key, slot + 1) buckets, 0 = empty; B = 2C + 1
//   slot_keys   C x 8 B   key of an occupied slot; next free slot of a free one
//   pin_epochs  C x 4 B   store() batch that last wrote the slot
//   bitmaps     3 x C bits occupied, CLOCK reference, dirty
//   lfu heap    C x 12 B + C x 4 B positions (LFU only)
//
// Big arrays are anonymous mappings: zero-filled lazily by the kernel (an
// all-zero index is empty), huge pages advised, since lookups are random
// accesses over gigabytes and would otherwise be bound by TLB misses.
// memory_bytes() counts them page-rounded; small arrays come from the heap.

namespace strata {
namespace {

constexpr uint32_t no_slot = std::numeric_limits<uint32_t>::max();
constexpr uint32_t aside_bit = uint32_t{1} << 31;  // LFU heap entry set aside
constexpr size_t max_rows = aside_bit - 1;
constexpr size_t line_bytes = 64;

// Arrays from this size on are anonymous mappings (page-granular); smaller
// ones come from the heap, so small tiers are sized to the byte.
constexpr size_t map_threshold = size_t{1} << 20;

size_t allocated_bytes(size_t bytes) {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return bytes < map_threshold ? bytes : (bytes + page - 1) / page * page;
}

inline uint64_t slot_hash(uint64_t key) { return dram_slot_hash(key); }

// Buckets for `rows` keys: load factor <= 0.5 at capacity (a hit probes
// 1.5 buckets on average, so it rarely spills into a second, unprefetched
// cache line; measured ~17% faster lookups than 0.75 for ~11 more bytes a
// row), and always one empty bucket so that every probe terminates.
size_t bucket_count(size_t rows) { return 2 * rows + 1; }
size_t bitmap_words(size_t rows) { return (rows + 63) / 64; }

// A zero-filled array of bytes.
class zeroed_array {
 public:
  explicit zeroed_array(size_t bytes) : bytes_(allocated_bytes(bytes)) {
    if (bytes_ == 0) return;
    if (bytes_ < map_threshold) {
      data_ = static_cast<std::byte*>(::operator new (bytes_, std::align_val_t{line_bytes}));
      std::memset(data_, 0, bytes_);
      return;
    }
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    (void)::madvise(p, bytes_, MADV_HUGEPAGE);  // a hint; refusal is harmless
    data_ = static_cast<std::byte*>(p);
  }
  ~zeroed_array() {
    if (data_ == nullptr) return;
    if (bytes_ < map_threshold) {
      ::operator delete (data_, std::align_val_t{line_bytes});
    } else {
      ::munmap(data_, bytes_);
    }
  }
  zeroed_array(const zeroed_array&) = delete;
  zeroed_array& operator=(const zeroed_array&) = delete;

  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

struct bucket {
  uint64_t key;
  uint32_t slot1;  // slot + 1; 0 marks an empty bucket
  uint32_t unused;
};
static_assert(sizeof(bucket) == 16);

// LFU heap entry: the (freq, tick) the heap was last ordered by. It may lag
// behind the record (hits only raise freq and tick), never lead it.
struct lfu_entry {
  uint32_t freq;
  uint32_t tick;
  uint32_t slot;  // | aside_bit while set aside for the current store batch
};
static_assert(sizeof(lfu_entry) == 12);

inline bool test_bit(const std::vector<uint64_t>& bits, uint32_t i) {
  return (bits[i >> 6] >> (i & 63)) & 1u;
}
inline void set_bit(std::vector<uint64_t>& bits, uint32_t i) {
  bits[i >> 6] |= uint64_t{1} << (i & 63);
}
inline void clear_bit(std::vector<uint64_t>& bits, uint32_t i) {
  bits[i >> 6] &= ~(uint64_t{1} << (i & 63));
}

}  // namespace

struct dram_tier::impl {
  impl(row_layout layout_in, dram_tier_config config_in)
      : layout(layout_in),
        config(config_in),
        lfu(config.policy == eviction_policy::lfu),
        record_bytes(layout.record_bytes()),
        rows(rows_for_budget(layout, config.policy, config.capacity_bytes)),
        buckets(bucket_count(rows)),
        arena(rows * record_bytes),
        index(buckets * sizeof(bucket)),
        slot_keys(rows * sizeof(uint64_t)),
        pin_epochs(rows * sizeof(uint32_t)),
        heap(lfu ? rows * sizeof(lfu_entry) : 0),
        heap_pos(lfu ? rows * sizeof(uint32_t) : 0),
        occupied(bitmap_words(rows)),
        referenced(bitmap_words(rows)),
        dirty(bitmap_words(rows)),
        idx(index.as<bucket>()),
        keys_of(slot_keys.as<uint64_t>()),
        pins(pin_epochs.as<uint32_t>()),
        heap_entries(heap.as<lfu_entry>()),
        positions(heap_pos.as<uint32_t>()) {}

  // --- sizing -------------------------------------------------------------
  static size_t footprint(const row_layout& layout, eviction_policy policy, size_t rows) {
    const bool lfu = policy == eviction_policy::lfu;
    size_t bytes = sizeof(impl);
    bytes += allocated_bytes(rows * layout.record_bytes());
    bytes += allocated_bytes(bucket_count(rows) * sizeof(bucket));
    bytes += allocated_bytes(rows * sizeof(uint64_t));
    bytes += allocated_bytes(rows * sizeof(uint32_t));
    if (lfu) {
      bytes += allocated_bytes(rows * sizeof(lfu_entry));
      bytes += allocated_bytes(rows * sizeof(uint32_t));
    }
    bytes += 3 * bitmap_words(rows) * sizeof(uint64_t);
    return bytes;
  }

  // The most rows whose footprint fits the budget (footprint grows with rows).
  static size_t rows_for_budget(const row_layout& layout, eviction_policy policy, size_t budget) {
    if (footprint(layout, policy, 0) > budget) return 0;
    size_t lo = 0;                                                           // fits
    size_t hi = std::min(budget / layout.record_bytes() + 1, max_rows + 1);  // does not fit
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      if (footprint(layout, policy, mid) <= budget) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  // --- index --------------------------------------------------------------
  size_t home(uint64_t key) const { return reduce(slot_hash(key), buckets); }
  size_t next(size_t b) const { return b + 1 == buckets ? 0 : b + 1; }

  uint32_t find(uint64_t key, size_t b) const {
    for (;;) {
      const bucket& e = idx[b];
      if (e.slot1 == 0) return no_slot;
      if (e.key == key) return e.slot1 - 1;
      b = next(b);
    }
  }
  uint32_t find(uint64_t key) const { return find(key, home(key)); }

  void index_insert(uint64_t key, uint32_t slot, size_t b) {
    while (idx[b].slot1 != 0) b = next(b);
    idx[b] = bucket{key, slot + 1, 0};
  }

  // Backward-shift deletion: later entries of the probe run move up into the
  // hole unless that would put them before their home bucket.
  void index_erase(uint64_t key) {
    size_t i = home(key);
    while (idx[i].key != key || idx[i].slot1 == 0) {
      STRATA_ASSERT(idx[i].slot1 != 0, "dram tier: erasing a key missing from the index");
      i = next(i);
    }
    for (size_t j = next(i);; j = next(j)) {
      if (idx[j].slot1 == 0) break;
      const size_t h = home(idx[j].key);
      const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      idx[i] = idx[j];
      i = j;
    }
    idx[i] = bucket{};
  }

  // --- records and access ---------------------------------------------------
  std::byte* record(uint32_t slot) const { return arena.data() + size_t{slot} * record_bytes; }

  // Every cache line of a record: one prefetch per 64 bytes, plus its last
  // byte's line (records need not start on a line).
  void prefetch_record(uint32_t slot) const {
    const std::byte* rec = record(slot);
    for (size_t off = 0; off < record_bytes; off += line_bytes) prefetch_line(rec + off);
    prefetch_line(rec + record_bytes - 1);
  }

  void touch(uint32_t slot, std::byte* rec) {
    row_meta& m = meta_of(rec);
    if (m.freq != std::numeric_limits<uint32_t>::max()) ++m.freq;
    const bool tick_went_back = now < m.tick;
    m.tick = now;
    if (lfu) {
      // The heap tolerates entries lagging behind their rows, not ahead of
      // them: a tick that went back needs an eager repair.
      if (tick_went_back) refresh_entry(slot);
    } else {
      set_bit(referenced, slot);
    }
  }

  // Walks keys in three staggered stages so that memory latency overlaps:
  // hash and prefetch the home bucket, `index_ahead` keys later probe and
  // prefetch the record, `row_ahead` keys later hand the hit or miss on.
  // The index must not change during the walk.
  template <class Hit, class Miss>
  void probe_batch(std::span<const uint64_t> keys, Hit&& hit, Miss&& miss) const {
    constexpr size_t index_ahead = 16;
    constexpr size_t row_ahead = 8;
    constexpr size_t ring = 32;  // > index_ahead and > row_ahead
    size_t homes[ring];
    uint32_t slots[ring];
    const size_t n = keys.size();
    for (size_t i = 0; i < n + index_ahead + row_ahead; ++i) {
      if (i < n) {
        const size_t b = home(keys[i]);
        homes[i % ring] = b;
        prefetch_line(&idx[b]);
      }
      if (i >= index_ahead && i - index_ahead < n) {
        const size_t j = i - index_ahead;
        const uint32_t s = find(keys[j], homes[j % ring]);
        slots[j % ring] = s;
        if (s != no_slot) prefetch_record(s);
      }
      if (i >= index_ahead + row_ahead) {
        const size_t k = i - index_ahead - row_ahead;
        const uint32_t s = slots[k % ring];
        if (s == no_slot) {
          miss(k);
        } else {
          hit(k, s);
        }
      }
    }
  }

  // --- LFU heap --------------------------------------------------------------
  static uint32_t slot_of(const lfu_entry& e) { return e.slot & ~aside_bit; }

  bool heap_less(const lfu_entry& a, const lfu_entry& b) const {
    const bool a_aside = (a.slot & aside_bit) != 0;
    const bool b_aside = (b.slot & aside_bit) != 0;
    if (a_aside != b_aside) return b_aside;
    if (a.freq != b.freq) return a.freq < b.freq;
    if (a.tick != b.tick) return a.tick < b.tick;
    return keys_of[slot_of(a)] < keys_of[slot_of(b)];
  }
  void heap_place(size_t pos, const lfu_entry& e) {
    heap_entries[pos] = e;
    positions[slot_of(e)] = static_cast<uint32_t>(pos);
  }
  void sift_up(size_t pos) {
    const lfu_entry e = heap_entries[pos];
    while (pos > 0) {
      const size_t parent = (pos - 1) / 2;
      if (!heap_less(e, heap_entries[parent])) break;
      heap_place(pos, heap_entries[parent]);
      pos = parent;
    }
    heap_place(pos, e);
  }
  void sift_down(size_t pos) {
    const lfu_entry e = heap_entries[pos];
    for (;;) {
      size_t child = 2 * pos + 1;
      if (child >= heap_size) break;
      if (child + 1 < heap_size && heap_less(heap_entries[child + 1], heap_entries[child])) ++child;
      if (!heap_less(heap_entries[child], e)) break;
      heap_place(pos, heap_entries[child]);
      pos = child;
    }
    heap_place(pos, e);
  }
  void heap_push(uint32_t slot) {
    const row_meta& m = meta_of(record(slot));
    heap_place(heap_size, lfu_entry{m.freq, m.tick, slot});
    sift_up(heap_size++);
  }
  void heap_remove(uint32_t slot) {
    const size_t pos = positions[slot];
    const lfu_entry last = heap_entries[--heap_size];
    if (pos == heap_size) return;
    heap_place(pos, last);
    sift_up(pos);
    sift_down(positions[slot_of(last)]);
  }
  // Re-orders a slot's entry by its record's current freq and tick.
  void refresh_entry(uint32_t slot) {
    const size_t pos = positions[slot];
    const row_meta& m = meta_of(record(slot));
    heap_entries[pos].freq = m.freq;
    heap_entries[pos].tick = m.tick;
    sift_up(pos);
    sift_down(positions[slot]);
  }

  bool pinned(uint32_t slot) const { return pins[slot] == epoch; }

  uint32_t lfu_victim() {
    for (;;) {
      STRATA_ASSERT(heap_size > 0, "dram tier: LFU heap empty while the tier is full");
      lfu_entry& top = heap_entries[0];
      const uint32_t slot = slot_of(top);
      if ((top.slot & aside_bit) != 0) return slot;  // every row is this batch's
      const row_meta& m = meta_of(record(slot));
      if (m.freq != top.freq || m.tick != top.tick) {
        top.freq = m.freq;
        top.tick = m.tick;
        sift_down(0);
        continue;
      }
      if (pinned(slot)) {
        top.slot |= aside_bit;
        sift_down(0);
        aside_pending = true;
        continue;
      }
      return slot;
    }
  }

  // Takes back the entries set aside during a store batch.
  void restore_aside(std::span<const uint64_t> keys) {
    for (uint64_t key : keys) {
      const uint32_t slot = find(key);
      if (slot == no_slot) continue;
      lfu_entry& e = heap_entries[positions[slot]];
      if ((e.slot & aside_bit) == 0) continue;
      e.slot &= ~aside_bit;
      sift_up(positions[slot]);
    }
    aside_pending = false;
  }

  uint32_t clock_victim() {
    size_t steps = 0;
    size_t unpinned = 0;
    for (;;) {
      const uint32_t slot = hand;
      // A whole sweep without a row from outside this batch: evict at the hand.
      if (steps == rows && unpinned == 0) {
        advance_hand();
        return slot;
      }
      advance_hand();
      ++steps;
      if (pinned(slot)) continue;
      ++unpinned;
      if (test_bit(referenced, slot)) {
        clear_bit(referenced, slot);
        continue;
      }
      return slot;
    }
  }
  void advance_hand() { hand = hand + 1 == rows ? 0 : hand + 1; }

  // --- slots -----------------------------------------------------------------
  // Unlinks an occupied slot from every structure; the caller reuses or frees it.
  void remove(uint32_t slot) {
    index_erase(keys_of[slot]);
    clear_bit(occupied, slot);
    clear_bit(referenced, slot);
    clear_bit(dirty, slot);
    if (lfu) heap_remove(slot);
    --size;
  }
  void free_slot(uint32_t slot) {
    keys_of[slot] = free_head;
    free_head = slot;
  }

  // A slot for a new row: a free one, a never used one, or a victim's.
  uint32_t allocate(row_buffer& spilled) {
    if (free_head != no_slot) {
      const uint32_t slot = free_head;
      free_head = static_cast<uint32_t>(keys_of[slot]);
      return slot;
    }
    if (fresh < rows) return fresh++;
    const uint32_t slot = lfu ? lfu_victim() : clock_victim();
    ++stats.evictions;
    if (test_bit(dirty, slot)) {
      spilled.append(keys_of[slot], record(slot));
      ++stats.dirty_evictions;
    }
    remove(slot);
    return slot;
  }

  void next_epoch() {
    if (++epoch == 0) {
      std::memset(pin_epochs.data(), 0, pin_epochs.bytes());
      epoch = 1;
    }
  }

  // Rows may be handed a default-constructed buffer; a non-empty buffer of
  // another layout is a caller bug worth reporting.
  status adopt(row_buffer& buffer, const char* what) const {
    if (buffer.layout() == layout) return {};
    if (!buffer.empty())
      return error(errc::invalid_argument,
                   std::string("dram tier: ") + what + " buffer holds rows of another layout");
    buffer = row_buffer(layout);
    return {};
  }

  const row_layout layout;
  const dram_tier_config config;
  const bool lfu;
  const size_t record_bytes;
  const size_t rows;
  const size_t buckets;
  zeroed_array arena;
  zeroed_array index;
  zeroed_array slot_keys;
  zeroed_array pin_epochs;
  zeroed_array heap;
  zeroed_array heap_pos;
  std::vector<uint64_t> occupied;
  std::vector<uint64_t> referenced;
  std::vector<uint64_t> dirty;
  bucket* const idx;
  uint64_t* const keys_of;
  uint32_t* const pins;
  lfu_entry* const heap_entries;
  uint32_t* const positions;

  size_t size = 0;
  uint32_t fresh = 0;            // slots [fresh, rows) were never used
  uint32_t free_head = no_slot;  // free list linked through keys_of
  uint32_t hand = 0;             // CLOCK hand
  uint32_t now = 0;              // current tick
  uint32_t epoch = 0;            // current store batch
  size_t heap_size = 0;
  bool aside_pending = false;
  dram_tier_stats stats;
};

dram_tier::dram_tier(row_layout layout, dram_tier_config config)
    : impl_(std::make_unique<impl>(layout, config)) {}

dram_tier::~dram_tier() = default;

const row_layout& dram_tier::layout() const { return impl_->layout; }

status dram_tier::lookup(std::span<const uint64_t> keys, rows_span out,
                         std::vector<uint32_t>& misses) {
  impl& t = *impl_;
  if (!keys.empty() && out.stride < t.record_bytes)
    return error(errc::invalid_argument, "dram tier lookup: output stride below record size");
  uint64_t missed = 0;
  t.probe_batch(
      keys,
      [&](size_t i, uint32_t slot) {
        std::byte* rec = t.record(slot);
        t.touch(slot, rec);
        std::memcpy(out[i], rec, t.record_bytes);
      },
      [&](size_t i) {
        misses.push_back(static_cast<uint32_t>(i));
        ++missed;
      });
  t.stats.hits += keys.size() - missed;
  t.stats.misses += missed;
  return {};
}

status dram_tier::store(std::span<const uint64_t> keys, const_rows_span rows, bool dirty,
                        row_buffer& spilled) {
  impl& t = *impl_;
  if (keys.empty()) return {};
  if (rows.stride < t.record_bytes)
    return error(errc::invalid_argument, "dram tier store: row stride below record size");
  STRATA_TRY(t.adopt(spilled, "spilled"));
  if (t.rows == 0)
    return error(errc::capacity_exceeded,
                 "dram tier store: capacity_bytes " + std::to_string(t.config.capacity_bytes) +
                     " holds no row of " + std::to_string(t.record_bytes) + " bytes");
  t.next_epoch();
  // Pin the batch's resident rows first, so that inserting its new keys
  // never evicts a row the batch is about to overwrite.
  t.probe_batch(
      keys, [&](size_t, uint32_t slot) { t.pins[slot] = t.epoch; }, [](size_t) {});
  constexpr size_t ahead = 8;
  constexpr size_t ring = 16;
  size_t homes[ring];
  const size_t n = keys.size();
  for (size_t i = 0; i < std::min(ahead, n); ++i) {
    homes[i % ring] = t.home(keys[i]);
    prefetch_line(&t.idx[homes[i % ring]]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + ahead < n) {
      homes[(i + ahead) % ring] = t.home(keys[i + ahead]);
      prefetch_line(&t.idx[homes[(i + ahead) % ring]]);
    }
    const uint64_t key = keys[i];
    const size_t home = homes[i % ring];
    uint32_t slot = t.find(key, home);
    if (slot == no_slot) {
      slot = t.allocate(spilled);
      t.index_insert(key, slot, home);
      t.keys_of[slot] = key;
      set_bit(t.occupied, slot);
      ++t.size;
      std::byte* rec = t.record(slot);
      std::memcpy(rec, rows[i], t.record_bytes);
      meta_of(rec).freq = 0;
      meta_of(rec).tick = t.now;
      t.touch(slot, rec);
      if (t.lfu) t.heap_push(slot);
    } else {
      std::byte* rec = t.record(slot);
      const row_meta before = meta_of(rec);
      std::memcpy(rec, rows[i], t.record_bytes);
      meta_of(rec).freq = before.freq;
      meta_of(rec).tick = before.tick;
      t.touch(slot, rec);
    }
    if (dirty) set_bit(t.dirty, slot);
    t.pins[slot] = t.epoch;
  }
  if (t.aside_pending) t.restore_aside(keys);
  return {};
}

status dram_tier::erase(std::span<const uint64_t> keys) {
  impl& t = *impl_;
  for (uint64_t key : keys) {
    const uint32_t slot = t.find(key);
    if (slot == no_slot) continue;
    t.remove(slot);
    t.free_slot(slot);
  }
  return {};
}

status dram_tier::take_dirty(row_buffer& out) {
  impl& t = *impl_;
  STRATA_TRY(t.adopt(out, "take_dirty"));
  for (size_t w = 0; w < t.dirty.size(); ++w) {
    uint64_t bits = t.dirty[w];
    while (bits != 0) {
      const auto slot = static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits)));
      bits &= bits - 1;
      out.append(t.keys_of[slot], t.record(slot));
    }
    t.dirty[w] = 0;
  }
  return {};
}

status dram_tier::dump(const row_visitor& visit) {
  const impl& t = *impl_;
  for (size_t w = 0; w < t.occupied.size(); ++w) {
    uint64_t bits = t.occupied[w];
    while (bits != 0) {
      const auto slot = static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits)));
      bits &= bits - 1;
      visit(t.keys_of[slot], t.record(slot));
    }
  }
  return {};
}

size_t dram_tier::size() const { return impl_->size; }

status dram_tier::push(std::span<const uint64_t> keys, const float* grads, size_t grad_stride,
                       const optimizer_config& optimizer, std::vector<uint32_t>& misses) {
  impl& t = *impl_;
  if (keys.empty()) return {};
  if (!t.layout.with_state)
    return error(errc::invalid_argument, "dram tier push: the layout has no optimizer state");
  if (optimizer.kind != t.layout.optimizer)
    return error(errc::invalid_argument,
                 "dram tier push: optimizer " + std::string(to_string(optimizer.kind)) +
                     " does not match the layout's " + std::string(to_string(t.layout.optimizer)));
  if (grad_stride < t.layout.dim)
    return error(errc::invalid_argument, "dram tier push: gradient stride below dim");
  t.probe_batch(
      keys,
      [&](size_t i, uint32_t slot) {
        std::byte* rec = t.record(slot);
        apply_optimizer(optimizer, t.layout, rec, grads + i * grad_stride);
        t.touch(slot, rec);
        set_bit(t.dirty, slot);
      },
      [&](size_t i) { misses.push_back(static_cast<uint32_t>(i)); });
  return {};
}

bool dram_tier::contains(uint64_t key) const { return impl_->find(key) != no_slot; }

void dram_tier::set_tick(uint32_t tick) { impl_->now = tick; }

void dram_tier::expire(std::vector<uint64_t>& expired) {
  impl& t = *impl_;
  if (t.config.ttl_ticks == 0) return;
  for (uint32_t slot = 0; slot < t.fresh; ++slot) {
    if (!test_bit(t.occupied, slot)) continue;
    const uint32_t tick = meta_of(t.record(slot)).tick;
    if (t.now < tick || t.now - tick <= t.config.ttl_ticks) continue;
    expired.push_back(t.keys_of[slot]);
    t.remove(slot);
    t.free_slot(slot);
    ++t.stats.expired;
  }
}

size_t dram_tier::capacity_rows() const { return impl_->rows; }

size_t dram_tier::memory_bytes() const {
  return impl::footprint(impl_->layout, impl_->config.policy, impl_->rows);
}

const dram_tier_stats& dram_tier::stats() const { return impl_->stats; }

size_t dram_tier::budget_for_rows(const row_layout& layout, eviction_policy policy, size_t rows) {
  return impl::footprint(layout, policy, rows);
}

}  // namespace strata
