#include "actors/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "actors/checkpoint_internal.hpp"
#include "actors/partition_map.hpp"
#include "common/file_manifest.hpp"
#include "common/io_env.hpp"
#include "tiers/count_min.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {
namespace checkpoint_impl {

errc code_of(int err) { return err == ENOSPC || err == EDQUOT ? errc::disk_full : errc::io_error; }

// Through the io_env seam (common/io_env.hpp), so a failing fsync can be
// injected.
expected<void> fsync_file(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    return error(errc::io_error, p.string() + ": cannot open to sync: " + std::strerror(errno));
  const int e = io().fsync(fd, p.string());
  ::close(fd);
  if (e != 0) return error(code_of(e), p.string() + ": fsync failed: " + std::strerror(e));
  return {};
}

expected<std::vector<uint8_t>> read_whole(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return error(errc::not_found, file.string() + ": cannot open");
  std::vector<uint8_t> out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return out;
}

expected<shard_state_file> read_shard_state(const fs::path& shard_dir) {
  const fs::path file = shard_dir / checkpoint_shard_state_name;
  auto bytes = read_whole(file);
  if (!bytes) return bytes.err();
  shard_state_file out;
  uint64_t words = 0;
  if (bytes->size() < sizeof out.tick + sizeof words)
    return error(errc::corrupt_data,
                 file.string() + ": truncated (" + std::to_string(bytes->size()) + " bytes)");
  std::memcpy(&out.tick, bytes->data(), sizeof out.tick);
  std::memcpy(&words, bytes->data() + sizeof out.tick, sizeof words);
  const size_t header = sizeof out.tick + sizeof words;
  if (bytes->size() != header + words * sizeof(uint16_t))
    return error(errc::corrupt_data, file.string() + ": " + std::to_string(bytes->size()) +
                                         " bytes for a sketch of " + std::to_string(words) +
                                         " counters");
  out.sketch.resize(words);
  if (words) std::memcpy(out.sketch.data(), bytes->data() + header, words * sizeof(uint16_t));
  return out;
}

lmdb_tier_config read_only_config(const fs::path& dir, const checkpoint_meta& meta) {
  lmdb_tier_config c;
  c.directory = dir;
  c.table = meta.table;
  c.partitions = meta.partitions;
  c.read_only = true;  // maps only the committed pages
  return c;
}

row_layout layout_of(const checkpoint_meta& meta) {
  return row_layout{meta.dim, meta.optimizer, meta.with_state};
}

}  // namespace checkpoint_impl

using namespace checkpoint_impl;

expected<std::unique_ptr<lmdb_tier>> open_checkpoint_shard(const fs::path& dir,
                                                           const checkpoint_meta& meta,
                                                           uint32_t shard) {
  return lmdb_tier::open(layout_of(meta), read_only_config(shard_checkpoint_dir(dir, shard), meta));
}

namespace {

constexpr const char* name_prefix = "ckpt-";

std::string mode_text(training_mode m) { return m == training_mode::async ? "async" : "pass"; }

template <class T>
std::string join(const std::vector<T>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(xs[i]);
  }
  return out;
}

// The epoch of a checkpoint directory name, or nullopt.
std::optional<uint64_t> epoch_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(name_prefix, 0) != 0 || name.size() == std::strlen(name_prefix))
    return std::nullopt;
  uint64_t v = 0;
  for (size_t i = std::strlen(name_prefix); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return v;
}

std::vector<std::pair<uint64_t, fs::path>> all_checkpoints(const fs::path& root) {
  std::vector<std::pair<uint64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    if (auto e = epoch_of(entry.path())) out.emplace_back(*e, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / file_manifest_name, ec);
}

// When `dir` has a FILES list naming `rel`, checks that file's size and
// CRC32C against it (cheap: used for the small metadata file). No list, or
// `rel` not in it: nothing to check here (verify_checkpoint refuses those).
expected<void> check_listed_file(const fs::path& dir, const std::string& rel) {
  std::ifstream list(dir / file_manifest_name);
  if (!list) return {};
  std::string line;
  while (std::getline(list, line)) {
    unsigned crc = 0;
    unsigned long long bytes = 0;
    int used = 0;
    if (std::sscanf(line.c_str(), "%x %llu %n", &crc, &bytes, &used) != 2 || used <= 0) continue;
    if (line.compare(static_cast<size_t>(used), std::string::npos, rel) != 0) continue;
    const fs::path file = dir / rel;
    uint64_t found = 0;
    auto actual = file_crc32c(file, &found);
    if (!actual) return actual.err();
    if (found != bytes)
      return error(errc::corrupt_data, "checkpoint file '" + file.string() + "' has " +
                                           std::to_string(found) + " bytes, the list says " +
                                           std::to_string(bytes));
    if (*actual != crc)
      return error(errc::corrupt_data,
                   "checkpoint file '" + file.string() + "': checksum mismatch");
    return {};
  }
  return {};
}

}  // namespace

std::string checkpoint_name(uint64_t epoch) {
  char text[32];
  std::snprintf(text, sizeof text, "%s%012llu", name_prefix,
                static_cast<unsigned long long>(epoch));
  return text;
}

fs::path shard_checkpoint_dir(const fs::path& checkpoint, uint32_t shard) {
  return checkpoint / ("shard-" + std::to_string(shard));
}

expected<void> write_file_synced(const fs::path& file, const void* bytes, size_t size) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    return error(code_of(e), file.string() + ": cannot create: " + std::strerror(e));
  }
  int e = io().write(fd, bytes, size, file.string());
  const char* what = "cannot write";
  if (e == 0) {
    e = io().fsync(fd, file.string());
    what = "fsync failed";
  }
  if (::close(fd) != 0 && e == 0) {
    e = errno;
    what = "cannot close";
  }
  if (e != 0)
    return error(code_of(e), file.string() + ": " + what + " (" + std::to_string(size) +
                                 " bytes): " + std::strerror(e));
  return {};
}

expected<void> sync_tree(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    auto synced = fsync_file(entry.path(), entry.is_directory(ec));
    if (!synced) return synced;
  }
  if (ec) return error(errc::io_error, dir.string() + ": " + ec.message());
  return fsync_file(dir, true);
}

expected<void> write_checkpoint_meta(const fs::path& dir, const checkpoint_meta& m) {
  std::ostringstream out;
  out << "strata-checkpoint " << m.format << '\n'
      << "cluster " << m.cluster << '\n'
      << "epoch " << m.epoch << '\n'
      << "incarnation " << m.incarnation << '\n'
      << "mode " << mode_text(m.mode) << '\n'
      << "passes " << m.passes << '\n'
      << "table " << m.table << '\n'
      << "dim " << m.dim << '\n'
      << "optimizer " << to_string(m.optimizer) << '\n'
      << "optimizer_state " << (m.with_state ? 1 : 0) << '\n'
      << "row_format " << m.row_format << '\n'
      << "partitions " << m.partitions << '\n'
      << "map_epoch " << m.map_epoch << '\n'
      << "owners " << join(m.owners) << '\n'
      << "shard_rows " << join(m.shard_rows) << '\n'
      << "positions " << join(m.positions) << '\n'
      << "batches " << m.batches << '\n'
      << "examples " << m.examples << '\n'
      << "dense_bytes " << m.dense_bytes << '\n'
      << "end\n";
  const std::string text = out.str();
  return write_file_synced(dir / checkpoint_meta_name, text.data(), text.size());
}

expected<checkpoint_meta> read_checkpoint_meta(const fs::path& dir) {
  const fs::path file = dir / checkpoint_meta_name;
  // A damaged CHECKPOINT is a checksum mismatch here as in verify, not a
  // parse error on whatever bytes the damage left.
  auto listed = check_listed_file(dir, checkpoint_meta_name);
  if (!listed) return listed.err();
  std::ifstream in(file);
  if (!in) return error(errc::not_found, file.string() + ": missing (not a checkpoint directory)");
  checkpoint_meta m;
  std::string line;
  size_t number = 0;
  bool ended = false;
  auto bad = [&](const std::string& what) {
    return error(errc::corrupt_data, file.string() + ":" + std::to_string(number) + ": " + what);
  };
  auto numbers = [](std::istringstream& s) {
    std::vector<uint64_t> v;
    uint64_t x;
    while (s >> x) v.push_back(x);
    return v;
  };
  while (std::getline(in, line)) {
    ++number;
    std::istringstream s(line);
    std::string field;
    s >> field;
    if (number == 1) {
      if (field != "strata-checkpoint" || !(s >> m.format))
        return bad("not a strata checkpoint file");
      if (m.format != checkpoint_format_version)
        return error(errc::format_mismatch,
                     file.string() + ":1: checkpoint format " + std::to_string(m.format) +
                         ", this build reads format " + std::to_string(checkpoint_format_version));
      continue;
    }
    if (field == "end") {
      ended = true;
      break;
    }
    std::string text;
    // The rest of the line, for names that may hold spaces.
    auto rest = [&] {
      std::string r;
      std::getline(s, r);
      return r.empty() ? r : r.substr(1);
    };
    if (field == "cluster") {
      m.cluster = rest();
    } else if (field == "epoch") {
      s >> m.epoch;
    } else if (field == "incarnation") {
      uint32_t v = 0;
      s >> v;
      m.incarnation = static_cast<uint16_t>(v);
    } else if (field == "mode") {
      s >> text;
      m.mode = text == "pass" ? training_mode::pass : training_mode::async;
    } else if (field == "passes") {
      s >> m.passes;
    } else if (field == "table") {
      m.table = rest();
    } else if (field == "dim") {
      s >> m.dim;
    } else if (field == "optimizer") {
      s >> text;
      bool found = false;
      for (auto k : {optimizer_kind::sgd, optimizer_kind::adagrad, optimizer_kind::adam,
                     optimizer_kind::ftrl})
        if (to_string(k) == text) {
          m.optimizer = k;
          found = true;
        }
      if (!found) return bad("optimizer: unknown '" + text + "'");
    } else if (field == "optimizer_state") {
      int v = 1;
      s >> v;
      m.with_state = v != 0;
    } else if (field == "row_format") {
      s >> m.row_format;
    } else if (field == "partitions") {
      s >> m.partitions;
    } else if (field == "map_epoch") {
      s >> m.map_epoch;
    } else if (field == "owners") {
      for (uint64_t v : numbers(s)) m.owners.push_back(static_cast<uint32_t>(v));
    } else if (field == "shard_rows") {
      m.shard_rows = numbers(s);
    } else if (field == "positions") {
      m.positions = numbers(s);
    } else if (field == "batches") {
      s >> m.batches;
    } else if (field == "examples") {
      s >> m.examples;
    } else if (field == "dense_bytes") {
      s >> m.dense_bytes;
    } else {
      return bad("unknown field '" + field + "'");
    }
  }
  if (!ended) return bad("truncated: no 'end' line");
  if (m.partitions == 0 || m.owners.size() != m.partitions)
    return bad("owners: " + std::to_string(m.owners.size()) + " entries for " +
               std::to_string(m.partitions) + " partitions");
  for (uint32_t o : m.owners)
    if (o >= m.shard_rows.size())
      return bad("owners: shard " + std::to_string(o) + " but shard_rows lists " +
                 std::to_string(m.shard_rows.size()) + " shards");
  return m;
}

std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  for (auto& [epoch, dir] : all_checkpoints(root))
    if (is_complete(dir)) out.push_back(dir);
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& root) {
  auto all = complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

uint64_t highest_checkpoint_epoch(const fs::path& root) {
  auto all = all_checkpoints(root);
  return all.empty() ? 0 : all.back().first;
}

expected<void> prune_checkpoints(const fs::path& root, uint32_t keep) {
  auto all = all_checkpoints(root);
  std::vector<size_t> complete;
  for (size_t i = 0; i < all.size(); ++i)
    if (is_complete(all[i].second)) complete.push_back(i);
  if (complete.empty()) return fsync_file(root, true);
  const uint64_t newest = all[complete.back()].first;
  size_t kept = 0;
  for (size_t i = all.size(); i-- > 0;) {
    const bool done = is_complete(all[i].second);
    bool remove = false;
    if (done)
      remove = ++kept > std::max<uint32_t>(keep, 1);
    else
      remove = all[i].first < newest;  // an interrupted checkpoint: never used
    if (!remove) continue;
    std::error_code ec;
    // FILES first, so a half-removed directory is never taken for complete.
    fs::remove(all[i].second / file_manifest_name, ec);
    fs::remove_all(all[i].second, ec);
    if (ec)
      return error(errc::io_error, all[i].second.string() + ": cannot remove: " + ec.message());
  }
  // The root's entries (the new ckpt-N, the removals) survive a power loss.
  return fsync_file(root, true);
}

expected<void> check_compatible(const checkpoint_meta& m, const fs::path& dir,
                                const table_config& table, uint32_t partitions) {
  const std::string file = (dir / checkpoint_meta_name).string();
  auto refuse = [&](const std::string& field, const std::string& have, const std::string& want) {
    return error(errc::format_mismatch, file + ": " + field + ": the checkpoint has " + have +
                                            ", the cluster has " + want +
                                            " (incompatible table layout)");
  };
  if (m.table != table.name) return refuse("table", "'" + m.table + "'", "'" + table.name + "'");
  if (m.dim != table.layout.dim)
    return refuse("dim", std::to_string(m.dim), std::to_string(table.layout.dim));
  if (m.optimizer != table.layout.optimizer)
    return refuse("optimizer", std::string(to_string(m.optimizer)),
                  std::string(to_string(table.layout.optimizer)));
  if (m.with_state != table.layout.with_state)
    return refuse("optimizer_state", m.with_state ? "1" : "0", table.layout.with_state ? "1" : "0");
  if (m.row_format != row_format_version)
    return refuse("row_format", std::to_string(m.row_format), std::to_string(row_format_version));
  if (partitions != 0 && m.partitions != partitions)
    return refuse("partitions", std::to_string(m.partitions), std::to_string(partitions));
  return {};
}

expected<verify_report> verify_checkpoint(const fs::path& dir, const table_config* table,
                                          uint32_t partitions) {
  verify_report report;
  auto files = verify_file_manifest(dir);
  if (!files) return files.err();
  report.files = files->size();
  for (const auto& f : *files) report.bytes += f.bytes;
  auto meta = read_checkpoint_meta(dir);
  if (!meta) return meta.err();
  report.meta = *meta;
  if (table) {
    auto ok = check_compatible(*meta, dir, *table, partitions);
    if (!ok) return ok.err();
  }
  // Every file CHECKPOINT relies on is listed (a FILES written for a
  // directory that lost one is caught here).
  auto listed = [&](const std::string& rel) {
    return std::any_of(files->begin(), files->end(),
                       [&](const manifest_entry& e) { return e.path == rel; });
  };
  std::vector<std::string> needed = {checkpoint_meta_name, checkpoint_dense_name};
  for (uint32_t s = 0; s < meta->shard_rows.size(); ++s) {
    needed.push_back("shard-" + std::to_string(s) + "/data.mdb");
    needed.push_back("shard-" + std::to_string(s) + "/" + checkpoint_shard_state_name);
  }
  for (const auto& rel : needed)
    if (!listed(rel))
      return error(errc::corrupt_data, (dir / rel).string() + ": missing from the checkpoint");
  std::error_code ec;
  const auto dense_size = fs::file_size(dir / checkpoint_dense_name, ec);
  if (ec || dense_size != meta->dense_bytes)
    return error(errc::corrupt_data, (dir / checkpoint_dense_name).string() + ": " +
                                         std::to_string(dense_size) + " bytes, CHECKPOINT says " +
                                         std::to_string(meta->dense_bytes));
  for (uint32_t s = 0; s < meta->shard_rows.size(); ++s) {
    const fs::path shard_dir = shard_checkpoint_dir(dir, s);
    auto state = read_shard_state(shard_dir);
    if (!state) return state.err();
    auto tier = open_checkpoint_shard(dir, *meta, s);
    if (!tier) return tier.err();
    uint64_t rows = 0;
    auto scanned = (*tier)->dump([&](uint64_t, const std::byte*) { ++rows; });
    if (!scanned) return scanned.err();
    if (rows != meta->shard_rows[s])
      return error(errc::corrupt_data, (shard_dir / "data.mdb").string() + ": " +
                                           std::to_string(rows) + " rows, CHECKPOINT records " +
                                           std::to_string(meta->shard_rows[s]));
    report.rows += rows;
  }
  return report;
}

namespace {
std::mutex records_mutex;
checkpoint_record records;
}  // namespace

checkpoint_record checkpoint_records() {
  std::lock_guard lock(records_mutex);
  return records;
}

void record_checkpoint(double duration_seconds, uint64_t bytes) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(records_mutex);
  ++records.completed;
  records.bytes_total += bytes;
  records.last_unix_seconds = now;
  records.last_duration_seconds = duration_seconds;
  records.last_bytes = bytes;
}

void record_checkpoint_failure() {
  std::lock_guard lock(records_mutex);
  ++records.failures;
}

}  // namespace strata::actors
