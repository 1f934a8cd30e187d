#include "deploy/launch_report.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdarg>
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

// printf onto the end of `out`.
__attribute__((format(printf, 2, 3))) void append(std::string& out, const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  out += text;
}

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

void append_tiers(std::string& out, const actors::training_report& r) {
  out += "tiers:\n";
  for (const auto& t : r.tiers) out += "  " + detail::tier_text(t) + "\n";
}

void append_checkpoints(std::string& out, const actors::training_report& r) {
  append(out, "checkpoints: %llu%s%s\n", ull(r.checkpoints),
         r.last_checkpoint.empty() ? "" : ", last ", r.last_checkpoint.c_str());
}

void append_stop(std::string& out, const actors::training_report& r, int stop_signal,
                 const char* what) {
  if (!r.stopped) return;
  if (stop_signal != 0)
    append(out, "stopped: on request (%s), %s\n", detail::signal_name(stop_signal).c_str(), what);
  else
    append(out, "stopped: on request, %s\n", what);
}

// A store: no workers, clients looked up and pushed rows through the gateway.
std::string store_report_text(const deploy::manifest& m, const actors::training_report& r,
                              int stop_signal) {
  uint64_t lookups = 0, pushes = 0, push_rows = 0;
  for (const auto& t : r.tiers) {
    if (t.kind != "shard") continue;
    lookups += t.lookups;
    pushes += t.pushes;
    push_rows += t.push_rows;
  }
  std::string out;
  append(out, "\n== report: store %s (%s mode) ==\n", m.cluster.name.c_str(),
         detail::mode_name(m.cluster.mode).c_str());
  append(out, "served for %.1f s\n", r.seconds);
  append(out, "lookups (keys, at the shards): %llu\n", ull(lookups));
  append(out, "pushes: %llu (%llu keys)\n", ull(pushes), ull(push_rows));
  append(out, "rows: %llu\n", ull(r.stored_keys));
  append_stop(out, r, stop_signal, "while serving");
  append_checkpoints(out, r);
  append_tiers(out, r);
  return out;
}

}  // namespace

namespace detail {

std::string mode_name(actors::training_mode mode) {
  return mode == actors::training_mode::async ? "async" : "pass";
}

std::string count_of(uint64_t n, const std::string& one, const std::string& many) {
  const std::string plural = many.empty() ? one + "s" : many;
  if (n == 0) return "no " + plural;
  return std::to_string(n) + " " + (n == 1 ? one : plural);
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "Ctrl-C (SIGINT)";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
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

std::string nothing_to_train(const actors::cluster_config& c,
                             const std::vector<uint64_t>& positions) {
  if (c.workers.empty() || positions.size() < c.workers.size()) return "";
  bool capped = false;
  uint64_t trained = 0, planned = 0;
  for (size_t w = 0; w < c.workers.size(); ++w) {
    const auto& wc = c.workers[w];
    if (wc.data.limit == 0 || wc.batch_size == 0) return "";
    // The stream of a worker: each epoch its window in batches, the last
    // one short (reader_source starts the next epoch on a fresh reader).
    const uint64_t per_epoch = (wc.data.limit + wc.batch_size - 1) / wc.batch_size;
    uint64_t batches = per_epoch * std::max<uint32_t>(wc.epochs, 1);
    if (wc.max_batches != 0 && wc.max_batches < batches) {
      batches = wc.max_batches;
      capped = true;
    }
    if (positions[w] < batches) return "";
    trained += positions[w];
    planned += batches;
  }
  const uint32_t epochs = std::max<uint32_t>(c.workers.front().epochs, 1);
  std::string text;
  if (capped)
    append(text,
           "nothing to train: the checkpoint is at batch %llu of %llu (workers.max_batches); "
           "every worker's data is trained",
           ull(trained), ull(planned));
  else
    append(text,
           "nothing to train: the checkpoint is at epoch %u of %u (workers.epochs: %u); every "
           "worker's data is trained",
           epochs, epochs, epochs);
  return text;
}

std::string progress_text(const actors::training_progress& p, uint64_t total, uint64_t before) {
  char text[200];
  const uint64_t examples = before + p.examples;
  if (total == 0) {
    std::snprintf(text, sizeof text, "training: %s examples  %s ex/s  loss %.4f  %.0f s",
                  short_count(static_cast<double>(examples)).c_str(),
                  short_count(p.examples_per_s).c_str(), p.recent_loss, p.seconds);
    return text;
  }
  constexpr int bar_width = 24;
  const double done = std::min(1.0, static_cast<double>(examples) / static_cast<double>(total));
  const int filled = static_cast<int>(done * bar_width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(bar_width - filled), '.');
  std::snprintf(text, sizeof text,
                "training [%s] %3.0f%%  %s/%s examples  %s ex/s  loss %.4f  %.0f s", bar.c_str(),
                100.0 * done, short_count(static_cast<double>(examples)).c_str(),
                short_count(static_cast<double>(total)).c_str(),
                short_count(p.examples_per_s).c_str(), p.recent_loss, p.seconds);
  return text;
}

std::string tier_text(const actors::tier_stats& t) {
  std::string out = t.name + ": ";
  if (t.kind == "shard" && !t.chain_hits.empty()) {
    // The chain: DRAM, write-behind (rows on their way to LMDB), LMDB; a
    // key none of them holds gets its initial row.
    static const char* const names[] = {"DRAM", "write-behind", "LMDB"};
    for (size_t i = 0; i < t.chain_hits.size(); ++i)
      append(out, "%s%s hits %llu", i ? ", " : "", i < 3 ? names[i] : "tier",
             ull(t.chain_hits[i]));
    append(out, ", misses to the initializer %llu", ull(t.initialized));
  } else if (t.kind == "shard") {
    append(out, "DRAM hits %llu, DRAM misses %llu", ull(t.hits), ull(t.misses));
  } else {
    append(out, "cache hits %llu, misses to the shards %llu", ull(t.hits), ull(t.misses));
  }
  append(out, ", evictions %llu, flushed rows %llu, rows %llu", ull(t.evictions),
         ull(t.flushed_rows), ull(t.rows));
  if (t.kind == "shard" && !t.chain_hits.empty()) {
    append(out, ", LMDB rows %llu, write-behind peak %llu rows", ull(t.lmdb_rows),
           ull(t.write_behind_peak_rows));
    // The disk was slower than training: requests waited on flushes.
    if (t.write_behind_stalls > 0)
      append(out, ", waited on the disk %llu times (%.1f s)", ull(t.write_behind_stalls),
             t.write_behind_stall_seconds);
  }
  return out;
}

std::string report_text(const deploy::manifest& m, const actors::training_report& r,
                        int stop_signal) {
  if (m.cluster.workers.empty()) return store_report_text(m, r, stop_signal);
  const auto planted = model::read_planted(m.data.path);
  const bool has_heldout = r.heldout_examples > 0;
  std::string out;
  append(out, "\n== report: cluster %s (%s mode) ==\n", m.cluster.name.c_str(),
         mode_name(m.cluster.mode).c_str());
  append(out, "examples: %llu in %.1f s\n", ull(r.examples), r.seconds);
  append(out, "examples/s: %.0f\n", r.examples_per_s);
  append(out, "train logloss (last 10%% of batches): %.4f\n", r.train_loss);
  append(out, "held-out examples: %llu\n", ull(r.heldout_examples));
  if (has_heldout)
    append(out, "held-out AUC: %.4f\n", r.heldout_auc);
  else
    append(out, "held-out AUC: n/a\n");
  if (planted)
    append(out, "planted-model AUC: %.4f\n", planted->auc);
  else
    append(out, "planted-model AUC: n/a\n");
  if (has_heldout)
    append(out, "held-out logloss: %.4f\n", r.heldout_logloss);
  else
    append(out, "held-out logloss: n/a\n");
  if (planted) append(out, "planted-model logloss: %.4f\n", planted->logloss);
  append(out, "bad lines: %llu\n", ull(r.bad_lines));
  append(out, "stored keys: %llu\n", ull(r.stored_keys));
  append_stop(out, r, stop_signal, "before the data ended");
  append_checkpoints(out, r);
  append_tiers(out, r);
  return out;
}

void print_report(const deploy::manifest& m, const actors::training_report& r, int stop_signal) {
  std::fputs(report_text(m, r, stop_signal).c_str(), stdout);
}

std::string member_report_text(const deploy::manifest& m, const std::string& node,
                               const std::string& coordinator, const actors::training_report& r) {
  std::string out;
  append(out, "\n== report: node %s of cluster %s ==\n", node.c_str(), m.cluster.name.c_str());
  append(out, "served for %.1f s; node %s finished %s\n", r.seconds, coordinator.c_str(),
         m.cluster.workers.empty() ? "serving" : "training");
  append(out, "stored keys (this node's shards): %llu\n", ull(r.stored_keys));
  append_tiers(out, r);
  return out;
}

}  // namespace detail
}  // namespace strata::cli
