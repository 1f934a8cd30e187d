// What `strata node` prints (deploy/launch_node.cpp; not a public API): the
// progress line while training and the report after it. The texts are
// built by plain functions (tested in tests/deploy/launch_report_test.cpp)
// and printed to stdout from the node's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/config.hpp"
#include "actors/local_cluster.hpp"
#include "deploy/manifest.hpp"

namespace strata::cli::detail {

// "async" or "pass".
std::string mode_name(actors::training_mode mode);

// "1 shard", "2 shards", "no workers" (`many`: "" is `one` + "s").
std::string count_of(uint64_t n, const std::string& one, const std::string& many = "");

// How a stop signal is named to the user: "Ctrl-C (SIGINT)", "SIGTERM",
// else "signal N".
std::string signal_name(int sig);

// Examples the workers will train on in the whole run, for the progress
// bar (0: unknown).
uint64_t planned_examples(const actors::cluster_config& c);

// A resume of a run whose workers are all at the end of their data
// (`positions`: the checkpoint's batches per worker): "nothing to train:
// the checkpoint is at epoch E of E ..."; "" when any worker has batches
// left, or their count is unknown, or there are no workers (a store).
std::string nothing_to_train(const actors::cluster_config& c,
                             const std::vector<uint64_t>& positions);

// The progress line: a bar when `total` (planned_examples) is known.
// `before`: examples trained by the runs before a resume (the bar starts
// there).
std::string progress_text(const actors::training_progress& p, uint64_t total,
                          uint64_t before = 0);

// One tier of the report, without indent: each chain tier's hits and the
// misses that fall through (shard: to the initializer; cache: to the shards).
std::string tier_text(const actors::tier_stats& t);

// The coordinator node's report: the whole cluster's results and tiers; a
// store (no workers) gets a store's report (lookups, pushes, rows,
// checkpoints). `stop_signal`: the signal that stopped training (0: none).
std::string report_text(const deploy::manifest& m, const actors::training_report& r,
                        int stop_signal = 0);
void print_report(const deploy::manifest& m, const actors::training_report& r,
                  int stop_signal = 0);

// A member node's own part: the tiers it hosted (`node`: its name;
// `coordinator`: the node that trained).
std::string member_report_text(const deploy::manifest& m, const std::string& node,
                               const std::string& coordinator, const actors::training_report& r);

}  // namespace strata::cli::detail
