// Write-behind buffer: evicted dirty rows stay readable here until the lower
// tier confirms they are stored (docs/architecture.md, Semantics:
// Write-behind).
//
// store() (dirty rows spilled by the tier above) queues the rows into the
// open batch. take_batch() closes it and hands it over under a new sequence
// number: the owner sends flush(rows, seq) to the lower tier. release(seq),
// on flushed(seq), drops each row of that batch only if the buffer's copy of
// the key still has the version that was flushed — a newer copy queued
// meanwhile stays until its own batch is confirmed. lookup() always serves
// the newest queued copy, so a read never sees an older value while a
// flush is in flight.
//
// Owned by one shard actor; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>

#include "common/flat_map.hpp"
#include "tiers/row_store.hpp"

namespace strata {

class write_behind_buffer final : public row_store {
 public:
  explicit write_behind_buffer(row_layout layout);

  std::string_view name() const override { return "write_behind"; }
  const row_layout& layout() const override { return layout_; }
  status lookup(std::span<const uint64_t> keys, rows_span out,
                std::vector<uint32_t>& misses) override;
  // Queues rows (dirty or not: anything stored here must reach the lower
  // tier). Never spills.
  status store(std::span<const uint64_t> keys, const_rows_span rows, bool dirty,
               row_buffer& spilled) override;
  // Drops keys from the buffer and from batches not yet handed over.
  status erase(std::span<const uint64_t> keys) override;
  // Moves the open batch's rows into `out` and drops them from the buffer:
  // the caller writes them down synchronously (graceful stop). Rows of
  // batches in flight stay until released.
  status take_dirty(row_buffer& out) override;
  status dump(const row_visitor& visit) override;
  size_t size() const override { return rows_.size(); }

  // Closes the open batch: returns false if it is empty; else fills `out`
  // with its rows and `seq` with its sequence number (strictly increasing).
  bool take_batch(row_buffer& out, uint64_t& seq);
  // The same, handing each row to append(key, record) instead: the caller
  // writes it once, straight into the buffer the flush sends.
  template <class Append>
  bool take_batch_into(Append&& append, uint64_t& seq);
  // The lower tier confirmed batch `seq`; returns how many rows it held
  // (0 for an unknown or already released seq).
  size_t release(uint64_t seq);
  // Batches handed over and not yet released.
  size_t in_flight_batches() const { return in_flight_.size(); }
  size_t queued_rows() const { return open_.size(); }
  size_t memory_bytes() const;

 private:
  struct flushed_row {
    uint64_t key;
    uint64_t version;
  };
  row_layout layout_;
  flat_map<size_t> rows_;  // key -> slot in records_
  std::vector<std::byte> records_;
  std::vector<size_t> free_slots_;
  std::vector<uint64_t> open_;   // keys queued since the last take_batch, once each
  std::vector<uint8_t> queued_;  // per slot: the key is in open_ (O(1) release checks)
  std::deque<std::pair<uint64_t, std::vector<flushed_row>>> in_flight_;
  uint64_t next_seq_ = 1;
  void remove(uint64_t key);
};

template <class Append>
bool write_behind_buffer::take_batch_into(Append&& append, uint64_t& seq) {
  std::vector<flushed_row> batch;
  batch.reserve(open_.size());
  const size_t bytes = layout_.record_bytes();
  for (uint64_t key : open_) {
    const size_t* slot = rows_.find(key);
    if (slot == nullptr || !queued_[*slot]) continue;  // erased meanwhile
    queued_[*slot] = 0;
    const std::byte* rec = records_.data() + *slot * bytes;
    append(key, rec);
    batch.push_back({key, meta_of(rec).version});
  }
  open_.clear();
  if (batch.empty()) return false;
  seq = next_seq_++;
  in_flight_.emplace_back(seq, std::move(batch));
  return true;
}

}  // namespace strata
