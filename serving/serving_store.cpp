#include "serving/serving_store.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "actors/checkpoint.hpp"
#include "common/file_manifest.hpp"
#include "common/writer_first_mutex.hpp"
#include "serving/metadata_requests.hpp"

namespace strata::serving {

namespace fs = std::filesystem;

namespace {

// The CPU backend completes at once; a device backend calls back later, so
// wait for the completion either way.
status run_cache_call(const std::function<void(cache_completion)>& call) {
  std::optional<status> result;
  call([&](status s) { result = std::move(s); });
  STRATA_ASSERT(result.has_value(), "the cache backend must complete host calls synchronously");
  return *result;
}

// A cache query's miss positions: the calling thread's own (lookups of a
// store may run at once), no allocation once grown.
std::vector<uint32_t>& miss_scratch() {
  thread_local std::vector<uint32_t> misses;
  return misses;
}

// The rows fetch_misses() found for the cache's misses: the calling thread's
// own, no allocation once grown.
std::vector<std::byte>& found_scratch() {
  thread_local std::vector<std::byte> found;
  return found;
}
// After a large batch (16384 misses leave ~4 MiB; a checkpoint's warm-up
// more), don't keep that on every connection thread.
void trim_scratch(std::vector<std::byte>& scratch) {
  if (scratch.capacity() > (size_t{1} << 20)) std::vector<std::byte>().swap(scratch);
}

// What prepare_directory may delete: the marker and LMDB's two files.
bool own_file(const std::string& name) {
  return name == serving_marker_name || name == "data.mdb" || name == "lock.mdb";
}

// What a directory that is not the serving store's looks like, for the error.
std::string what_it_looks_like(const std::vector<std::string>& names) {
  bool data = false;
  for (const auto& n : names) {
    if (n.rfind("shard-", 0) == 0) return " (it looks like the shards' ssd_path)";
    if (n.rfind("ckpt-", 0) == 0) return " (it looks like a checkpoint root)";
    if (n == actors::checkpoint_meta_name || n == file_manifest_name)
      return " (it looks like a checkpoint)";
    if (n == "data.mdb") data = true;
  }
  if (data)
    return " (an LMDB environment the serving store did not mark: a shard's, or a serving copy "
           "made before strata marked its own, which you may delete yourself)";
  return "";
}

}  // namespace

status prepare_directory(const fs::path& path) {
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return error(errc::io_error, path.string() + ": serving lmdb_path: " + ec.message());
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      return error(errc::invalid_argument, path.string() +
                                               ": serving lmdb_path is not a directory; point "
                                               "serving.lmdb_path at a new or empty directory");
    // Only ever delete the store's own files: a lmdb_path that names the
    // shards' ssd_path or a checkpoint must not wipe them.
    std::vector<std::string> names, foreign;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      names.push_back(it->path().filename().string());
      if (!own_file(names.back())) foreign.push_back(names.back());
    }
    if (ec)
      return error(errc::io_error,
                   path.string() + ": cannot list the serving lmdb_path: " + ec.message());
    const bool marked = std::find(names.begin(), names.end(), serving_marker_name) != names.end();
    if (!names.empty() && (!foreign.empty() || !marked)) {
      std::sort(foreign.begin(), foreign.end());
      std::string found;
      const auto& shown = foreign.empty() ? names : foreign;
      for (size_t i = 0; i < shown.size() && i < 5; ++i) found += (i ? ", " : "") + shown[i];
      if (shown.size() > 5) found += ", ... (" + std::to_string(shown.size()) + " entries)";
      return error(errc::invalid_argument,
                   path.string() +
                       ": serving lmdb_path holds files the serving store did not "
                       "write (" +
                       found + ")" + what_it_looks_like(names) +
                       "; nothing was removed. Point serving.lmdb_path at a new or empty "
                       "directory of its own (default: ssd_path/serving)");
    }
    for (const auto& n : names) {
      if (n == serving_marker_name) continue;
      fs::remove(path / n, ec);
      if (ec)
        return error(errc::io_error,
                     (path / n).string() + ": cannot clear the serving LMDB: " + ec.message());
    }
  } else {
    fs::create_directories(path, ec);
    if (ec)
      return error(errc::io_error,
                   path.string() + ": cannot create the serving lmdb_path: " + ec.message());
  }
  const fs::path marker = path / serving_marker_name;
  if (!fs::exists(marker, ec)) {
    std::ofstream out(marker);
    out << "strata serving store: this directory's data.mdb is rebuilt from a checkpoint at "
           "every start\n";
    if (!out.flush())
      return error(errc::io_error, marker.string() + ": cannot write the serving store's marker");
  }
  return {};
}

struct serving_store::impl {
  serving_store_config config;
  row_layout layout;
  std::unique_ptr<cache_backend> cache;
  std::unique_ptr<dram_tier> dram;
  std::unique_ptr<lmdb_tier> lmdb;
  // Locking (serving_store.hpp): a lookup, its misses included, holds
  // `mutex` shared when the backend allows concurrent queries (miss_mutex
  // below); a synchronous insert and everything else hold it exclusively.
  // `stats` and the hit-rate window are written by shared holders too, so
  // those writes also hold stats_mutex; writes under the exclusive lock
  // need not. Writers first: lookups' shared holds (LMDB reads) overlap,
  // and with std::shared_mutex a steady stream of them kept updates and
  // queued inserts out indefinitely.
  mutable writer_first_mutex mutex;
  mutable std::mutex stats_mutex;
  serving_stats stats;
  // Hit rate over the last window: the previous full window and the current one.
  uint64_t window_hits = 0, window_keys = 0;
  double last_rate = 0.0;
  // Rows queued for an asynchronous cache insert; `queued` says whether
  // there are any, read without the lock (has_pending(), after every
  // lookup).
  row_buffer pending;
  std::atomic<bool> queued{false};
  // Scratch buffer reused across calls (exclusive lock).
  std::vector<std::byte> records;

  // A lookup's misses run under the shared lock too (lookup()). The DRAM
  // tier (whose lookups stamp LRU ticks and count), the promotion into it
  // and the queue of cache inserts are taken in turn under `miss_mutex`;
  // the LMDB reads in between run side by side, each through a handle of
  // its own (its own MDB_NOTLS read transaction) lent from `idle_readers`.
  // Exclusive holders use `dram` and `lmdb` directly (no shared holder can
  // be inside a miss then).
  std::mutex miss_mutex;
  lmdb_tier_config reader_config;  // the store's environment, shared_handle
  std::mutex readers_mutex;
  std::condition_variable reader_returned;
  std::vector<std::unique_ptr<lmdb_tier>> idle_readers;
  size_t reader_handles = 0;  // opened: idle or lent
  uint64_t reader_waits = 0;  // borrows that found every handle lent
  // LMDB gives each open read transaction a slot of its reader table (126 by
  // default); a connection thread holds one handle at most, and beyond
  // config.lmdb_read_handles concurrent misses the reads queue for a handle.

  // A read handle lent to one lookup's misses, given back when it goes.
  struct lent_reader {
    impl* owner = nullptr;
    std::unique_ptr<lmdb_tier> handle;
    lent_reader() = default;
    lent_reader(impl* o, std::unique_ptr<lmdb_tier> h) : owner(o), handle(std::move(h)) {}
    lent_reader(lent_reader&&) = default;
    ~lent_reader() {
      if (!handle) return;
      std::lock_guard lock(owner->readers_mutex);
      owner->idle_readers.push_back(std::move(handle));
      owner->reader_returned.notify_one();
    }
  };

  expected<lent_reader> borrow_reader() {
    std::unique_lock lock(readers_mutex);
    auto available = [&] {
      return !idle_readers.empty() || reader_handles < config.lmdb_read_handles;
    };
    if (!available()) {
      ++reader_waits;
      reader_returned.wait(lock, available);
    }
    if (!idle_readers.empty()) {
      lent_reader lent(this, std::move(idle_readers.back()));
      idle_readers.pop_back();
      return lent;
    }
    ++reader_handles;
    lock.unlock();
    auto opened = lmdb_tier::open(layout, reader_config);
    if (!opened) {
      lock.lock();
      --reader_handles;
      reader_returned.notify_one();
      return opened.err();
    }
    return lent_reader(this, std::move(*opened));
  }

  size_t record_bytes() const { return layout.record_bytes(); }

  double hit_rate() const {
    if (window_keys == 0) return last_rate;
    const double current = double(window_hits) / double(window_keys);
    // Blend the finished window with the current one by its fill.
    const double fill = double(window_keys) / double(config.hit_rate_window);
    return fill * current + (1 - fill) * last_rate;
  }
  void count(uint64_t hits, uint64_t keys) {
    window_hits += hits;
    window_keys += keys;
    if (window_keys >= config.hit_rate_window) {
      last_rate = double(window_hits) / double(window_keys);
      window_hits = window_keys = 0;
    }
  }

  void default_row(std::byte* record) const {
    meta_of(record) = row_meta{};
    std::fill_n(weights_of(record), layout.dim, config.default_value);
  }

  status cache_insert(std::span<const uint64_t> keys, const std::byte* rows) {
    if (keys.empty()) return {};
    std::vector<uint64_t> evicted_keys(keys.size());
    std::vector<std::byte> evicted_rows(keys.size() * record_bytes());
    cache_counts counts;
    return run_cache_call([&](cache_completion done) {
      cache->insert(host_span(keys),
                    host_span(std::span<const std::byte>(rows, keys.size() * record_bytes())),
                    false, host_span(std::span<uint64_t>(evicted_keys)),
                    host_span(std::span<std::byte>(evicted_rows)), counts, std::move(done));
    });
  }

  // Fills records[i] for every key; returns rows fetched below the cache
  // (not defaults) in `fetched`.
  status fetch(std::span<const uint64_t> keys, std::byte* out, row_buffer& fetched,
               uint64_t& cache_hits) {
    const size_t n = keys.size();
    const size_t rb = record_bytes();
    auto& misses = miss_scratch();
    misses.resize(n);
    cache_counts counts;
    STRATA_TRY(run_cache_call([&](cache_completion done) {
      cache->query(host_span(keys), host_span(std::span<std::byte>(out, n * rb)),
                   host_span(std::span<uint32_t>(misses)), counts, std::move(done));
    }));
    cache_hits = counts.hits;
    misses.resize(counts.misses);
    if (misses.empty()) return {};
    auto& found = found_scratch();
    STRATA_TRY(fetch_misses(keys, misses, found, fetched, /*exclusive=*/true));
    for (size_t j = 0; j < misses.size(); ++j)
      std::memcpy(out + size_t{misses[j]} * rb, found.data() + j * rb, rb);
    trim_scratch(found);
    return {};
  }

  // The rows of the cache's misses (`misses`: positions in keys) from
  // DRAM, then LMDB (promoted to DRAM), else the default row, into `found`
  // (one record per miss, in order); those found below the cache (not
  // defaults) are appended to `fetched`. Safe under the store's lock held
  // shared (see miss_mutex) or, `exclusive`, exclusively (LMDB is then read
  // through `lmdb` itself).
  status fetch_misses(std::span<const uint64_t> keys, std::span<const uint32_t> misses,
                      std::vector<std::byte>& found, row_buffer& fetched, bool exclusive) {
    const size_t rb = record_bytes();
    std::vector<uint64_t> miss_keys(misses.size());
    for (size_t j = 0; j < misses.size(); ++j) miss_keys[j] = keys[misses[j]];
    found.resize(miss_keys.size() * rb);
    std::vector<uint32_t> dram_misses;
    {
      std::lock_guard turn(miss_mutex);
      STRATA_TRY(dram->lookup(miss_keys, rows_span{found.data(), rb}, dram_misses));
    }
    std::vector<uint8_t> is_default(miss_keys.size(), 0);
    size_t lmdb_hits = 0, defaults = 0;
    if (!dram_misses.empty()) {
      std::vector<uint64_t> lower_keys(dram_misses.size());
      for (size_t j = 0; j < dram_misses.size(); ++j) lower_keys[j] = miss_keys[dram_misses[j]];
      std::vector<std::byte> lower(lower_keys.size() * rb);
      std::vector<uint32_t> lmdb_misses;
      if (exclusive) {
        STRATA_TRY(lmdb->lookup(lower_keys, rows_span{lower.data(), rb}, lmdb_misses));
      } else {
        auto reader = borrow_reader();
        if (!reader) return reader.err();
        STRATA_TRY(reader->handle->lookup(lower_keys, rows_span{lower.data(), rb}, lmdb_misses));
      }
      lmdb_hits = lower_keys.size() - lmdb_misses.size();
      defaults = lmdb_misses.size();
      size_t next_miss = 0;
      row_buffer promote(layout);
      for (size_t j = 0; j < lower_keys.size(); ++j) {
        std::byte* dst = found.data() + dram_misses[j] * rb;
        if (next_miss < lmdb_misses.size() && lmdb_misses[next_miss] == j) {
          ++next_miss;
          default_row(dst);
          is_default[dram_misses[j]] = 1;
        } else {
          std::memcpy(dst, lower.data() + j * rb, rb);
          promote.append(lower_keys[j], dst);
        }
      }
      if (!promote.empty()) {
        // Rows read while the store is locked (shared or not): no update
        // can have landed since, so promoting them is never stale.
        std::lock_guard turn(miss_mutex);
        row_buffer spilled(layout);  // clean rows: a spill is dropped
        STRATA_TRY(dram->store(promote.keys(), promote.rows(), false, spilled));
      }
    }
    {
      std::lock_guard counters(stats_mutex);
      stats.dram_hits += miss_keys.size() - dram_misses.size();
      stats.lmdb_hits += lmdb_hits;
      stats.defaults += defaults;
    }
    for (size_t j = 0; j < miss_keys.size(); ++j)
      if (!is_default[j]) fetched.append(miss_keys[j], found.data() + j * rb);
    return {};
  }

  status prefetch(std::span<const uint64_t> keys) {
    if (keys.empty()) return {};
    records.resize(keys.size() * record_bytes());
    row_buffer fetched(layout);
    uint64_t hits = 0;
    STRATA_TRY(fetch(keys, records.data(), fetched, hits));
    if (!fetched.empty()) STRATA_TRY(cache_insert(fetched.keys(), fetched.record(0)));
    return {};
  }

  status insert_pending() {
    if (pending.empty()) return {};
    auto result = cache_insert(pending.keys(), pending.record(0));
    pending.clear();
    queued = false;
    return result;
  }
};

serving_store::serving_store(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
serving_store::~serving_store() = default;

expected<std::unique_ptr<serving_store>> serving_store::open(serving_store_config config,
                                                             std::unique_ptr<cache_backend> cache) {
  if (config.dim == 0)
    return error(errc::invalid_argument, "serving table '" + config.table + "': dim must be set");
  if (config.lmdb_path.empty())
    return error(errc::invalid_argument, "serving table '" + config.table + "': lmdb path missing");
  if (config.hit_rate_window == 0) config.hit_rate_window = 1;
  if (config.lmdb_read_handles == 0 || config.lmdb_read_handles > max_lmdb_read_handles)
    return error(errc::invalid_argument,
                 "serving table '" + config.table + "': lmdb_read_handles is " +
                     std::to_string(config.lmdb_read_handles) + ", must be 1 to " +
                     std::to_string(max_lmdb_read_handles) +
                     " (each holds a slot of LMDB's reader table, " +
                     std::to_string(lmdb_reader_slots) + ")");
  const row_layout layout{config.dim, optimizer_kind::sgd, false};
  if (!cache || !(cache->layout().dim == layout.dim && !cache->layout().with_state))
    return error(errc::invalid_argument, "serving table '" + config.table +
                                             "': the cache must have the serving layout, dim " +
                                             std::to_string(config.dim));
  auto p = std::make_unique<impl>();
  p->config = config;
  p->layout = layout;
  p->cache = std::move(cache);
  p->pending = row_buffer(layout);
  // The store's environment is a copy of a checkpoint plus updates: start empty.
  STRATA_TRY(prepare_directory(config.lmdb_path));
  lmdb_tier_config lc;
  lc.directory = config.lmdb_path;
  lc.table = config.table;
  lc.partitions = config.partitions;
  lc.map_bytes = size_t{1} << 38;
  auto lmdb = lmdb_tier::open(layout, lc);
  if (!lmdb) return lmdb.err();
  p->lmdb = std::move(*lmdb);
  p->reader_config = lc;
  p->reader_config.shared_handle = true;
  dram_tier_config dc;
  dc.capacity_bytes =
      std::max(config.dram_bytes, dram_tier::budget_for_rows(layout, eviction_policy::lru, 64));
  p->dram = std::make_unique<dram_tier>(layout, dc);
  return std::unique_ptr<serving_store>(new serving_store(std::move(p)));
}

const std::string& serving_store::table() const { return impl_->config.table; }
uint32_t serving_store::dim() const { return impl_->layout.dim; }
serving_stats serving_store::stats() const {
  std::shared_lock lock(impl_->mutex);
  serving_stats out;
  {
    std::lock_guard counters(impl_->stats_mutex);
    out = impl_->stats;
  }
  std::lock_guard readers(impl_->readers_mutex);
  out.lmdb_read_handles = impl_->reader_handles;
  out.lmdb_read_waits = impl_->reader_waits;
  return out;
}
double serving_store::recent_hit_rate() const {
  std::shared_lock lock(impl_->mutex);
  std::lock_guard counters(impl_->stats_mutex);
  return impl_->hit_rate();
}
bool serving_store::has_pending() const { return impl_->queued.load(); }

status serving_store::load_checkpoint(const fs::path& dir) {
  auto& s = *impl_;
  std::unique_lock lock(s.mutex);
  auto meta = actors::read_checkpoint_meta(dir);
  if (!meta) return meta.err();
  const std::string where = (dir / actors::checkpoint_meta_name).string();
  if (meta->table != s.config.table)
    return error(errc::format_mismatch, where + ": table is '" + meta->table +
                                            "', the serving table is '" + s.config.table + "'");
  if (meta->dim != s.layout.dim)
    return error(errc::format_mismatch, where + ": dim is " + std::to_string(meta->dim) +
                                            ", the serving table's is " +
                                            std::to_string(s.layout.dim));
  if (!fs::exists(dir / file_manifest_name))
    return error(errc::corrupt_data, dir.string() + " has no FILES: an incomplete checkpoint");
  // Warm-up candidates: a min-heap of (freq, key) holding the top warmup_keys.
  using entry = std::pair<uint32_t, uint64_t>;
  std::priority_queue<entry, std::vector<entry>, std::greater<>> top;
  const size_t shards = meta->shard_rows.size();
  row_buffer batch(s.layout);
  row_buffer spilled(s.layout);
  auto flush = [&]() -> status {
    if (batch.empty()) return {};
    STRATA_TRY(s.lmdb->store(batch.keys(), batch.rows(), false, spilled));
    s.stats.loaded_rows += batch.size();
    batch.clear();
    return {};
  };
  for (uint32_t shard = 0; shard < shards; ++shard) {
    auto source = actors::open_checkpoint_shard(dir, *meta, shard);
    if (!source) return source.err();
    status inner;
    STRATA_TRY((*source)->dump([&](uint64_t key, const std::byte* record) {
      if (!inner) return;
      std::byte* dst = batch.append(key);
      meta_of(dst) = row_meta{meta_of(record).version, meta_of(record).freq, 0};
      std::memcpy(weights_of(dst), weights_of(record), size_t{4} * s.layout.dim);
      if (s.config.warmup_keys) {
        top.emplace(meta_of(record).freq, key);
        if (top.size() > s.config.warmup_keys) top.pop();
      }
      if (batch.size() >= 16384) inner = flush();
    }));
    if (!inner) return inner;
  }
  STRATA_TRY(flush());
  STRATA_TRY(s.lmdb->sync());
  if (!top.empty()) {
    std::vector<uint64_t> keys;
    keys.reserve(top.size());
    while (!top.empty()) {
      keys.push_back(top.top().second);
      top.pop();
    }
    STRATA_TRY(s.prefetch(keys));
    s.stats.warmed_rows = keys.size();
  }
  return {};
}

status serving_store::lookup(std::span<const uint64_t> keys, lookup_result& out) {
  auto& s = *impl_;
  const size_t n = keys.size();
  const uint32_t dim = s.layout.dim;
  const size_t rb = s.record_bytes();
  out.dim = dim;
  // Where each row's version and weights go: the caller's vectors, or
  // (encoded) their places in the rows payload.
  std::byte* versions;
  std::byte* weights;
  if (out.encoded) {
    out.weights.clear();
    out.versions.clear();
    out.payload.resize(lookup_result::counts_bytes + n * (8 + size_t{4} * dim));
    const uint32_t counts[2] = {dim, static_cast<uint32_t>(n)};
    std::memcpy(out.payload.data(), counts, sizeof counts);
    versions = out.payload.data() + lookup_result::counts_bytes;
    weights = versions + n * 8;
  } else {
    out.versions.resize(n);
    out.weights.resize(n * dim);
    versions = reinterpret_cast<std::byte*>(out.versions.data());
    weights = reinterpret_cast<std::byte*>(out.weights.data());
  }
  // The whole lookup runs under a shared lock where the backend allows
  // concurrent queries: lookups run side by side, their misses' DRAM parts
  // in turn (fetch_misses). Only a synchronous cache insert (a cold cache)
  // takes the store exclusively, after the rows are in the result.
  const bool concurrent = s.cache->concurrent_queries();
  std::shared_lock reader(s.mutex, std::defer_lock);
  std::unique_lock writer(s.mutex, std::defer_lock);
  if (concurrent)
    reader.lock();
  else
    writer.lock();
  // The cache writes each hit's version and weights straight to their
  // places in the result; the misses' rows (DRAM, LMDB, defaults) come as
  // records, whose version and weights are copied there.
  auto& misses = miss_scratch();
  misses.resize(n);
  cache_counts counts;
  if (n > 0) {
    const size_t weight_bytes = size_t{4} * dim;
    STRATA_TRY(run_cache_call([&](cache_completion done) {
      s.cache->query_weights(host_span(keys), host_span(std::span<std::byte>(versions, n * 8)),
                             host_span(std::span<std::byte>(weights, n * weight_bytes)),
                             host_span(std::span<uint32_t>(misses)), counts, std::move(done));
    }));
  }
  misses.resize(counts.misses);
  bool async;
  {
    std::lock_guard counters(s.stats_mutex);
    ++s.stats.lookups;
    s.stats.keys += n;
    s.stats.cache_hits += counts.hits;
    async = s.hit_rate() >= s.config.async_insert_hit_rate;
    if (n > 0) s.count(counts.hits, n);
  }
  if (misses.empty()) return {};
  // The misses run under the same lock (fetch_misses: DRAM in turn, LMDB
  // side by side), so lookups that hit go on beside them and no update
  // lands within a lookup.
  row_buffer fetched(s.layout);
  auto& found = found_scratch();
  STRATA_TRY(s.fetch_misses(keys, misses, found, fetched, /*exclusive=*/!concurrent));
  for (size_t j = 0; j < misses.size(); ++j)
    copy_version_and_weights(found.data() + j * rb, dim, misses[j], versions, weights);
  trim_scratch(found);
  if (fetched.empty()) return {};
  if (!async && !concurrent) {
    // A cold cache fills before the reply; the store is held exclusively.
    STRATA_TRY(s.cache_insert(fetched.keys(), fetched.record(0)));
    s.stats.sync_inserts += fetched.size();
    return {};
  }
  {
    std::lock_guard turn(s.miss_mutex);
    for (size_t i = 0; i < fetched.size(); ++i) s.pending.append(fetched.key(i), fetched.record(i));
    s.queued = true;
  }
  if (async) {
    std::lock_guard counters(s.stats_mutex);
    s.stats.async_inserts += fetched.size();
    return {};
  }
  // A cold cache fills before the reply: the queue (these rows, and any
  // queued before them) goes in under the exclusive lock. An update landing
  // between the two locks inserts the queue first (apply_updates), so no
  // row older than an update reaches the cache.
  reader.unlock();
  writer.lock();
  STRATA_TRY(s.insert_pending());
  s.stats.sync_inserts += fetched.size();
  return {};
}

status serving_store::prefetch(std::span<const uint64_t> keys) {
  std::unique_lock lock(impl_->mutex);
  return impl_->prefetch(keys);
}

status serving_store::insert_pending() {
  std::unique_lock lock(impl_->mutex);
  return impl_->insert_pending();
}

status serving_store::list_keys(uint32_t limit, std::vector<uint64_t>& out) {
  std::unique_lock lock(impl_->mutex);
  return first_keys(*impl_->lmdb, impl_->config.partitions, limit, out);
}

expected<uint64_t> serving_store::version_of(uint64_t key) {
  auto& s = *impl_;
  std::unique_lock lock(s.mutex);
  std::vector<std::byte> record(s.record_bytes());
  std::vector<uint32_t> misses;
  const uint64_t keys[] = {key};
  STRATA_TRY(s.lmdb->lookup(keys, rows_span{record.data(), s.record_bytes()}, misses));
  return misses.empty() ? meta_of(record.data()).version : uint64_t{0};
}

status serving_store::apply_updates(std::span<const uint64_t> keys, std::span<const float> weights,
                                    std::span<const uint64_t> versions) {
  auto& s = *impl_;
  const uint32_t dim = s.layout.dim;
  const size_t rb = s.record_bytes();
  if (weights.size() != keys.size() * dim || versions.size() != keys.size())
    return error(errc::invalid_argument, "serving table '" + s.config.table + "': update of " +
                                             std::to_string(keys.size()) + " keys carries " +
                                             std::to_string(weights.size()) + " floats and " +
                                             std::to_string(versions.size()) + " versions (dim " +
                                             std::to_string(dim) + ")");
  if (keys.empty()) return {};
  std::unique_lock lock(s.mutex);
  // A queued (older) row must not land in the cache after a newer update.
  STRATA_TRY(s.insert_pending());
  // Within the batch, the highest version of each key wins.
  std::unordered_map<uint64_t, size_t> best;
  best.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = best.try_emplace(keys[i], i);
    if (!fresh && versions[i] > versions[it->second]) it->second = i;
  }
  std::vector<uint64_t> unique_keys;
  unique_keys.reserve(best.size());
  for (const auto& [key, i] : best) unique_keys.push_back(key);
  std::sort(unique_keys.begin(), unique_keys.end());
  std::vector<std::byte> current(unique_keys.size() * rb);
  std::vector<uint32_t> absent;
  STRATA_TRY(s.lmdb->lookup(unique_keys, rows_span{current.data(), rb}, absent));
  size_t next_absent = 0;
  row_buffer accepted(s.layout);
  for (size_t j = 0; j < unique_keys.size(); ++j) {
    const bool is_absent = next_absent < absent.size() && absent[next_absent] == j;
    if (is_absent) ++next_absent;
    const size_t i = best[unique_keys[j]];
    const uint64_t stored = is_absent ? 0 : meta_of(current.data() + j * rb).version;
    if (!is_absent && versions[i] <= stored) {
      ++s.stats.updates_ignored;
      continue;
    }
    std::byte* dst = accepted.append(unique_keys[j]);
    meta_of(dst) = row_meta{versions[i], 0, 0};
    std::memcpy(weights_of(dst), weights.data() + i * dim, size_t{4} * dim);
  }
  s.stats.updates_ignored += keys.size() - unique_keys.size();
  if (accepted.empty()) return {};
  row_buffer spilled(s.layout);
  STRATA_TRY(s.lmdb->store(accepted.keys(), accepted.rows(), false, spilled));
  // Refresh resident copies in DRAM and the cache (never insert new ones).
  row_buffer resident(s.layout);
  for (size_t j = 0; j < accepted.size(); ++j)
    if (s.dram->contains(accepted.key(j))) resident.append(accepted.key(j), accepted.record(j));
  if (!resident.empty())
    STRATA_TRY(s.dram->store(resident.keys(), resident.rows(), false, spilled));
  std::vector<std::byte> probe(accepted.size() * rb);
  std::vector<uint32_t> cache_misses(accepted.size());
  cache_counts counts;
  STRATA_TRY(run_cache_call([&](cache_completion done) {
    s.cache->query(host_span(accepted.keys()), host_span(std::span<std::byte>(probe)),
                   host_span(std::span<uint32_t>(cache_misses)), counts, std::move(done));
  }));
  cache_misses.resize(counts.misses);
  row_buffer in_cache(s.layout);
  size_t next = 0;
  for (size_t j = 0; j < accepted.size(); ++j) {
    if (next < cache_misses.size() && cache_misses[next] == j) {
      ++next;
      continue;
    }
    in_cache.append(accepted.key(j), accepted.record(j));
  }
  if (!in_cache.empty()) STRATA_TRY(s.cache_insert(in_cache.keys(), in_cache.record(0)));
  s.stats.updates_applied += accepted.size();
  return {};
}

}  // namespace strata::serving
