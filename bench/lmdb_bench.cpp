// lmdb_read / lmdb_write: the LMDB tier against a plain LMDB loop.
//
// Rows are 256 bytes encoded (dim 56, SGD: 32-byte header + 224-byte
// payload). Both variants use the same environment flags (MDB_NOSYNC,
// MDB_NOTLS, MDB_NORDAHEAD), the same 12-byte big-endian (partition, key)
// keys, the same key order and the same transaction sizes; each writes its
// own fresh environment under options.work_dir.
//
//   lmdb_write: 10 000-row write transactions of keys in random order.
//     tier: lmdb_tier::store (encodes, checksums, sorts, cursor puts).
//     raw_lmdb: mdb_put of pre-encoded values in the given order.
//   lmdb_read: random batches of 4 096 keys, page cache warm.
//     tier: lmdb_tier::lookup (sorted walk, checksum, decode into records).
//     raw_lmdb: mdb_get per key in one read transaction per batch, the value
//     copied out (a caller must copy it before the transaction ends).
//   lmdb_bytes_per_key: the tier's files on disk after the writes and a
//     sync, divided by the keys, against the encoded row (256 bytes): the
//     B-tree's page fill, its 12-byte keys and node headers, free pages
//     (`strata plan` sizes SSDs with it).
//
// Only the calls above are timed; building records, encoding the raw
// variant's values and computing its keys happen outside the clock.
#include <lmdb.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/report.hpp"
#include "common/hash.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::bench {
namespace {

using bench_clock = std::chrono::steady_clock;

const row_layout bench_layout{56, optimizer_kind::sgd, true};
static_assert(encoded_header_bytes + 4 * 56 == 256);
constexpr size_t write_batch = 10000;
constexpr size_t read_batch = 4096;
constexpr uint32_t partitions = 4096;
constexpr int read_passes = 2;  // best of, after one warm-up pass

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void fill_record(uint64_t key, std::byte* record) {
  meta_of(record) = row_meta{make_version(0, 1), 0, 0};
  float* w = weights_of(record);
  for (uint32_t j = 0; j < bench_layout.value_words(); ++j)
    w[j] = static_cast<float>((key >> (j % 48)) & 0xffff) * 1e-3f;
}

void put_key(uint64_t key, unsigned char* out) {
  const uint32_t p = partition_of(key, partitions);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(p >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) out[4 + i] = static_cast<unsigned char>(key >> (56 - 8 * i));
}

void check(int rc, const char* what) {
  if (rc != 0)
    throw std::runtime_error(std::string("lmdb bench: ") + what + ": " + mdb_strerror(rc));
}
void check(const status& st, const char* what) {
  if (!st)
    throw std::runtime_error(std::string("lmdb bench: ") + what + ": " + st.err().to_string());
}

double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

// The baseline: an environment opened like the tier's, used with plain calls.
struct raw_env {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  explicit raw_env(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    check(mdb_env_create(&env), "mdb_env_create");
    check(mdb_env_set_mapsize(env, size_t{1} << 40), "mdb_env_set_mapsize");
    check(mdb_env_set_maxdbs(env, 2), "mdb_env_set_maxdbs");
    check(mdb_env_open(env, dir.c_str(), MDB_NOSYNC | MDB_NOTLS | MDB_NORDAHEAD, 0644),
          "mdb_env_open");
    MDB_txn* txn = nullptr;
    check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
    check(mdb_dbi_open(txn, "default", MDB_CREATE, &dbi), "mdb_dbi_open");
    check(mdb_txn_commit(txn), "mdb_txn_commit");
  }
  ~raw_env() { mdb_env_close(env); }
  raw_env(const raw_env&) = delete;
  raw_env& operator=(const raw_env&) = delete;
};

struct batch_data {
  std::vector<std::byte> records;
  std::vector<std::byte> encoded;
  std::vector<unsigned char> raw_keys;
};

double write_tier(lmdb_tier& tier, const std::vector<uint64_t>& order) {
  batch_data b;
  row_buffer spilled(bench_layout);
  double elapsed = 0;
  for (size_t first = 0; first < order.size(); first += write_batch) {
    const size_t n = std::min(write_batch, order.size() - first);
    b.records.resize(n * bench_layout.record_bytes());
    for (size_t i = 0; i < n; ++i)
      fill_record(order[first + i], b.records.data() + i * bench_layout.record_bytes());
    const auto start = bench_clock::now();
    check(tier.store({order.data() + first, n},
                     const_rows_span{b.records.data(), bench_layout.record_bytes()}, true, spilled),
          "lmdb_tier::store");
    elapsed += seconds_since(start);
  }
  return static_cast<double>(order.size()) / elapsed;
}

double write_raw(raw_env& raw, const std::vector<uint64_t>& order) {
  batch_data b;
  const size_t vb = bench_layout.encoded_bytes();
  std::vector<std::byte> record(bench_layout.record_bytes());
  double elapsed = 0;
  for (size_t first = 0; first < order.size(); first += write_batch) {
    const size_t n = std::min(write_batch, order.size() - first);
    b.encoded.resize(n * vb);
    b.raw_keys.resize(n * 12);
    for (size_t i = 0; i < n; ++i) {
      fill_record(order[first + i], record.data());
      encode_row(bench_layout, order[first + i], record.data(), b.encoded.data() + i * vb);
      put_key(order[first + i], b.raw_keys.data() + i * 12);
    }
    const auto start = bench_clock::now();
    MDB_txn* txn = nullptr;
    check(mdb_txn_begin(raw.env, nullptr, 0, &txn), "mdb_txn_begin");
    for (size_t i = 0; i < n; ++i) {
      MDB_val k{12, b.raw_keys.data() + i * 12};
      MDB_val v{vb, b.encoded.data() + i * vb};
      check(mdb_put(txn, raw.dbi, &k, &v, 0), "mdb_put");
    }
    check(mdb_txn_commit(txn), "mdb_txn_commit");
    elapsed += seconds_since(start);
  }
  return static_cast<double>(order.size()) / elapsed;
}

double read_tier(lmdb_tier& tier, const std::vector<uint64_t>& reads) {
  std::vector<std::byte> out(read_batch * bench_layout.record_bytes());
  std::vector<uint32_t> misses;
  const auto start = bench_clock::now();
  for (size_t first = 0; first < reads.size(); first += read_batch) {
    const size_t n = std::min(read_batch, reads.size() - first);
    misses.clear();
    check(tier.lookup({reads.data() + first, n}, rows_span{out.data(), bench_layout.record_bytes()},
                      misses),
          "lmdb_tier::lookup");
    if (!misses.empty()) throw std::runtime_error("lmdb bench: tier lost rows");
  }
  return static_cast<double>(reads.size()) / seconds_since(start);
}

double read_raw(raw_env& raw, const std::vector<uint64_t>& reads) {
  std::vector<unsigned char> keys(reads.size() * 12);
  for (size_t i = 0; i < reads.size(); ++i) put_key(reads[i], keys.data() + i * 12);
  const size_t vb = bench_layout.encoded_bytes();
  std::vector<std::byte> out(read_batch * vb);
  MDB_txn* txn = nullptr;
  check(mdb_txn_begin(raw.env, nullptr, MDB_RDONLY, &txn), "mdb_txn_begin");
  mdb_txn_reset(txn);
  const auto start = bench_clock::now();
  for (size_t first = 0; first < reads.size(); first += read_batch) {
    const size_t n = std::min(read_batch, reads.size() - first);
    check(mdb_txn_renew(txn), "mdb_txn_renew");
    for (size_t i = 0; i < n; ++i) {
      MDB_val k{12, keys.data() + (first + i) * 12};
      MDB_val v;
      check(mdb_get(txn, raw.dbi, &k, &v), "mdb_get");
      std::memcpy(out.data() + i * vb, v.mv_data, std::min(v.mv_size, vb));
    }
    mdb_txn_reset(txn);
  }
  const double rate = static_cast<double>(reads.size()) / seconds_since(start);
  mdb_txn_abort(txn);
  return rate;
}

}  // namespace

void run_lmdb_bench(const tiers_bench_options& options, bench_report& report) {
  const uint64_t count = options.small ? 20000 : std::max<uint64_t>(options.lmdb_keys, 1);
  const std::filesystem::path base =
      (options.work_dir.empty() ? std::filesystem::temp_directory_path() : options.work_dir) /
      ("strata-lmdb-bench-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);

  std::mt19937_64 rng(20240607);
  std::vector<uint64_t> keys(count);
  for (uint64_t i = 0; i < count; ++i) keys[i] = splitmix64(i);  // a bijection: no repeats
  std::shuffle(keys.begin(), keys.end(), rng);                   // the write order
  std::vector<uint64_t> reads(count);
  for (auto& k : reads) k = keys[rng() % count];

  double tier_write = 0, raw_write = 0, tier_read = 0, raw_read = 0;
  double tier_disk_bytes = 0;
  {
    lmdb_tier_config config;
    config.directory = base / "tier";
    config.partitions = partitions;
    auto tier = lmdb_tier::open(bench_layout, config);
    if (!tier) throw std::runtime_error("lmdb bench: " + tier.err().to_string());
    raw_env raw(base / "raw");
    // Each write phase ends with an untimed sync, so that the next one does
    // not compete with the kernel's writeback of the previous one's pages.
    raw_write = write_raw(raw, keys);
    check(mdb_env_sync(raw.env, 1), "mdb_env_sync");
    tier_write = write_tier(**tier, keys);
    check((*tier)->sync(), "lmdb_tier::sync");
    // Without MDB_WRITEMAP the file grows only by the pages LMDB wrote.
    for (const auto& f : std::filesystem::directory_iterator(config.directory))
      if (f.is_regular_file()) tier_disk_bytes += static_cast<double>(f.file_size());

    read_raw(raw, reads);  // warm-up: page cache and page tables of both maps
    read_tier(**tier, reads);
    for (int pass = 0; pass < read_passes; ++pass) {
      raw_read = std::max(raw_read, read_raw(raw, reads));
      tier_read = std::max(tier_read, read_tier(**tier, reads));
    }
  }
  std::filesystem::remove_all(base);

  report.add({"lmdb_read", tier_read, "rows/s", "raw_lmdb", raw_read});
  report.add({"lmdb_write", tier_write, "rows/s", "raw_lmdb", raw_write});
  report.add({"lmdb_bytes_per_key", tier_disk_bytes / static_cast<double>(count), "bytes",
              "encoded_row_bytes", static_cast<double>(bench_layout.encoded_bytes())});
}

}  // namespace strata::bench
