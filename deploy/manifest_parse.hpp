// The steps of parse_manifest (deploy/manifest.cpp; not a public API):
// the section readers fill a raw_manifest (manifest_sections.cpp), the
// rules between fields are checked on it (manifest_rules.cpp, docs/manifest.md
// "Rules between fields"), it is built into a manifest (manifest_build.cpp),
// and explicit example counts cut the data windows (manifest_split.cpp).
//
// Every step reports into the one `diagnostics` of the parse; plain values,
// one parse on one thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/config.hpp"
#include "common/error.hpp"
#include "deploy/manifest.hpp"
#include "deploy/manifest_reader.hpp"
#include "model/datagen.hpp"
#include "model/reader.hpp"
#include "tiers/dram_tier.hpp"

namespace strata::deploy::detail {

// One entry of `tables:` (docs/manifest.md, "tables"). Unset fields take
// the cluster-wide defaults: model.embedding_dim + 1, shards.admission_threshold,
// shards.ttl_ticks, an even part of shards.dram_bytes.
struct raw_table {
  table_config table;  // name, seed, optimizer, initializer
  std::optional<uint32_t> dim;  // floats per row (element 0: the linear weight)
  std::optional<uint32_t> admission_threshold;
  std::optional<uint32_t> ttl_ticks;
  std::optional<double> dram_share;  // part of shards.dram_bytes, (0, 1]
  std::string path;                  // "tables[i]", for messages
  YAML::Mark mark;
};

// `model.slot_tables`: one slot's table.
struct raw_slot_table {
  std::string slot;   // as written (I3, C1, 17)
  uint32_t index = 0; // model::slot_index of it
  std::string table;
  YAML::Mark mark;
};

// What the parse reads before building the cluster.
struct raw_manifest {
  std::string name = "local";
  actors::training_mode mode = actors::training_mode::async;
  uint32_t partitions = 4096;
  uint64_t pass_batches = 64;
  uint32_t threads = 0;

  table_config table;
  std::optional<uint32_t> table_dim;
  // `tables:` as written (empty: the single `table:` section). Once read,
  // apply_tables() copies the first table's settings into `table` and the
  // cluster-wide fields (a cluster stores one table today, the rules refuse more).
  std::vector<raw_table> tables;
  std::string table_path = "table";  // the first table's field path, for messages
  std::vector<raw_slot_table> slot_tables;
  model::model_config model;
  std::optional<uint32_t> model_slots;

  uint32_t shard_count = 1;
  dram_tier_config dram;
  tier_chain_config chain;
  std::filesystem::path ssd_path;
  size_t map_bytes = size_t{1} << 40;
  bool lmdb_sync = false;
  size_t flush_batch_rows = 4096;
  uint64_t migration_rows_per_s = 0;  // shards.migration_rows_per_s (0: unlimited)
  uint32_t max_flushes_in_flight = 4;
  uint32_t max_queued_flush_batches = 4;

  uint32_t cache_count = 1;
  cache_backend_choice cache_backend = cache_backend_choice::cpu;
  cache_geometry geometry;
  uint32_t staleness = 8;

  uint32_t worker_count = 1;
  actors::worker_config worker;

  model::reader_config data;
  bool has_csv = false;
  data_split split;
  std::optional<model::datagen_config> generate;

  actors::dense_config dense;
  metrics_settings metrics;
  std::vector<node_settings> nodes;
  std::vector<YAML::Mark> node_marks;
  std::vector<std::string> placement;  // one node name per shard; empty: spread
  std::vector<std::pair<std::string, YAML::Mark>> placement_marks;
  std::vector<std::string> cache_placement, worker_placement;
  std::vector<std::pair<std::string, YAML::Mark>> cache_placement_marks, worker_placement_marks;
  transport_settings transport;
  gateway_settings gateway;
  admin_settings admin;
  std::string admin_token_file;
  std::string cluster_secret_file;
  bool cluster_secret_create = false;
  bool has_cluster_secret = false;
  actors::checkpoint_settings checkpoint;
  serving_settings serving;
  updates_settings updates;
  failure_policy on_failure = failure_policy::stop;
  uint32_t max_restarts = 3;
  actors::gradient_kind objective = actors::gradient_kind::ctr;
};

// --- the section readers (manifest_sections.cpp) ------------------------------
// Each reads its section's fields into `r` and reports unknown keys.

// The top-level scalars: name, mode, partitions, pass_batches, threads.
void read_top(section& root, raw_manifest& r);
// `nodes`: a list of node mappings (read from the top section).
void read_nodes(section& top, raw_manifest& r);
void read_table(section s, raw_manifest& r);
// `tables`: a list of table mappings (read from the top section).
void read_tables(section& top, raw_manifest& r);
// With `tables:`, its first entry's settings become the table's and the
// defaults they override (model.embedding_dim, shards.admission_threshold,
// shards.ttl_ticks, shards.dram_bytes).
void apply_tables(raw_manifest& r);
void read_model(section s, raw_manifest& r);
void read_checkpoint(section s, raw_manifest& r);
void read_shards(section s, raw_manifest& r);
void read_caches(section s, raw_manifest& r);
void read_workers(section s, raw_manifest& r);
void read_data(section s, raw_manifest& r);
void read_dense(section s, raw_manifest& r);
void read_serving(section s, raw_manifest& r);
void read_updates(section s, raw_manifest& r);
void read_gateway(section s, raw_manifest& r);
void read_transport(section s, raw_manifest& r);
void read_admin(section s, raw_manifest& r);
void read_cluster_secret(section s, raw_manifest& r);
void read_metrics(section s, raw_manifest& r);

// --- the rules between fields (manifest_rules.cpp) ----------------------------

// Slots per example the data format yields (0: whatever the file holds).
uint32_t reader_slots(const raw_manifest& r);
// Reports every broken rule between fields (the fields themselves parsed).
void check_rules(const raw_manifest& r, diagnostics& diag);

// --- raw_manifest -> manifest (manifest_build.cpp) -----------------------------

manifest build(const raw_manifest& r, const std::string& file);

// --- the data split (manifest_split.cpp) ---------------------------------------

// Fills the windows; `examples` is the file's example count when known.
expected<void> apply_split(manifest& m, std::optional<uint64_t> examples);

}  // namespace strata::deploy::detail
