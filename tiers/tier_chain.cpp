#include "tiers/tier_chain.hpp"

#include <algorithm>

namespace strata {

tier_chain::tier_chain(table_config table, tier_chain_config config,
                       std::unique_ptr<dram_tier> dram, std::unique_ptr<lmdb_tier> durable)
    : table_(std::move(table)),
      config_(config),
      dram_(std::move(dram)),
      write_behind_(std::make_unique<write_behind_buffer>(table_.layout)),
      durable_(std::move(durable)) {
  STRATA_ASSERT(dram_ != nullptr, "a tier chain needs a DRAM tier");
  STRATA_ASSERT(dram_->layout() == table_.layout, "DRAM tier layout differs from the table's");
  tiers_ = {dram_.get(), write_behind_.get()};
  if (durable_) {
    STRATA_ASSERT(durable_->layout() == table_.layout, "LMDB tier layout differs from the table's");
    tiers_.push_back(durable_.get());
  }
  stats_.hits_per_tier.assign(tiers_.size(), 0);
  for (row_buffer* b : {&locate_.rows, &lookup_.promote, &lookup_.created, &lookup_.unique,
                        &lookup_.spilled, &push_.rows, &push_.updated, &push_.spilled})
    *b = row_buffer(table_.layout);
  if (config_.admission_threshold > 0) sketch_.emplace(config_.sketch_width, config_.sketch_depth);
}

status tier_chain::store_spilled(row_buffer& spilled) {
  // Dirty rows leaving DRAM go to the write-behind buffer, which never spills.
  if (spilled.empty()) return {};
  row_buffer none(table_.layout);
  STRATA_TRY(write_behind_->store(spilled.keys(), spilled.rows(), true, none));
  spilled.clear();
  return {};
}

status tier_chain::locate(std::span<const uint64_t> keys, rows_span out, std::vector<int>& found) {
  found.assign(keys.size(), -1);
  auto& pending = locate_.pending;
  pending.resize(keys.size());
  for (uint32_t i = 0; i < keys.size(); ++i) pending[i] = i;
  const row_layout& layout = table_.layout;
  auto& sub_keys = locate_.sub_keys;
  auto& misses = locate_.misses;
  auto& rows = locate_.rows;
  auto& still = locate_.still;
  for (size_t t = 0; t < tiers_.size() && !pending.empty(); ++t) {
    sub_keys.clear();
    for (uint32_t i : pending) sub_keys.push_back(keys[i]);
    rows.clear();
    rows.reserve(sub_keys.size());
    for (uint64_t k : sub_keys) rows.append(k);
    misses.clear();
    if (observer_) observer_->before_lookup(t);
    STRATA_TRY(tiers_[t]->lookup(sub_keys, rows.rows(), misses));
    if (observer_) observer_->after_lookup(t, sub_keys.size());
    still.clear();
    size_t m = 0;
    for (uint32_t j = 0; j < sub_keys.size(); ++j) {
      if (m < misses.size() && misses[m] == j) {
        ++m;
        still.push_back(pending[j]);
        continue;
      }
      std::memcpy(out[pending[j]], rows.record(j), layout.record_bytes());
      found[pending[j]] = static_cast<int>(t);
    }
    pending.swap(still);
  }
  return {};
}

status tier_chain::lookup(std::span<const uint64_t> keys, rows_span out,
                          std::vector<uint8_t>* admitted) {
  const row_layout& layout = table_.layout;
  if (admitted) admitted->assign(keys.size(), 1);
  auto& found = lookup_.found;
  STRATA_TRY(locate(keys, out, found));

  // Promote rows found below DRAM (once per key), and create rows for keys
  // found nowhere.
  auto& promote = lookup_.promote;
  auto& created = lookup_.created;
  promote.clear();
  created.clear();
  auto& fresh = lookup_.fresh;  // key -> first position served by the initializer
  fresh.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i] >= 0) {
      ++stats_.hits_per_tier[static_cast<size_t>(found[i])];
      if (found[i] > 0) promote.append(keys[i], out[i]);
      continue;
    }
    auto [at, first] = fresh.try_emplace(keys[i], static_cast<uint32_t>(i));
    if (!first) {  // a repeat of a key created earlier in this batch
      const uint32_t earlier = *at;
      std::memcpy(out[i], out[earlier], layout.record_bytes());
      if (admitted) (*admitted)[i] = (*admitted)[earlier];
      continue;
    }
    table_.initial_row(keys[i], out[i], make_version(config_.incarnation, 0));
    ++stats_.initialized;
    bool admit = true;
    if (sketch_) admit = sketch_->add(keys[i]) >= config_.admission_threshold;
    if (admit) {
      created.append(keys[i], out[i]);
    } else {
      ++stats_.not_admitted;
      if (admitted) (*admitted)[i] = 0;
    }
  }
  if (!promote.empty() || !created.empty()) {
    // Deduplicate promotions: a key repeated in the batch is stored once.
    auto& unique = lookup_.unique;
    unique.clear();
    auto& seen = lookup_.seen;
    seen.clear();
    for (size_t i = 0; i < promote.size(); ++i)
      if (seen.try_emplace(promote.key(i), 1).second)
        unique.append(promote.key(i), promote.record(i));
    for (size_t i = 0; i < created.size(); ++i) unique.append(created.key(i), created.record(i));
    stats_.promoted += promote.size();
    auto& spilled = lookup_.spilled;
    spilled.clear();
    // Clean: an initializer row can be recreated, a promoted row is below.
    STRATA_TRY(dram_->store(unique.keys(), unique.rows(), false, spilled));
    STRATA_TRY(store_spilled(spilled));
  }
  return {};
}

status tier_chain::push(std::span<const uint64_t> keys, const float* grads, size_t grad_stride,
                        std::vector<uint64_t>* new_versions) {
  const row_layout& layout = table_.layout;
  const uint32_t dim = layout.dim;
  // Reduce duplicates: sum gradients in batch order, keep first-seen key order.
  auto& unique = push_.unique;
  auto& summed = push_.summed;
  auto& index = push_.index;
  auto& position_of = push_.position_of;
  unique.clear();
  summed.clear();
  index.clear();
  position_of.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [at, first] = index.try_emplace(keys[i], static_cast<uint32_t>(unique.size()));
    if (first) {
      unique.push_back(keys[i]);
      summed.insert(summed.end(), grads + i * grad_stride, grads + i * grad_stride + dim);
    } else {
      float* acc = summed.data() + size_t{*at} * dim;
      const float* g = grads + i * grad_stride;
      for (uint32_t j = 0; j < dim; ++j) acc[j] += g[j];
    }
    position_of[i] = *at;
  }

  auto& misses = push_.misses;
  misses.clear();
  STRATA_TRY(dram_->push(unique, summed.data(), dim, table_.optimizer, misses));
  auto& versions = push_.versions;
  auto& dropped = push_.dropped;
  versions.assign(unique.size(), 0);
  dropped.assign(unique.size(), 0);
  if (!misses.empty()) {
    // Bring the missing rows up through the chain, update them here and
    // store them dirty into DRAM (which may spill older dirty rows).
    auto& miss_keys = push_.miss_keys;
    miss_keys.clear();
    for (uint32_t m : misses) miss_keys.push_back(unique[m]);
    auto& rows = push_.rows;
    rows.clear();
    for (uint64_t k : miss_keys) rows.append(k);
    auto& admitted = push_.admitted;
    STRATA_TRY(lookup(miss_keys, rows.rows(), &admitted));
    auto& updated = push_.updated;
    updated.clear();
    for (size_t j = 0; j < miss_keys.size(); ++j) {
      if (!admitted[j]) {
        ++stats_.dropped_pushes;
        dropped[misses[j]] = 1;
        continue;
      }
      apply_optimizer(table_.optimizer, layout, rows.record(j),
                      summed.data() + size_t{misses[j]} * dim);
      updated.append(miss_keys[j], rows.record(j));
    }
    auto& spilled = push_.spilled;
    spilled.clear();
    STRATA_TRY(dram_->store(updated.keys(), updated.rows(), true, spilled));
    STRATA_TRY(store_spilled(spilled));
  }
  if (new_versions) {
    auto& rows = push_.rows;
    rows.clear();
    for (uint64_t k : unique) rows.append(k);
    auto& found = push_.found;
    STRATA_TRY(locate(unique, rows.rows(), found));
    for (size_t u = 0; u < unique.size(); ++u)
      versions[u] = (dropped[u] || found[u] < 0) ? 0 : meta_of(rows.record(u)).version;
    new_versions->resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) (*new_versions)[i] = versions[position_of[i]];
  }
  return {};
}

status tier_chain::write_back(std::span<const uint64_t> keys, const_rows_span rows) {
  const row_layout& layout = table_.layout;
  row_buffer current(layout);
  for (uint64_t k : keys) current.append(k);
  std::vector<int> found;
  STRATA_TRY(locate(keys, current.rows(), found));
  row_buffer newer(layout);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i] >= 0 && meta_of(current.record(i)).version > meta_of(rows[i]).version) continue;
    newer.append(keys[i], rows[i]);
  }
  row_buffer spilled(layout);
  STRATA_TRY(dram_->store(newer.keys(), newer.rows(), true, spilled));
  return store_spilled(spilled);
}

bool tier_chain::take_flush(row_buffer& rows, uint64_t& seq) {
  return write_behind_->take_batch(rows, seq);
}

void tier_chain::flushed(uint64_t seq) {
  stats_.flushed_rows += write_behind_->release(seq);
  if (write_behind_->in_flight_batches() == 0 && !pending_tombstones_.empty()) {
    // Best effort here; expire()/drain() report errors of the durable tier.
    (void)write_tombstones();
  }
}

status tier_chain::drain() {
  row_buffer dirty(table_.layout);
  STRATA_TRY(dram_->take_dirty(dirty));
  STRATA_TRY(store_spilled(dirty));
  row_buffer batch(table_.layout);
  uint64_t seq = 0;
  while (take_flush(batch, seq)) {
    if (durable_) {
      row_buffer none(table_.layout);
      STRATA_TRY(durable_->store(batch.keys(), batch.rows(), true, none));
    }
    flushed(seq);
  }
  if (!durable_) return {};
  STRATA_TRY(write_tombstones());
  return durable_->sync();
}

void tier_chain::set_tick(uint32_t tick) {
  tick_ = tick;
  dram_->set_tick(tick);
}

status tier_chain::write_tombstones() {
  if (!durable_ || pending_tombstones_.empty()) {
    pending_tombstones_.clear();
    return {};
  }
  std::vector<uint64_t> keys;
  for (uint64_t k : pending_tombstones_) {
    // A key that got a row again since it expired is not deleted.
    if (dram_->contains(k)) continue;
    std::vector<uint32_t> miss;
    std::vector<std::byte> scratch(table_.layout.record_bytes());
    STRATA_TRY(write_behind_->lookup({&k, 1}, {scratch.data(), scratch.size()}, miss));
    if (miss.empty()) continue;
    keys.push_back(k);
  }
  pending_tombstones_.clear();
  if (keys.empty()) return {};
  std::vector<uint64_t> versions(keys.size(), make_version(0, 0));
  STRATA_TRY(durable_->store_tombstones(keys, versions));
  stats_.tombstones += keys.size();
  return {};
}

status tier_chain::expire() {
  std::vector<uint64_t> expired;
  dram_->expire(expired);
  if (expired.empty()) return {};
  STRATA_TRY(write_behind_->erase(expired));
  pending_tombstones_.insert(pending_tombstones_.end(), expired.begin(), expired.end());
  if (write_behind_->in_flight_batches() == 0) return write_tombstones();
  return {};
}

}  // namespace strata
