// The coordinator's loss history in bounded memory: what its two figures
// use, not one entry per batch for the life of the run.
//
//   recent_loss() — the mean loss over the last `recent` reports (the
//                   progress sink's figure), kept exactly in a ring;
//   tail_loss()   — the mean loss over the last ceil(n/10) of the n reports
//                   so far (the training summary's figure).
//
// The tail window only moves forward (its start, n - ceil(n/10), never
// decreases), so reports before it are dropped for good. The window itself
// is a tenth of the run; past `max_blocks` entries, neighbouring entries are
// merged pairwise (each entry then covers twice as many reports). Up to
// 10 * max_blocks reports (655,360 by default) the figure is exactly the
// straightforward one; beyond, the window's start is rounded down to an
// entry's boundary (at most 2/max_blocks of the window more). Memory:
// at most max_blocks + recent entries.
// Not thread-safe: the coordinator actor's state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>

namespace strata::actors {

class loss_history {
 public:
  explicit loss_history(size_t recent = 64, size_t max_blocks = size_t{1} << 16)
      : recent_(std::max<size_t>(recent, 1)), max_blocks_(std::max<size_t>(max_blocks, 2)) {}

  void add(uint64_t examples, double loss_sum) {
    ++reports_;
    // The tail window.
    if (tail_.empty() || tail_.back().reports >= granularity_)
      tail_.push_back({});
    auto& last = tail_.back();
    ++last.reports;
    last.examples += examples;
    last.loss_sum += loss_sum;
    // Drop whole entries that fell before the window's start.
    const uint64_t start = reports_ - std::max<uint64_t>(1, (reports_ + 9) / 10);
    while (!tail_.empty() && first_ + tail_.front().reports <= start) {
      first_ += tail_.front().reports;
      tail_.pop_front();
    }
    if (tail_.size() > max_blocks_) coarsen();
    // The recent ring.
    recent_window_.push_back({1, examples, loss_sum});
    if (recent_window_.size() > recent_) recent_window_.pop_front();
  }

  double tail_loss() const { return mean(tail_); }
  double recent_loss() const { return mean(recent_window_); }
  uint64_t reports() const { return reports_; }
  // Entries held (the memory bound's measure).
  size_t entries() const { return tail_.size() + recent_window_.size(); }

 private:
  struct entry {
    uint64_t reports = 0;
    uint64_t examples = 0;
    double loss_sum = 0;
  };

  static double mean(const std::deque<entry>& xs) {
    uint64_t examples = 0;
    double loss = 0;
    for (const auto& e : xs) {
      examples += e.examples;
      loss += e.loss_sum;
    }
    return examples == 0 ? 0 : loss / static_cast<double>(examples);
  }

  // Merges neighbouring entries pairwise; later entries cover twice as
  // many reports.
  void coarsen() {
    granularity_ *= 2;
    std::deque<entry> merged;
    for (size_t i = 0; i < tail_.size(); i += 2) {
      entry e = tail_[i];
      if (i + 1 < tail_.size()) {
        e.reports += tail_[i + 1].reports;
        e.examples += tail_[i + 1].examples;
        e.loss_sum += tail_[i + 1].loss_sum;
      }
      merged.push_back(e);
    }
    tail_ = std::move(merged);
  }

  size_t recent_;
  size_t max_blocks_;
  uint64_t granularity_ = 1;  // reports per entry of tail_ from now on
  uint64_t reports_ = 0;
  uint64_t first_ = 0;  // index of the first report in tail_
  std::deque<entry> tail_;
  std::deque<entry> recent_window_;
};

}  // namespace strata::actors
