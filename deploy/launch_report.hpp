// What `strata node` prints (deploy/launch_node.cpp; not a public API): the
// progress line while training and the report after it. Plain functions
// writing to stdout, called from the node's thread.
#pragma once

#include <cstdint>
#include <string>

#include "actors/config.hpp"
#include "actors/local_cluster.hpp"
#include "deploy/manifest.hpp"
#include "deploy/multi_node.hpp"

namespace strata::cli::detail {

// "async" or "pass".
std::string mode_name(actors::training_mode mode);

// Examples the workers will train on, for the progress bar (0: unknown).
uint64_t planned_examples(const actors::cluster_config& c);

// The progress line: a bar when `total` (planned_examples) is known.
std::string progress_text(const actors::training_progress& p, uint64_t total);

// The coordinator node's report: the whole cluster's results and tiers.
void print_report(const deploy::manifest& m, const actors::training_report& r);

// A member node's own part: the tiers it hosted.
void print_member_report(const deploy::manifest& m, const deploy::node_membership& member,
                         const actors::training_report& r);

}  // namespace strata::cli::detail
