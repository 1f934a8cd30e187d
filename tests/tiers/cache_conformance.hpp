// The cache_backend conformance suite (cache_backend.hpp): one body of
// typed tests that every backend passes, so the CPU backend and the CUDA
// backend keep the same resident keys, rows and counts.
//
// A backend joins by defining a factory and instantiating the suite in its
// own test executable — one line:
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(cpu, cache_conformance, cpu_cache_factory);
//
// A factory is a type with
//   static std::string unavailable();  // "" if usable, else the skip reason
//   static std::unique_ptr<cache_backend> make(row_layout, cache_geometry);
//   class memory {                     // memory the backend accepts
//    public:
//     std::byte* allocate(size_t bytes);  // freed when `memory` dies
//     void upload(std::byte* dst, const void* src, size_t bytes);
//     void download(void* dst, const std::byte* src, size_t bytes);
//   };
// The suite talks to the backend through cache_harness, which stages host
// vectors into backend memory, waits for `done` (which may run on another
// thread) and copies results back. Tests only see host vectors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/hash.hpp"
#include "tests/tiers/cache_harness.hpp"
#include "tests/tiers/cache_reference_model.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/cache_backend.hpp"
#include "tiers/optimizer.hpp"
#include "tiers/row.hpp"

namespace strata::testing {

template <class Factory>
class cache_conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = Factory::unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  static cache_harness<Factory> make(row_layout layout, cache_geometry geometry) {
    return cache_harness<Factory>(layout, geometry);
  }
  // One set of one 32-slot slab: every key competes for the same 32 slots.
  static cache_geometry one_set() { return cache_geometry{1, 1}; }

  const row_layout adagrad4_{4, optimizer_kind::adagrad, true};
  const row_layout sgd4_{4, optimizer_kind::sgd, true};
};

TYPED_TEST_SUITE_P(cache_conformance);

// --- query / insert -----------------------------------------------------------------

TYPED_TEST_P(cache_conformance, MissThenInsertThenHitIsBitExact) {
  auto h = this->make(this->adagrad4_, cache_geometry{8, 1});
  const std::vector<uint64_t> keys{5, 900, 77, 123456789012345ULL, 0, ~uint64_t{0}};
  auto q = h.query(keys);
  ASSERT_TRUE(q.st) << q.st.err().to_string();
  EXPECT_EQ(q.counts.hits, 0u);
  EXPECT_EQ(q.counts.misses, keys.size());
  EXPECT_EQ(q.misses, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));

  auto rows = make_records(this->adagrad4_, keys, 3);
  // Access metadata too: the cache stores records byte for byte.
  for (size_t i = 0; i < keys.size(); ++i)
    meta_of(rows.data() + i * h.record_bytes()) = row_meta{4, uint32_t(i + 10), uint32_t(i + 20)};
  auto ins = h.insert(keys, rows, false);
  ASSERT_TRUE(ins.st) << ins.st.err().to_string();
  EXPECT_EQ(ins.counts.skipped, 0u);
  EXPECT_EQ(ins.counts.evicted, 0u);
  EXPECT_EQ(h.cache().size(), keys.size());

  q = h.query(keys);
  ASSERT_TRUE(q.st);
  EXPECT_EQ(q.counts.hits, keys.size());
  EXPECT_EQ(q.counts.misses, 0u);
  EXPECT_TRUE(q.misses.empty());
  EXPECT_EQ(std::memcmp(q.rows.data(), rows.data(), rows.size()), 0);
}

TYPED_TEST_P(cache_conformance, QueryMixesHitsMissesAndDuplicates) {
  auto h = this->make(this->adagrad4_, cache_geometry{4, 1});
  const std::vector<uint64_t> present{10, 20, 30};
  auto rows = make_records(this->adagrad4_, present, 1);
  ASSERT_TRUE(h.insert(present, rows, false).st);

  const std::vector<uint64_t> batch{20, 99, 10, 20, 99, 30, 20, 7};
  auto q = h.query(batch);
  ASSERT_TRUE(q.st);
  EXPECT_EQ(q.counts.hits, 5u);
  EXPECT_EQ(q.counts.misses, 3u);
  EXPECT_EQ(q.misses, (std::vector<uint32_t>{1, 4, 7}));
  const size_t rb = h.record_bytes();
  auto expect_row = [&](size_t pos, size_t src) {
    EXPECT_EQ(std::memcmp(q.rows.data() + pos * rb, rows.data() + src * rb, rb), 0)
        << "position " << pos;
  };
  expect_row(0, 1);
  expect_row(2, 0);
  expect_row(3, 1);
  expect_row(5, 2);
  expect_row(6, 1);
}

// query_weights() (serving's reply path): a hit's version and weights go
// to their places, exactly what query() returns in the record; a miss's
// places stay as they were. Host memory only: a device backend refuses.
TYPED_TEST_P(cache_conformance, QueryWeightsWritesWhatQueryReturns) {
  auto h = this->make(this->adagrad4_, cache_geometry{4, 1});
  const std::vector<uint64_t> present{10, 20, 30};
  auto rows = make_records(this->adagrad4_, present, 1);
  ASSERT_TRUE(h.insert(present, rows, false).st);
  const std::vector<uint64_t> batch{20, 99, 10, 20, 99, 30, 20, 7};
  const std::byte fill{0x5a};
  auto w = h.query_weights(batch, fill);
  if (h.kind() != memory_kind::host) {
    ASSERT_FALSE(w.st);
    EXPECT_EQ(w.st.err().code(), errc::invalid_argument);
    EXPECT_NE(w.st.err().message().find("host memory"), std::string::npos);
    return;
  }
  ASSERT_TRUE(w.st) << w.st.err().message();
  auto q = h.query(batch);
  ASSERT_TRUE(q.st);
  EXPECT_EQ(w.counts.hits, q.counts.hits);
  EXPECT_EQ(w.counts.misses, q.counts.misses);
  EXPECT_EQ(w.misses, q.misses);
  const size_t rb = h.record_bytes(), wb = size_t{4} * this->adagrad4_.dim;
  for (size_t i = 0; i < batch.size(); ++i) {
    SCOPED_TRACE("position " + std::to_string(i));
    const bool miss = std::find(q.misses.begin(), q.misses.end(), i) != q.misses.end();
    if (miss) {
      for (size_t b = 0; b < 8; ++b) EXPECT_EQ(w.versions[i * 8 + b], fill);
      for (size_t b = 0; b < wb; ++b) EXPECT_EQ(w.weights[i * wb + b], fill);
      continue;
    }
    const std::byte* r = q.rows.data() + i * rb;
    uint64_t version = 0;
    std::memcpy(&version, w.versions.data() + i * 8, 8);
    EXPECT_EQ(version, meta_of(r).version);
    EXPECT_EQ(std::memcmp(w.weights.data() + i * wb, weights_of(r), wb), 0);
  }
  // Undersized buffers are refused, naming them.
  auto& cache = h.cache();
  std::vector<uint64_t> keys{10, 20};
  std::vector<std::byte> versions(8), weights(2 * wb);
  std::vector<uint32_t> misses(2);
  cache_counts counts;
  status st;
  cache.query_weights(
      host_span(std::span<const uint64_t>(keys)), host_span(std::span<std::byte>(versions)),
      host_span(std::span<std::byte>(weights)), host_span(std::span<uint32_t>(misses)), counts,
      [&](status s) { st = std::move(s); });
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message().find("versions hold 8 bytes"), std::string::npos)
      << st.err().message();
}

TYPED_TEST_P(cache_conformance, EmptyBatchesAreFine) {
  auto h = this->make(this->adagrad4_, cache_geometry{2, 1});
  auto q = h.query({});
  EXPECT_TRUE(q.st);
  EXPECT_EQ(q.counts.hits + q.counts.misses, 0u);
  EXPECT_TRUE(h.insert({}, {}, true).st);
  optimizer_config opt;
  EXPECT_TRUE(h.update({}, {}, opt).st);
  auto d = h.dump(true, true);
  EXPECT_TRUE(d.st);
  EXPECT_EQ(d.counts.hits, 0u);
}

TYPED_TEST_P(cache_conformance, InsertKeepsHigherVersionBothWays) {
  auto h = this->make(this->adagrad4_, cache_geometry{4, 1});
  const row_layout& L = this->adagrad4_;
  const std::vector<uint64_t> k{42};
  auto v5 = make_records(L, k, 4);   // version 5
  auto v3 = make_records(L, k, 2);   // version 3
  auto v7 = make_records(L, k, 6);   // version 7
  auto v7b = make_records(L, k, 6);  // version 7, other payload
  weights_of(v7b.data())[0] = -1.5f;

  ASSERT_TRUE(h.insert(k, v5, false).st);
  auto older = h.insert(k, v3, true);  // lower version: skipped
  ASSERT_TRUE(older.st);
  EXPECT_EQ(older.counts.skipped, 1u);
  EXPECT_EQ(older.counts.replaced, 0u);
  auto q = h.query(k);
  EXPECT_EQ(std::memcmp(q.rows.data(), v5.data(), v5.size()), 0);
  EXPECT_EQ(h.dump(false, false).counts.hits, 0u) << "a skipped insert must not mark dirty";

  auto newer = h.insert(k, v7, false);  // higher version: replaces
  ASSERT_TRUE(newer.st);
  EXPECT_EQ(newer.counts.skipped, 0u);
  EXPECT_EQ(newer.counts.replaced, 1u) << "a resident row overwritten by a higher version";
  q = h.query(k);
  EXPECT_EQ(std::memcmp(q.rows.data(), v7.data(), v7.size()), 0);

  auto equal = h.insert(k, v7b, false);  // equal version: resident kept
  EXPECT_EQ(equal.counts.skipped, 1u);
  EXPECT_EQ(equal.counts.replaced, 0u);
  q = h.query(k);
  EXPECT_EQ(std::memcmp(q.rows.data(), v7.data(), v7.size()), 0);
  EXPECT_EQ(h.cache().size(), 1u);
}

TYPED_TEST_P(cache_conformance, InsertDuplicatesCollapseToHighestVersion) {
  auto h = this->make(this->adagrad4_, cache_geometry{4, 1});
  const row_layout& L = this->adagrad4_;
  const size_t rb = h.record_bytes();
  const std::vector<uint64_t> keys{8, 8, 9, 8};
  std::vector<std::byte> rows(keys.size() * rb);
  auto put = [&](size_t pos, uint32_t salt, float w0) {
    auto r = make_records(L, {keys[pos]}, salt);
    weights_of(r.data())[0] = w0;
    std::memcpy(rows.data() + pos * rb, r.data(), rb);
  };
  put(0, 2, 1.0f);  // v3
  put(1, 6, 2.0f);  // v7, first of the highest: stored
  put(2, 0, 3.0f);
  put(3, 6, 4.0f);  // v7 again: skipped
  auto ins = h.insert(keys, rows, false);
  ASSERT_TRUE(ins.st);
  EXPECT_EQ(ins.counts.skipped, 2u);
  EXPECT_EQ(h.cache().size(), 2u);
  auto q = h.query({8});
  EXPECT_EQ(std::memcmp(q.rows.data(), rows.data() + 1 * rb, rb), 0);
}

// --- eviction -------------------------------------------------------------------

TYPED_TEST_P(cache_conformance, ScriptedLruEvictionInOneSet) {
  auto h = this->make(this->adagrad4_, this->one_set());
  const row_layout& L = this->adagrad4_;
  auto range = [](uint64_t a, uint64_t b) {
    std::vector<uint64_t> v;
    for (uint64_t k = a; k < b; ++k) v.push_back(k);
    return v;
  };
  auto cat = [](std::vector<uint64_t> a, const std::vector<uint64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return sorted(a);
  };

  // t1: fill the 32 slots (key k -> slot k).
  ASSERT_TRUE(h.insert(range(0, 32), make_records(L, range(0, 32), 0), false).st);
  EXPECT_EQ(h.resident(), range(0, 32));
  // t2: touch 0..9.
  ASSERT_EQ(h.query(range(0, 10)).counts.hits, 10u);
  // t3: ten new keys evict the ten least recently used: 10..19 (tick 1,
  // lowest slots first). Clean rows are dropped, not returned.
  auto ins = h.insert(range(100, 110), make_records(L, range(100, 110), 0), false);
  ASSERT_TRUE(ins.st);
  EXPECT_EQ(ins.counts.evicted, 0u);
  EXPECT_EQ(h.resident(), cat(range(0, 10), cat(range(20, 32), range(100, 110))));
  EXPECT_EQ(h.cache().size(), 32u);

  // t4: an update touches 20 and makes it dirty; t5: query touches 100.
  optimizer_config opt;
  ASSERT_EQ(h.update({20}, std::vector<float>(4, 1.0f), opt).counts.hits, 1u);
  ASSERT_EQ(h.query({100}).counts.hits, 1u);
  // t6: 13 new keys: the 11 tick-1 slots (21..31) go first, then the two
  // lowest-slot tick-2 rows (0, 1). 20 is younger and stays.
  ins = h.insert(range(200, 213), make_records(L, range(200, 213), 0), false);
  ASSERT_TRUE(ins.st);
  EXPECT_EQ(ins.counts.evicted, 0u);
  EXPECT_EQ(h.resident(), cat(range(2, 10), cat({20}, cat(range(100, 110), range(200, 213)))));
}

TYPED_TEST_P(cache_conformance, OverflowWithinOneBatchEvictsEarlierKeysOfThatBatch) {
  auto h = this->make(this->adagrad4_, this->one_set());
  const row_layout& L = this->adagrad4_;
  std::vector<uint64_t> old_keys, batch;
  for (uint64_t k = 1000; k < 1032; ++k) old_keys.push_back(k);
  ASSERT_TRUE(h.insert(old_keys, make_records(L, old_keys, 0), true).st);  // dirty
  // 40 new keys for one 32-slot set, given in descending order (the cache
  // processes them ascending): 200..231 replace every old row (200 in slot
  // 0); then 232..239 all tie on the current tick, so each replaces the
  // lowest slot, 0: 232 evicts 200, 233 evicts 232, ..., 239 evicts 238.
  for (uint64_t k = 239; k >= 200; --k) batch.push_back(k);
  auto ins = h.insert(batch, make_records(L, batch, 5), true);
  ASSERT_TRUE(ins.st);
  // Dirty rows evicted: all 32 old ones and 200, 232..238 of this batch,
  // each once, with their record bytes.
  EXPECT_EQ(ins.counts.evicted, 40u);
  std::vector<uint64_t> expect_evicted = old_keys;
  expect_evicted.push_back(200);
  for (uint64_t k = 232; k < 239; ++k) expect_evicted.push_back(k);
  EXPECT_EQ(sorted(ins.evicted_keys), sorted(expect_evicted));
  const size_t rb = h.record_bytes();
  for (size_t i = 0; i < ins.evicted_keys.size(); ++i) {
    const uint64_t k = ins.evicted_keys[i];
    auto expect = make_records(L, {k}, k >= 1000 ? 0 : 5);
    EXPECT_EQ(std::memcmp(ins.evicted_rows.data() + i * rb, expect.data(), rb), 0) << k;
  }
  std::vector<uint64_t> expect_resident;
  for (uint64_t k = 201; k < 232; ++k) expect_resident.push_back(k);
  expect_resident.push_back(239);
  EXPECT_EQ(h.resident(), expect_resident);
}

TYPED_TEST_P(cache_conformance, OnlyDirtyEvictionsAreReturnedEachOnce) {
  auto h = this->make(this->adagrad4_, cache_geometry{2, 1});
  const row_layout& L = this->adagrad4_;
  auto s0 = keys_in_set(0, 2, 64);
  auto s1 = keys_in_set(1, 2, 8);
  std::vector<uint64_t> clean(s0.begin(), s0.begin() + 16), dirty(s0.begin() + 16, s0.begin() + 32);
  ASSERT_TRUE(h.insert(clean, make_records(L, clean, 0), false).st);
  ASSERT_TRUE(h.insert(dirty, make_records(L, dirty, 0), true).st);
  // The other set has room: filling it evicts nothing from set 0.
  auto other = h.insert(s1, make_records(L, s1, 0), true);
  EXPECT_EQ(other.counts.evicted, 0u);
  EXPECT_EQ(h.cache().size(), 40u);

  // 32 new keys for set 0 replace all of it; only the 16 dirty rows come back.
  std::vector<uint64_t> fresh(s0.begin() + 32, s0.end());
  auto ins = h.insert(fresh, make_records(L, fresh, 1), false);
  ASSERT_TRUE(ins.st);
  EXPECT_EQ(ins.counts.evicted, 16u);
  EXPECT_EQ(sorted(ins.evicted_keys), sorted(dirty));
  EXPECT_EQ(std::set<uint64_t>(ins.evicted_keys.begin(), ins.evicted_keys.end()).size(), 16u);
  // Evicting the (clean) fresh rows returns nothing, and the dirty rows
  // already returned never come back.
  std::vector<uint64_t> more(s0.begin(), s0.begin() + 32);
  ins = h.insert(more, make_records(L, more, 2), false);
  EXPECT_EQ(ins.counts.evicted, 0u);
  EXPECT_EQ(h.cache().size(), 40u);
  // Set 1 is untouched.
  EXPECT_EQ(h.query(s1).counts.hits, s1.size());
}

TYPED_TEST_P(cache_conformance, SetsAreIndependentAndUseTheSharedHash) {
  const cache_geometry geo{4, 1};
  auto h = this->make(this->adagrad4_, geo);
  const row_layout& L = this->adagrad4_;
  // 40 keys for set 2 overflow it by 8; sets 0, 1 and 3 keep their keys.
  auto s2 = keys_in_set(2, 4, 40);
  std::vector<uint64_t> others;
  for (uint32_t s : {0u, 1u, 3u}) {
    auto ks = keys_in_set(s, 4, 32);
    others.insert(others.end(), ks.begin(), ks.end());
  }
  ASSERT_TRUE(h.insert(others, make_records(L, others, 0), false).st);
  ASSERT_TRUE(h.insert(s2, make_records(L, s2, 0), false).st);
  EXPECT_EQ(h.cache().size(), 4u * 32u);
  EXPECT_EQ(h.query(others).counts.hits, others.size());
  // s2 ascending: the first 32 fill set 2, the last 8 each replace slot 0.
  std::vector<uint64_t> survivors(s2.begin() + 1, s2.begin() + 32);
  survivors.push_back(s2.back());
  EXPECT_EQ(h.resident(), sorted([&] {
              auto all = others;
              all.insert(all.end(), survivors.begin(), survivors.end());
              return all;
            }()));
}

// --- update -----------------------------------------------------------------------

TYPED_TEST_P(cache_conformance, UpdateSumsDuplicatesExactlyAndBumpsVersionOnce) {
  // The exact-sum test: zeros, SGD with learning rate 1, integer gradients.
  auto h = this->make(this->sgd4_, cache_geometry{4, 1});
  const row_layout& L = this->sgd4_;
  const std::vector<uint64_t> keys{1, 2, 3};
  ASSERT_TRUE(h.insert(keys, zero_records(L, 3, make_version(2, 10)), false).st);
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.learning_rate = 1.0f;

  const std::vector<uint64_t> batch{1, 2, 1, 1, 2};
  std::vector<float> grads;
  for (size_t i = 0; i < batch.size(); ++i)
    for (uint32_t j = 0; j < 4; ++j) grads.push_back(float((i + 1) * 10 + j));
  auto u = h.update(batch, grads, opt);
  ASSERT_TRUE(u.st) << u.st.err().to_string();
  EXPECT_EQ(u.counts.hits, 5u);
  EXPECT_EQ(u.counts.misses, 0u);

  auto q = h.query(keys);
  const size_t rb = h.record_bytes();
  for (uint32_t j = 0; j < 4; ++j) {
    EXPECT_EQ(weights_of(q.rows.data())[j], -float(10 + 30 + 40 + 3 * j));
    EXPECT_EQ(weights_of(q.rows.data() + rb)[j], -float(20 + 50 + 2 * j));
    EXPECT_EQ(weights_of(q.rows.data() + 2 * rb)[j], 0.0f);
  }
  EXPECT_EQ(meta_of(q.rows.data()).version, make_version(2, 11));
  EXPECT_EQ(meta_of(q.rows.data() + rb).version, make_version(2, 11));
  EXPECT_EQ(meta_of(q.rows.data() + 2 * rb).version, make_version(2, 10));

  ASSERT_TRUE(h.update({3, 1}, std::vector<float>(8, 1.0f), opt).st);
  q = h.query(keys);
  EXPECT_EQ(meta_of(q.rows.data()).version, make_version(2, 12));
  EXPECT_EQ(meta_of(q.rows.data() + 2 * rb).version, make_version(2, 11));
}

TYPED_TEST_P(cache_conformance, UpdateSumsInBatchOrder) {
  // Float addition does not associate: 1e8 + 1 == 1e8. Summing by position
  // gives key 5: (1e8 + -1e8) + 1 = 1 and key 6: (1e8 + 1) + -1e8 = 0.
  auto h = this->make(this->sgd4_, cache_geometry{2, 1});
  const row_layout& L = this->sgd4_;
  ASSERT_TRUE(h.insert({5, 6}, zero_records(L, 2, 1), false).st);
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.learning_rate = 1.0f;
  const std::vector<uint64_t> batch{6, 5, 5, 6, 6, 5};
  const std::vector<float> per_pos{1e8f, 1e8f, -1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<float> grads;
  for (float g : per_pos) grads.insert(grads.end(), 4, g);
  ASSERT_TRUE(h.update(batch, grads, opt).st);
  auto q = h.query({5, 6});
  EXPECT_EQ(weights_of(q.rows.data())[0], -1.0f);
  EXPECT_EQ(weights_of(q.rows.data() + h.record_bytes())[0], 0.0f);
}

TYPED_TEST_P(cache_conformance, UpdateRunsAdagradOncePerKey) {
  const row_layout& L = this->adagrad4_;
  auto h = this->make(L, cache_geometry{2, 1});
  optimizer_config opt;  // Adagrad defaults
  opt.kind = optimizer_kind::adagrad;
  opt.learning_rate = 0.1f;
  // Weights and (positive) accumulators from make_records, version 3.
  const std::vector<std::byte> row = make_records(L, {77}, 2);
  ASSERT_TRUE(h.insert({77}, row, false).st);

  const std::vector<float> g1{0.5f, -1.0f, 2.0f, 0.25f}, g2{1.5f, 3.0f, -0.5f, 0.75f};
  std::vector<float> grads = g1;
  grads.insert(grads.end(), g2.begin(), g2.end());
  ASSERT_TRUE(h.update({77, 77}, grads, opt).st);
  auto q = h.query({77});

  // Reference: one step with the summed gradient.
  std::vector<std::byte> once = row, twice = row;
  std::vector<float> sum(4);
  for (size_t j = 0; j < 4; ++j) sum[j] = g1[j] + g2[j];
  apply_optimizer(opt, L, once.data(), sum.data());
  apply_optimizer(opt, L, twice.data(), g1.data());
  apply_optimizer(opt, L, twice.data(), g2.data());
  EXPECT_TRUE(same_row(L, q.rows.data(), once.data()));
  EXPECT_FALSE(same_row(L, q.rows.data(), twice.data()));
  EXPECT_EQ(meta_of(q.rows.data()).version, 4u);
}

TYPED_TEST_P(cache_conformance, UpdateReportsEveryPositionOfMissingKeys) {
  auto h = this->make(this->sgd4_, cache_geometry{2, 1});
  ASSERT_TRUE(h.insert({1}, zero_records(this->sgd4_, 1, 1), false).st);
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.learning_rate = 1.0f;
  auto u = h.update({9, 1, 9, 4, 1}, std::vector<float>(20, 1.0f), opt);
  ASSERT_TRUE(u.st);
  EXPECT_EQ(u.counts.misses, 3u);
  EXPECT_EQ(u.counts.hits, 2u);
  EXPECT_EQ(u.misses, (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_EQ(h.cache().size(), 1u) << "update never inserts";
  auto q = h.query({1});
  EXPECT_EQ(weights_of(q.rows.data())[0], -2.0f);
}

TYPED_TEST_P(cache_conformance, UpdateRejectsAnOptimizerOtherThanTheLayouts) {
  auto h = this->make(this->adagrad4_, cache_geometry{2, 1});
  ASSERT_TRUE(h.insert({1}, zero_records(this->adagrad4_, 1, 1), false).st);
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  auto u = h.update({1}, std::vector<float>(4, 1.0f), opt);
  ASSERT_FALSE(u.st);
  EXPECT_EQ(u.st.err().code(), errc::invalid_argument);
  EXPECT_EQ(meta_of(h.query({1}).rows.data()).version, 1u);
}

// --- dump / clear -------------------------------------------------------------------

TYPED_TEST_P(cache_conformance, DumpDirtyThenClean) {
  auto h = this->make(this->sgd4_, cache_geometry{4, 1});
  const row_layout& L = this->sgd4_;
  const std::vector<uint64_t> clean{1, 2, 3, 4}, dirty{10, 11};
  auto clean_rows = make_records(L, clean, 0);
  auto dirty_rows = make_records(L, dirty, 1);
  ASSERT_TRUE(h.insert(clean, clean_rows, false).st);
  ASSERT_TRUE(h.insert(dirty, dirty_rows, true).st);
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.learning_rate = 1.0f;
  ASSERT_TRUE(h.update({3}, std::vector<float>(4, 1.0f), opt).st);  // 3 becomes dirty

  // A snapshot of dirty rows leaves flags alone.
  auto snap = h.dump(false, false);
  ASSERT_TRUE(snap.st);
  EXPECT_EQ(sorted(snap.keys), (std::vector<uint64_t>{3, 10, 11}));
  EXPECT_EQ(snap.counts.hits, 3u);
  const size_t rb = h.record_bytes();
  auto q = h.query({3, 10, 11});
  for (size_t i = 0; i < snap.keys.size(); ++i) {
    const uint64_t k = snap.keys[i];
    const size_t at = k == 3 ? 0 : k == 10 ? 1 : 2;
    EXPECT_EQ(std::memcmp(snap.rows.data() + i * rb, q.rows.data() + at * rb, rb), 0) << k;
  }
  // Pass end: take the dirty rows and mark them clean.
  auto pass_end = h.dump(false, true);
  EXPECT_EQ(sorted(pass_end.keys), (std::vector<uint64_t>{3, 10, 11}));
  EXPECT_EQ(h.dump(false, true).counts.hits, 0u);
  // Everything, clean included.
  auto all = h.dump(true, false);
  EXPECT_EQ(sorted(all.keys), (std::vector<uint64_t>{1, 2, 3, 4, 10, 11}));
  EXPECT_EQ(all.counts.hits, h.cache().size());
  // Cleaned rows are no longer returned on eviction: overflow every set.
  std::vector<uint64_t> flood;
  for (uint32_t s = 0; s < 4; ++s) {
    auto ks = keys_in_set(s, 4, 32, 1000);
    flood.insert(flood.end(), ks.begin(), ks.end());
  }
  auto ins = h.insert(flood, make_records(L, flood, 0), false);
  EXPECT_EQ(ins.counts.evicted, 0u);
  EXPECT_EQ(h.resident(), sorted(flood));
}

TYPED_TEST_P(cache_conformance, DumpWithCleanAndClearDirty) {
  auto h = this->make(this->sgd4_, cache_geometry{2, 1});
  const row_layout& L = this->sgd4_;
  ASSERT_TRUE(h.insert({1, 2}, make_records(L, {1, 2}, 0), false).st);
  ASSERT_TRUE(h.insert({3}, make_records(L, {3}, 0), true).st);
  auto d = h.dump(true, true);
  EXPECT_EQ(sorted(d.keys), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(h.dump(false, false).counts.hits, 0u);
}

TYPED_TEST_P(cache_conformance, ClearDropsEverything) {
  auto h = this->make(this->sgd4_, cache_geometry{2, 1});
  const row_layout& L = this->sgd4_;
  ASSERT_TRUE(h.insert({1, 2, 3}, make_records(L, {1, 2, 3}, 0), true).st);
  h.cache().clear();
  EXPECT_EQ(h.cache().size(), 0u);
  auto q = h.query({1, 2, 3});
  EXPECT_EQ(q.counts.misses, 3u);
  EXPECT_EQ(h.dump(true, false).counts.hits, 0u);
  // Usable again; nothing comes back from before the clear.
  auto ins = h.insert({4}, make_records(L, {4}, 0), false);
  EXPECT_EQ(ins.counts.evicted, 0u);
  EXPECT_EQ(h.resident(), (std::vector<uint64_t>{4}));
}

// --- memory kinds ---------------------------------------------------------------------

TYPED_TEST_P(cache_conformance, RejectsMemoryOfTheOtherKind) {
  auto h = this->make(this->sgd4_, cache_geometry{2, 1});
  const row_layout& L = this->sgd4_;
  ASSERT_TRUE(h.insert({1}, make_records(L, {1}, 0), true).st);
  // Wrong-kind spans over real buffers of the right kind: a backend must
  // refuse them from the tag alone, without touching the memory.
  typename TypeParam::memory mem;
  auto keys = h.template space<uint64_t>(mem, 1);
  mem.upload(reinterpret_cast<std::byte*>(keys.data()), "\1\0\0\0\0\0\0\0", 8);
  auto rows = h.template space<std::byte>(mem, h.record_bytes());
  auto ek = h.template space<uint64_t>(mem, 1);
  auto idx = h.template space<uint32_t>(mem, 1);
  auto grads = h.template space<float>(mem, 4);
  auto wrong = [&](auto s) { return with_kind(s, h.other_kind()); };
  auto cst = [](auto s) { return to_const(s); };
  auto expect_rejected = [&](const status& st, const char* call) {
    ASSERT_FALSE(st) << call;
    EXPECT_EQ(st.err().code(), errc::invalid_argument) << call;
  };
  cache_counts counts;
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().query(cst(wrong(keys)), rows, idx, counts, std::move(d));
  }),
                  "query keys");
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().query(cst(keys), wrong(rows), idx, counts, std::move(d));
  }),
                  "query rows");
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().insert(cst(keys), cst(wrong(rows)), false, ek, rows, counts, std::move(d));
  }),
                  "insert rows");
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().insert(cst(keys), cst(rows), false, wrong(ek), rows, counts, std::move(d));
  }),
                  "insert evicted keys");
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().update(cst(keys), cst(wrong(grads)), opt, idx, counts, std::move(d));
  }),
                  "update grads");
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().update(cst(keys), cst(grads), opt, wrong(idx), counts, std::move(d));
  }),
                  "update miss indices");
  expect_rejected(h.wait([&](cache_completion d) {
    h.cache().dump(wrong(ek), rows, true, true, counts, std::move(d));
  }),
                  "dump keys");
  // Nothing changed: key 1 is still resident and dirty.
  EXPECT_EQ(h.resident(), (std::vector<uint64_t>{1}));
  EXPECT_EQ(h.dump(false, false).counts.hits, 1u);
}

TYPED_TEST_P(cache_conformance, RejectsUndersizedBuffers) {
  auto h = this->make(this->sgd4_, cache_geometry{2, 1});
  typename TypeParam::memory mem;
  auto keys = h.template space<uint64_t>(mem, 2);
  const uint64_t k[2] = {1, 2};
  mem.upload(reinterpret_cast<std::byte*>(keys.data()), k, sizeof k);
  auto rows = h.template space<std::byte>(mem, h.record_bytes());  // one record, not two
  auto idx = h.template space<uint32_t>(mem, 2);
  cache_counts counts;
  auto st = h.wait([&](cache_completion d) {
    h.cache().query({keys.data(), 2, keys.kind()}, rows, idx, counts, std::move(d));
  });
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code(), errc::invalid_argument);
}

// --- model check ------------------------------------------------------------------------

TYPED_TEST_P(cache_conformance, RandomSequencesMatchTheReferenceModel) {
  const row_layout& L = this->sgd4_;
  const cache_geometry geo{3, 1};
  auto h = this->make(L, geo);
  reference_cache model(L, geo);
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  opt.learning_rate = 1.0f;
  std::mt19937_64 rng(20240611);  // fixed: the sequence is part of the test
  const size_t rb = h.record_bytes();
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };

  for (int step = 0; step < 400; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<uint64_t> keys(pick(70));
    for (auto& k : keys) k = 1 + pick(160);  // ~160 keys over 96 slots: evictions
    const uint64_t op = pick(3);
    if (op == 0) {
      auto got = h.query(keys);
      auto want = model.query(keys);
      ASSERT_TRUE(got.st);
      EXPECT_EQ(got.counts.hits, want.counts.hits);
      EXPECT_EQ(got.misses, want.misses);
      std::vector<bool> miss(keys.size());
      for (uint32_t m : want.misses) miss[m] = true;
      for (size_t p = 0; p < keys.size(); ++p) {
        if (!miss[p]) {
          ASSERT_EQ(std::memcmp(got.rows.data() + p * rb, want.rows.data() + p * rb, rb), 0);
        }
      }
    } else if (op == 1) {
      std::vector<std::byte> rows(keys.size() * rb);
      for (size_t p = 0; p < keys.size(); ++p) {
        auto r = make_records(L, {keys[p]}, uint32_t(pick(8)));  // versions 1..8
        std::memcpy(rows.data() + p * rb, r.data(), rb);
      }
      const bool dirty = pick(2) == 1;
      auto got = h.insert(keys, rows, dirty);
      auto want = model.insert(keys, rows, dirty);
      ASSERT_TRUE(got.st);
      EXPECT_EQ(got.counts.skipped, want.counts.skipped);
      EXPECT_EQ(got.counts.evicted, want.counts.evicted);
      EXPECT_EQ(got.evicted_keys, want.evicted);
    } else {
      std::vector<float> grads(keys.size() * L.dim);
      for (auto& g : grads) g = float(int(pick(7)) - 3);
      auto got = h.update(keys, grads, opt);
      auto want = model.update(keys, grads, 1.0f);
      ASSERT_TRUE(got.st);
      EXPECT_EQ(got.counts.hits, want.counts.hits);
      EXPECT_EQ(got.misses, want.misses);
    }
    if (step % 20 == 19 || this->HasFailure()) {
      auto all = h.dump(true, false);
      auto dirty = h.dump(false, false);
      std::vector<std::pair<uint64_t, bool>> got;
      std::set<uint64_t> dirty_keys(dirty.keys.begin(), dirty.keys.end());
      for (size_t i = 0; i < all.keys.size(); ++i) {
        got.emplace_back(all.keys[i], dirty_keys.count(all.keys[i]) > 0);
        const std::byte* want_rec = model.record(all.keys[i]);
        ASSERT_NE(want_rec, nullptr) << all.keys[i];
        EXPECT_EQ(std::memcmp(all.rows.data() + i * rb, want_rec, rb), 0) << all.keys[i];
      }
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, model.resident());
      EXPECT_EQ(h.cache().size(), got.size());
    }
    if (this->HasFailure()) return;  // the first divergence is the useful one
  }
}

REGISTER_TYPED_TEST_SUITE_P(
    cache_conformance, MissThenInsertThenHitIsBitExact, QueryMixesHitsMissesAndDuplicates,
    QueryWeightsWritesWhatQueryReturns, EmptyBatchesAreFine, InsertKeepsHigherVersionBothWays,
    InsertDuplicatesCollapseToHighestVersion, ScriptedLruEvictionInOneSet,
    OverflowWithinOneBatchEvictsEarlierKeysOfThatBatch, OnlyDirtyEvictionsAreReturnedEachOnce,
    SetsAreIndependentAndUseTheSharedHash, UpdateSumsDuplicatesExactlyAndBumpsVersionOnce,
    UpdateSumsInBatchOrder, UpdateRunsAdagradOncePerKey, UpdateReportsEveryPositionOfMissingKeys,
    UpdateRejectsAnOptimizerOtherThanTheLayouts, DumpDirtyThenClean, DumpWithCleanAndClearDirty,
    ClearDropsEverything, RejectsMemoryOfTheOtherKind, RejectsUndersizedBuffers,
    RandomSequencesMatchTheReferenceModel);

}  // namespace strata::testing
