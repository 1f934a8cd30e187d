// Checkpoint directories: their format, listing, pruning, deep
// verification and restore (docs/checkpoints.md is the long form).
//
// A checkpoint is one directory under the cluster's checkpoint root,
// `ckpt-<epoch, 12 digits>/`, holding
//   CHECKPOINT          metadata (text): cluster, epoch, incarnation, table
//                       layout, partitions and the partition map, per-shard
//                       row counts, per-worker data positions, dense size
//   dense.bin           the dense actor's record (weights, Adam m, v, step)
//   shard-<i>/data.mdb  a compacted copy of shard i's LMDB environment
//   shard-<i>/shard.state  the shard's TTL clock and admission sketch
//   FILES               every file above with its size and CRC32C, written
//                       last and atomically (common/file_manifest.hpp)
// A directory without FILES is incomplete (interrupted) and never used.
//
// Restore re-assigns partitions, never rehashes: the rows of partition p
// move from the checkpoint's owner of p to the new map's owner of p by one
// LMDB range scan. Restored rows get the new incarnation in their version
// (docs/architecture.md, Semantics: Rows), so versions keep growing
// across a restore.
//
// Plain functions, no actors; they read and write files, so they run in
// the composition root or a checkpoint writer, never on a hot path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/config.hpp"
#include "common/error.hpp"
#include "tiers/lmdb_tier.hpp"
#include "tiers/table.hpp"

namespace strata::actors {

inline constexpr uint32_t checkpoint_format_version = 1;
inline constexpr const char* checkpoint_meta_name = "CHECKPOINT";
inline constexpr const char* checkpoint_dense_name = "dense.bin";
inline constexpr const char* checkpoint_shard_state_name = "shard.state";
// In a checkpoint root: the highest incarnation a restore handed out.
inline constexpr const char* incarnation_record_name = "INCARNATION";

struct checkpoint_meta {
  uint32_t format = checkpoint_format_version;
  std::string cluster;
  uint64_t epoch = 0;        // 1, 2, ... within a cluster's life (restores continue it)
  uint16_t incarnation = 0;  // of the run that took it
  training_mode mode = training_mode::async;
  uint64_t passes = 0;  // pass mode: passes completed at the cut
  // Table layout: a checkpoint restores only into the same layout.
  std::string table;
  uint32_t dim = 0;
  optimizer_kind optimizer = optimizer_kind::sgd;
  bool with_state = true;
  uint32_t row_format = row_format_version;
  uint32_t partitions = 0;
  uint64_t map_epoch = 0;
  std::vector<uint32_t> owners;      // partition -> shard at the cut
  std::vector<uint64_t> shard_rows;  // live rows per shard copy
  std::vector<uint64_t> positions;   // per worker: batches of its stream trained
  uint64_t batches = 0;              // totals of the run(s) up to the cut
  uint64_t examples = 0;
  uint64_t dense_bytes = 0;  // size of dense.bin
};

// "ckpt-000000000007"
std::string checkpoint_name(uint64_t epoch);
std::filesystem::path shard_checkpoint_dir(const std::filesystem::path& checkpoint, uint32_t shard);

expected<void> write_checkpoint_meta(const std::filesystem::path& dir, const checkpoint_meta& meta);
// Errors name the CHECKPOINT file and the line; a CHECKPOINT that does not
// match its FILES entry is a checksum mismatch (as in verify_checkpoint).
expected<checkpoint_meta> read_checkpoint_meta(const std::filesystem::path& dir);

// Shard copy `shard` of checkpoint `dir` (whose CHECKPOINT is `meta`), opened
// read-only (only its committed pages mapped) with the checkpoint's row
// layout: what verify, serving's load and key listing read.
expected<std::unique_ptr<lmdb_tier>> open_checkpoint_shard(const std::filesystem::path& dir,
                                                           const checkpoint_meta& meta,
                                                           uint32_t shard);

// Writes `bytes` to `file` and fsyncs it; errors name the file.
expected<void> write_file_synced(const std::filesystem::path& file, const void* bytes, size_t size);
// Fsyncs every regular file under `dir` and the directories themselves.
expected<void> sync_tree(const std::filesystem::path& dir);

// Checkpoint directories under `root` that have FILES (complete), by
// ascending epoch; incomplete ones are skipped.
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root);
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root);
// The highest epoch of any checkpoint directory under `root`, complete or
// not (0 if none): a new checkpoint never reuses an interrupted one's name.
uint64_t highest_checkpoint_epoch(const std::filesystem::path& root);
// Keeps the newest `keep` complete checkpoints; removes older complete
// ones and incomplete ones older than the newest complete one; then fsyncs
// `root`, so a new ckpt-N's entry and the removals are durable.
expected<void> prune_checkpoints(const std::filesystem::path& root, uint32_t keep);

// Refuses a checkpoint whose table layout or partition count differs from
// `table` / `partitions`; the error names the CHECKPOINT file and field.
expected<void> check_compatible(const checkpoint_meta& meta, const std::filesystem::path& dir,
                                const table_config& table, uint32_t partitions);

struct verify_report {
  checkpoint_meta meta;
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t rows = 0;  // rows decoded (each value's CRC checked)
};

// Checks the file list (sizes, CRC32C), the metadata, each shard copy
// (opened read-only: a truncated file is refused; every row decoded and
// checksummed; row count against CHECKPOINT) and dense.bin's size. With
// `table`, also the layout (check_compatible). Errors name the file and the
// problem.
expected<verify_report> verify_checkpoint(const std::filesystem::path& dir,
                                          const table_config* table = nullptr,
                                          uint32_t partitions = 0);

// Restores checkpoint `dir` into `config`: verifies it, writes each of
// config.shards' LMDB environments (which must be absent or empty) with
// the partitions the new map (round-robin over config.shards.size())
// gives it, rows rewritten with incarnation meta.incarnation + 1; fills
// config.incarnation, config.first_epoch, config.restored_dense, each
// shard's restored_tick and restored_sketch (summed over the old shards
// when the shard count changed: never under-counts), each worker's
// skip_batches (its recorded position) and the restored totals. Returns
// the checkpoint's metadata. `hosted` (multi-node: the shards this node
// hosts; empty: all) limits which environments are written; every node
// restores its own, the rest of `config` is filled the same everywhere.
//
// The new incarnation is max(the checkpoint's, every earlier restore's) + 1:
// before anything else is written it is recorded durably in an INCARNATION
// file in the checkpoint's root (and in config.checkpoint.directory), so
// restoring the same checkpoint again (resume, crash, resume) never hands
// out an incarnation, and so versions, that an earlier run already used.
// `node` (multi-node) names this node's record.
expected<checkpoint_meta> restore_checkpoint(const std::filesystem::path& dir,
                                             cluster_config& config,
                                             const std::vector<bool>& hosted = {},
                                             const std::string& node = {});

// What this process's checkpoints did, for the metrics exporter
// (strata_checkpoint_*, docs/metrics.md). One record per process: a node
// process runs at most one coordinator, the only writer of checkpoints.
struct checkpoint_record {
  uint64_t completed = 0;            // complete checkpoints written
  uint64_t failures = 0;             // attempts that failed (the run fails with them)
  uint64_t bytes_total = 0;          // bytes of every complete checkpoint's files
  double last_unix_seconds = 0;      // when the last one became complete (0: none yet)
  double last_duration_seconds = 0;  // from its cut to its FILES list
  uint64_t last_bytes = 0;           // its files' bytes
};
checkpoint_record checkpoint_records();
void record_checkpoint(double duration_seconds, uint64_t bytes);
void record_checkpoint_failure();

}  // namespace strata::actors
