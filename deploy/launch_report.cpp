#include "deploy/launch_report.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "model/datagen.hpp"

namespace strata::cli {
namespace {

// "12.3k" style for the progress line.
std::string short_count(double v) {
  char text[32];
  if (v >= 1e6)
    std::snprintf(text, sizeof text, "%.2fM", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(text, sizeof text, "%.1fk", v / 1e3);
  else
    std::snprintf(text, sizeof text, "%.0f", v);
  return text;
}

void print_tiers(const actors::training_report& r) {
  std::printf("tiers:\n");
  for (const auto& t : r.tiers) {
    std::printf(
        "  %s: hits %llu, misses %llu, evictions %llu, flushed rows %llu, rows %llu",
        t.name.c_str(), static_cast<unsigned long long>(t.hits),
        static_cast<unsigned long long>(t.misses), static_cast<unsigned long long>(t.evictions),
        static_cast<unsigned long long>(t.flushed_rows), static_cast<unsigned long long>(t.rows));
    if (!t.chain_hits.empty()) {
      static const char* const names[] = {"dram", "write-behind", "lmdb"};
      std::printf(", hits by tier");
      for (size_t i = 0; i < t.chain_hits.size(); ++i)
        std::printf(" %s %llu", i < 3 ? names[i] : "tier",
                    static_cast<unsigned long long>(t.chain_hits[i]));
      std::printf(", initialized %llu, lmdb rows %llu",
                  static_cast<unsigned long long>(t.initialized),
                  static_cast<unsigned long long>(t.lmdb_rows));
    }
    std::printf("\n");
  }
}

}  // namespace

namespace detail {

std::string mode_name(actors::training_mode mode) {
  return mode == actors::training_mode::async ? "async" : "pass";
}

uint64_t planned_examples(const actors::cluster_config& c) {
  uint64_t total = 0;
  for (const auto& w : c.workers) {
    if (w.data.limit == 0) return 0;
    uint64_t n = w.data.limit * w.epochs;
    if (w.max_batches != 0) n = std::min<uint64_t>(n, w.max_batches * w.batch_size);
    total += n;
  }
  return total;
}

std::string progress_text(const actors::training_progress& p, uint64_t total) {
  char text[200];
  if (total == 0) {
    std::snprintf(text, sizeof text, "training: %s examples  %s ex/s  loss %.4f  %.0f s",
                  short_count(static_cast<double>(p.examples)).c_str(),
                  short_count(p.examples_per_s).c_str(), p.recent_loss, p.seconds);
    return text;
  }
  constexpr int bar_width = 24;
  const double done = std::min(1.0, static_cast<double>(p.examples) / static_cast<double>(total));
  const int filled = static_cast<int>(done * bar_width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(bar_width - filled), '.');
  std::snprintf(text, sizeof text,
                "training [%s] %3.0f%%  %s/%s examples  %s ex/s  loss %.4f  %.0f s", bar.c_str(),
                100.0 * done, short_count(static_cast<double>(p.examples)).c_str(),
                short_count(static_cast<double>(total)).c_str(),
                short_count(p.examples_per_s).c_str(), p.recent_loss, p.seconds);
  return text;
}

void print_report(const deploy::manifest& m, const actors::training_report& r) {
  const auto planted = model::read_planted(m.data.path);
  const bool has_heldout = r.heldout_examples > 0;
  std::printf("\n== report: cluster %s (%s mode) ==\n", m.cluster.name.c_str(),
              mode_name(m.cluster.mode).c_str());
  std::printf("examples: %llu in %.1f s\n", static_cast<unsigned long long>(r.examples), r.seconds);
  std::printf("examples/s: %.0f\n", r.examples_per_s);
  std::printf("train logloss (last 10%% of batches): %.4f\n", r.train_loss);
  std::printf("held-out examples: %llu\n", static_cast<unsigned long long>(r.heldout_examples));
  if (has_heldout)
    std::printf("held-out AUC: %.4f\n", r.heldout_auc);
  else
    std::printf("held-out AUC: n/a\n");
  if (planted)
    std::printf("planted-model AUC: %.4f\n", planted->auc);
  else
    std::printf("planted-model AUC: n/a\n");
  if (has_heldout)
    std::printf("held-out logloss: %.4f\n", r.heldout_logloss);
  else
    std::printf("held-out logloss: n/a\n");
  if (planted) std::printf("planted-model logloss: %.4f\n", planted->logloss);
  std::printf("bad lines: %llu\n", static_cast<unsigned long long>(r.bad_lines));
  std::printf("stored keys: %llu\n", static_cast<unsigned long long>(r.stored_keys));
  if (r.stopped) std::printf("stopped: on request, before the data ended\n");
  std::printf("checkpoints: %llu%s%s\n", static_cast<unsigned long long>(r.checkpoints),
              r.last_checkpoint.empty() ? "" : ", last ", r.last_checkpoint.c_str());
  print_tiers(r);
}

void print_member_report(const deploy::manifest& m, const deploy::node_membership& member,
                         const actors::training_report& r) {
  std::printf("\n== report: node %s of cluster %s ==\n", member.name().c_str(),
              m.cluster.name.c_str());
  std::printf("served for %.1f s; node %s finished training\n", r.seconds,
              member.coordinator_node().c_str());
  std::printf("stored keys (this node's shards): %llu\n",
              static_cast<unsigned long long>(r.stored_keys));
  print_tiers(r);
}

}  // namespace detail
}  // namespace strata::cli
