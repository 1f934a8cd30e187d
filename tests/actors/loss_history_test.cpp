// The coordinator's loss history (actors/loss_history.hpp): bounded memory
// after many reports, with the same tail and recent losses as the
// straightforward computation over every report (the coordinator's former
// per-batch vector, issue 15 item 10).
#include "actors/loss_history.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace strata::actors {
namespace {

struct report {
  uint64_t examples;
  double loss_sum;
};

// What the coordinator computed before: every report kept.
double straightforward_tail(const std::vector<report>& all) {
  if (all.empty()) return 0;
  const size_t tail = std::max<size_t>(1, (all.size() + 9) / 10);
  uint64_t examples = 0;
  double loss = 0;
  for (size_t i = all.size() - tail; i < all.size(); ++i) {
    examples += all[i].examples;
    loss += all[i].loss_sum;
  }
  return examples == 0 ? 0 : loss / static_cast<double>(examples);
}

double straightforward_recent(const std::vector<report>& all, size_t recent) {
  const size_t n = std::min(recent, all.size());
  uint64_t examples = 0;
  double loss = 0;
  for (size_t i = all.size() - n; i < all.size(); ++i) {
    examples += all[i].examples;
    loss += all[i].loss_sum;
  }
  return examples == 0 ? 0 : loss / static_cast<double>(examples);
}

std::vector<report> reports(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> examples(1, 512);
  std::uniform_real_distribution<double> loss(0.1, 0.9);
  std::vector<report> out;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t e = examples(rng);
    // A loss that drifts down over the run, so a wrong window shows.
    out.push_back({e, static_cast<double>(e) * loss(rng) * (1.0 - 0.5 * i / n)});
  }
  return out;
}

TEST(LossHistory, ExactFiguresWithinTheDefaultBound) {
  const auto all = reports(200000, 7);
  loss_history h(64);
  std::vector<report> seen;
  for (size_t i = 0; i < all.size(); ++i) {
    h.add(all[i].examples, all[i].loss_sum);
    seen.push_back(all[i]);
    if (i % 997 == 0 || i + 1 == all.size() || i < 50) {
      ASSERT_NEAR(h.tail_loss(), straightforward_tail(seen), 1e-9) << "after " << i + 1;
      ASSERT_NEAR(h.recent_loss(), straightforward_recent(seen, 64), 1e-9) << "after " << i + 1;
    }
  }
  // A tenth of the run plus the recent ring, not one entry per report.
  EXPECT_LE(h.entries(), all.size() / 10 + 1 + 64);
}

TEST(LossHistory, MemoryIsBoundedAfterManyReports) {
  constexpr size_t max_blocks = 256;
  const auto all = reports(1000000, 11);
  loss_history h(64, max_blocks);
  size_t most = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    h.add(all[i].examples, all[i].loss_sum);
    most = std::max(most, h.entries());
  }
  EXPECT_LE(most, max_blocks + 1 + 64);
  // The window's start rounded to an entry: within 2/max_blocks of the
  // window more reports, so the mean moves very little.
  EXPECT_NEAR(h.tail_loss(), straightforward_tail(all), 2e-3 * straightforward_tail(all));
  EXPECT_NEAR(h.recent_loss(), straightforward_recent(all, 64), 1e-9);
  EXPECT_EQ(h.reports(), all.size());
}

}  // namespace
}  // namespace strata::actors
