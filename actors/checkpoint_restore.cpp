// Restore of a checkpoint into a cluster's shards, and the durable
// incarnation record it claims first (checkpoint.hpp, docs/checkpoints.md).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "actors/checkpoint.hpp"
#include "actors/checkpoint_internal.hpp"
#include "actors/partition_map.hpp"
#include "common/io_env.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::actors {

using namespace checkpoint_impl;

namespace {

// Rows written per LMDB transaction while restoring.
constexpr size_t restore_batch_rows = 1 << 16;

// The durable incarnation record in a checkpoint root: the highest
// incarnation any restore from a checkpoint under it handed out. `node`
// (multi-node) keeps one record per node: every node restores the same
// checkpoints, so their records agree, and no node reads a record another
// node is writing at the same moment.
fs::path incarnation_file(const fs::path& root, const std::string& node) {
  return root / (node.empty() ? std::string(incarnation_record_name)
                              : std::string(incarnation_record_name) + "." + node);
}

expected<uint16_t> read_incarnation_record(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return uint16_t{0};
  std::ifstream in(file);
  std::string head;
  unsigned value = 0;
  if (!in || !(in >> head >> value) || head != "strata-incarnation" || value > 0xffff)
    return error(errc::corrupt_data,
                 file.string() + ": not an incarnation record (\"strata-incarnation N\")");
  return static_cast<uint16_t>(value);
}

// Writes the record atomically (temporary file, fsync, rename, fsync of
// the directory): once this returns, a later restore never hands out
// `incarnation` again.
expected<void> write_incarnation_record(const fs::path& file, uint16_t incarnation) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec)
    return error(errc::io_error, file.parent_path().string() + ": cannot create: " + ec.message());
  const fs::path tmp = file.string() + ".tmp";
  const std::string text = "strata-incarnation " + std::to_string(incarnation) + "\n";
  auto written = write_file_synced(tmp, text.data(), text.size());
  if (!written) return written;
  if (const int e = io().rename(tmp.string(), file.string()))
    return error(code_of(e), tmp.string() + ": cannot rename to " + file.string() + ": " +
                                 std::strerror(e));
  return fsync_file(file.parent_path(), true);
}

expected<uint16_t> claim_incarnation(const fs::path& dir, const checkpoint_meta& meta,
                                     const fs::path& also, const std::string& node) {
  std::vector<fs::path> records = {incarnation_file(dir.parent_path(), node)};
  if (!also.empty() && also != dir.parent_path()) records.push_back(incarnation_file(also, node));
  uint16_t highest = meta.incarnation;
  for (const auto& file : records) {
    auto recorded = read_incarnation_record(file);
    if (!recorded) return recorded.err();
    highest = std::max(highest, *recorded);
  }
  if (highest == 0xffff)
    return error(errc::capacity_exceeded, (dir / checkpoint_meta_name).string() +
                                              ": incarnation 65535 reached; versions would wrap");
  const auto incarnation = static_cast<uint16_t>(highest + 1);
  for (const auto& file : records) {
    auto written = write_incarnation_record(file, incarnation);
    if (!written) return written.err();
  }
  return incarnation;
}

}  // namespace

expected<checkpoint_meta> restore_checkpoint(const fs::path& dir, cluster_config& config,
                                             const std::vector<bool>& hosted,
                                             const std::string& node) {
  auto here = [&hosted](uint32_t s) { return hosted.empty() || hosted[s]; };
  auto verified = verify_checkpoint(dir, &config.table, config.partitions);
  if (!verified) return verified.err();
  const checkpoint_meta& meta = verified->meta;
  if (meta.positions.size() != config.workers.size())
    return error(errc::format_mismatch,
                 (dir / checkpoint_meta_name).string() +
                     ": positions: " + std::to_string(meta.positions.size()) +
                     " workers, the cluster has " + std::to_string(config.workers.size()) +
                     " (each worker's data position is restored; keep the worker count)");
  const row_layout layout = config.table.layout;
  // Durable before any row or version of the new incarnation exists.
  auto claimed = claim_incarnation(
      dir, meta, config.checkpoint.enabled() ? config.checkpoint.directory : fs::path{}, node);
  if (!claimed) return claimed.err();
  const uint16_t incarnation = *claimed;
  const auto new_shards = static_cast<uint32_t>(config.shards.size());
  const partition_map map(config.partitions, new_shards);

  // The new shards' environments, empty.
  std::vector<std::unique_ptr<lmdb_tier>> targets;
  for (uint32_t s = 0; s < new_shards; ++s) {
    const auto& shard = config.shards[s];
    if (!here(s)) {
      targets.push_back(nullptr);
      continue;
    }
    std::error_code ec;
    if (fs::exists(shard.lmdb.directory, ec) && !fs::is_empty(shard.lmdb.directory, ec))
      return error(errc::invalid_argument,
                   shard.lmdb.directory.string() + ": restore needs an empty shard directory");
    auto opened = lmdb_tier::open(layout, shard.lmdb);
    if (!opened) return opened.err();
    targets.push_back(std::move(*opened));
  }
  std::vector<row_buffer> pending(new_shards, row_buffer(layout));
  auto flush = [&](uint32_t s) -> expected<void> {
    if (pending[s].empty()) return {};
    row_buffer none(layout);
    auto stored = targets[s]->store(pending[s].keys(), pending[s].rows(), true, none);
    if (!stored) return stored.err();
    pending[s].clear();
    return {};
  };
  const uint32_t old_shards = static_cast<uint32_t>(meta.shard_rows.size());
  std::vector<shard_state_file> states;
  for (uint32_t old = 0; old < old_shards; ++old) {
    const fs::path shard_dir = shard_checkpoint_dir(dir, old);
    auto state = read_shard_state(shard_dir);
    if (!state) return state.err();
    states.push_back(std::move(*state));
    auto source = lmdb_tier::open(layout, read_only_config(shard_dir, meta));
    if (!source) return source.err();
    uint64_t rows = 0;
    bool skipped = false;  // partitions restored by another node
    for (uint32_t p = 0; p < meta.partitions; ++p) {
      if (meta.owners[p] != old) continue;
      const uint32_t to = map.owner(p);
      if (!here(to)) {
        skipped = true;
        continue;
      }
      expected<void> failed;
      auto scanned = (*source)->range_scan(p, [&](uint64_t key, const std::byte* record) {
        pending[to].append(key, record);
        std::byte* r = pending[to].record(pending[to].size() - 1);
        row_meta& m = meta_of(r);
        m.version = make_version(incarnation, counter_of(m.version));
        ++rows;
        if (pending[to].size() >= restore_batch_rows && failed) failed = flush(to);
      });
      if (!scanned) return scanned.err();
      if (!failed) return failed.err();
    }
    if (!skipped && rows != meta.shard_rows[old])
      return error(errc::corrupt_data, (shard_dir / "data.mdb").string() + ": restored " +
                                           std::to_string(rows) + " rows, CHECKPOINT records " +
                                           std::to_string(meta.shard_rows[old]) +
                                           " (rows outside the partitions the map gives it?)");
  }
  for (uint32_t s = 0; s < new_shards; ++s) {
    if (!here(s)) continue;
    auto flushed = flush(s);
    if (!flushed) return flushed.err();
    auto synced = targets[s]->sync();
    if (!synced) return synced.err();
  }
  targets.clear();

  // Shard state: the same sketches when the shard count is unchanged, else
  // every new shard starts from the sum of the old ones (counts never
  // under-estimate, so no admitted key is refused).
  uint32_t tick = 0;
  std::vector<uint16_t> summed;
  for (const auto& st : states) {
    tick = std::max(tick, st.tick);
    if (st.sketch.empty()) continue;
    if (summed.empty()) summed.assign(st.sketch.size(), 0);
    if (st.sketch.size() != summed.size()) continue;
    for (size_t i = 0; i < summed.size(); ++i)
      summed[i] = static_cast<uint16_t>(
          std::min<uint32_t>(0xffff, uint32_t{summed[i]} + uint32_t{st.sketch[i]}));
  }
  for (uint32_t s = 0; s < new_shards; ++s) {
    config.shards[s].restored_tick = tick;
    config.shards[s].restored_sketch = old_shards == new_shards ? states[s].sketch : summed;
    config.shards[s].chain.incarnation = incarnation;
  }
  auto dense = read_whole(dir / checkpoint_dense_name);
  if (!dense) return dense.err();
  config.restored_dense = std::move(*dense);
  config.restored_dense_from = (dir / checkpoint_dense_name).string();
  for (size_t w = 0; w < config.workers.size(); ++w)
    config.workers[w].skip_batches = meta.positions[w];
  config.incarnation = incarnation;
  config.first_epoch = meta.epoch + 1;
  config.restored_passes = meta.passes;
  config.restored_batches = meta.batches;
  config.restored_examples = meta.examples;
  return meta;
}

}  // namespace strata::actors
