// The metric catalogue: turns one node's counters (the tier_stats every
// shard and cache tier answers to stats_atom, the training progress, the
// build) into Prometheus metric families. docs/metrics.md lists every
// family this produces, with its type, labels, unit and meaning.
//
// Names follow Prometheus conventions: `strata_<subsystem>_<name>_<unit>`,
// base units (seconds, bytes), `_total` for counters. Labels are bounded:
// node, table, tier, shard / cache (an actor's index), actor (its kind) —
// never a key.
//
// Pure functions over plain values; thread-compatible. The exporter
// (exporter.hpp) calls them at scrape time.
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/protocol.hpp"
#include "transport/transport_stats.hpp"

namespace strata::monitoring {

struct build_info {
  std::string version;   // "0.1.0"
  std::string revision;  // git revision, "unknown" outside a checkout
  bool cuda = false;
};

// Training progress as the node knows it: running totals while training,
// the final report's values after it.
struct training_values {
  uint64_t examples = 0;
  uint64_t batches = 0;
  double loss = 0;                    // mean logloss of the recent reports
  double examples_per_s = 0;          // since training started
  std::optional<double> heldout_auc;  // the last held-out evaluation, once there is one
  bool active = false;                // training is running
};

// This node's checkpoints (the node that runs the coordinator writes them).
struct checkpoint_values {
  uint64_t completed = 0;
  uint64_t failures = 0;
  uint64_t bytes_total = 0;
  double last_unix_seconds = 0;  // 0: none complete yet (the last_* gauges are left out)
  double last_duration_seconds = 0;
  uint64_t last_bytes = 0;
};

// Everything one scrape exports.
struct node_snapshot {
  std::string node;                         // label `node`
  std::string table;                        // label `table`
  std::vector<actors::tier_stats> tiers;    // shards and caches (kind "shard" / "cache")
  std::vector<actors::actor_stats> actors;  // workers, dense, coordinator (while training)
  training_values training;
  // False on a node of several that does not run the coordinator: it
  // knows no training progress, and exports none (nor checkpoints).
  bool trains = true;
  checkpoint_values checkpoints;
  build_info build;
  uint64_t stats_failures = 0;  // stats requests that timed out or failed
  // The node's UCX transport (multi-node runs), once watched.
  std::optional<transport::transport_stats> transport;
};

// The metric families of a snapshot, each family once, series sorted by
// labels. Histograms get cumulative buckets over
// strata::latency_histogram::bounds; a latency snapshot whose bucket count
// does not match the bounds is left out.
std::vector<prometheus::MetricFamily> to_families(const node_snapshot& snapshot);

// Per-field maximum of two snapshots of one actor's counters (gauges and
// latency sums come from `later`). Used when the exporter freezes the final
// values: counters served before must never decrease.
actors::tier_stats monotonic_merge(const actors::tier_stats& earlier,
                                   const actors::tier_stats& later);

}  // namespace strata::monitoring
