// A reference model of the cache rules of cache_backend.hpp for tests:
// plain per-set slot vectors and std::map batch grouping, written apart
// from any backend so that a long random sequence can be checked against
// it (cache_conformance.hpp). SGD updates only; no optimizer code needed.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "common/hash.hpp"
#include "tiers/cache_backend.hpp"
#include "tiers/row.hpp"

namespace strata::testing {

// A deliberately plain model of the cache rules in cache_backend.hpp (slot
// vectors and a std::map for batch grouping), used to check a backend over
// long random sequences. SGD only, so it needs no optimizer code.
class reference_cache {
 public:
  reference_cache(row_layout layout, cache_geometry geometry)
      : layout_(layout),
        geo_(geometry),
        sets_(geometry.sets, std::vector<slot>(geometry.set_slots())) {}

  struct outcome {
    cache_counts counts;
    std::vector<uint32_t> misses;
    std::vector<uint64_t> evicted;  // processing order
    std::vector<std::byte> rows;    // query: records at hit positions
  };

  outcome query(const std::vector<uint64_t>& keys) {
    ++tick_;
    outcome o;
    o.rows.assign(keys.size() * rb(), std::byte{0});
    for (auto& [sk, positions] : group(keys)) {
      slot* s = find(sk.first, sk.second);
      if (s) s->tick = tick_;
      for (uint32_t p : positions)
        if (s) std::memcpy(o.rows.data() + p * rb(), s->rec.data(), rb());
    }
    mark_misses(keys, o);
    return o;
  }

  outcome insert(const std::vector<uint64_t>& keys, const std::vector<std::byte>& rows,
                 bool dirty) {
    ++tick_;
    outcome o;
    for (auto& [sk, positions] : group(keys)) {
      uint32_t best = positions[0];
      for (uint32_t p : positions)
        if (version(rows, p) > version(rows, best)) best = p;
      o.counts.skipped += uint32_t(positions.size() - 1);
      std::vector<std::byte> rec(rows.begin() + best * rb(), rows.begin() + (best + 1) * rb());
      if (slot* s = find(sk.first, sk.second)) {
        s->tick = tick_;
        if (version(rows, best) > meta_of(s->rec.data()).version) {
          s->rec = rec;
          s->dirty = dirty;
        } else {
          ++o.counts.skipped;
        }
        continue;
      }
      auto& set = sets_[sk.first];
      slot* v = nullptr;
      for (auto& c : set)
        if (!c.valid) {
          v = &c;
          break;
        }
      if (!v) {
        v = &set[0];
        for (auto& c : set)
          if (c.tick < v->tick) v = &c;
        if (v->dirty) {
          o.evicted.push_back(v->key);
          ++o.counts.evicted;
        }
      }
      *v = slot{true, sk.second, tick_, dirty, rec};
    }
    return o;
  }

  // SGD: w -= lr * (sum of the key's gradients, added by position).
  outcome update(const std::vector<uint64_t>& keys, const std::vector<float>& grads, float lr) {
    ++tick_;
    outcome o;
    for (auto& [sk, positions] : group(keys)) {
      slot* s = find(sk.first, sk.second);
      if (!s) continue;
      for (uint32_t j = 0; j < layout_.dim; ++j) {
        float sum = grads[positions[0] * layout_.dim + j];
        for (size_t i = 1; i < positions.size(); ++i) sum += grads[positions[i] * layout_.dim + j];
        float& w = weights_of(s->rec.data())[j];
        w = w - lr * sum;
      }
      ++meta_of(s->rec.data()).version;
      s->tick = tick_;
      s->dirty = true;
    }
    mark_misses(keys, o);
    return o;
  }

  // (key, dirty) of every resident row, sorted by key.
  std::vector<std::pair<uint64_t, bool>> resident() const {
    std::vector<std::pair<uint64_t, bool>> out;
    for (auto& set : sets_)
      for (auto& s : set)
        if (s.valid) out.emplace_back(s.key, s.dirty);
    std::sort(out.begin(), out.end());
    return out;
  }
  const std::byte* record(uint64_t key) {
    slot* s = find(cache_set_of(key, geo_.sets), key);
    return s ? s->rec.data() : nullptr;
  }

 private:
  struct slot {
    bool valid = false;
    uint64_t key = 0;
    uint64_t tick = 0;
    bool dirty = false;
    std::vector<std::byte> rec;
  };
  size_t rb() const { return layout_.record_bytes(); }
  uint64_t version(const std::vector<std::byte>& rows, uint32_t p) const {
    return meta_of(rows.data() + p * rb()).version;
  }
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint32_t>> group(
      const std::vector<uint64_t>& keys) const {
    std::map<std::pair<uint32_t, uint64_t>, std::vector<uint32_t>> g;
    for (uint32_t p = 0; p < keys.size(); ++p)
      g[{cache_set_of(keys[p], geo_.sets), keys[p]}].push_back(p);
    return g;
  }
  slot* find(uint32_t set, uint64_t key) {
    for (auto& s : sets_[set])
      if (s.valid && s.key == key) return &s;
    return nullptr;
  }
  void mark_misses(const std::vector<uint64_t>& keys, outcome& o) {
    for (uint32_t p = 0; p < keys.size(); ++p) {
      if (find(cache_set_of(keys[p], geo_.sets), keys[p])) {
        ++o.counts.hits;
      } else {
        o.misses.push_back(p);
        ++o.counts.misses;
      }
    }
  }

  row_layout layout_;
  cache_geometry geo_;
  std::vector<std::vector<slot>> sets_;
  uint64_t tick_ = 0;
};

}  // namespace strata::testing
