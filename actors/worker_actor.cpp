#include "actors/worker_actor.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <optional>
#include <string>
#include <utility>

#include "actors/vector_pool.hpp"
#include "common/flat_map.hpp"
#include "common/hash.hpp"
#include "model/reader.hpp"
#include "tiers/row.hpp"

namespace strata::actors {
namespace {

// --- the default seams ---------------------------------------------------------

class reader_source final : public batch_source {
 public:
  reader_source(model::reader_config config, uint32_t epochs, std::unique_ptr<model::reader> first)
      : config_(std::move(config)), epochs_left_(epochs), reader_(std::move(first)) {}

  expected<model::batch> next(size_t n) override {
    while (true) {
      auto batch = reader_->next_batch(n);
      if (!batch) return batch.err();
      if (!batch->examples.empty() || epochs_left_ <= 1) return batch;
      // The end of one epoch: start the next one on a fresh reader.
      bad_lines_done_ += reader_->bad_lines().size();
      --epochs_left_;
      auto reopened = model::reader::open(config_);
      if (!reopened) return reopened.err();
      reader_ = std::move(*reopened);
    }
  }
  uint64_t bad_lines() const override { return bad_lines_done_ + reader_->bad_lines().size(); }

 private:
  model::reader_config config_;
  uint32_t epochs_left_;
  std::unique_ptr<model::reader> reader_;
  uint64_t bad_lines_done_ = 0;
};

class model_gradients final : public gradient_source {
 public:
  explicit model_gradients(const model::model_config& config) : model_(config) {}
  model::batch_result compute(const model::batch& batch, std::span<const float> rows,
                              std::span<const float> dense) override {
    return model_.forward_backward(batch, rows, dense);
  }
  void compute_into(const model::batch& batch, std::span<const float> rows,
                    std::span<const float> dense, model::batch_result& out) override {
    model_.forward_backward(batch, rows, dense, out);
  }

 private:
  model::ctr_model model_;
};

// Each sighting of a key pushes -1 to every element: with SGD, learning
// rate 1 and zeros, every weight counts its key's sightings exactly (sums
// below 2^24). No loss, no dense gradient.
class count_gradients final : public gradient_source {
 public:
  explicit count_gradients(uint32_t dim) : dim_(dim) {}
  model::batch_result compute(const model::batch& batch, std::span<const float>,
                              std::span<const float>) override {
    model::batch_result out;
    out.row_grads.assign(batch.keys().size() * dim_, -1.0f);
    return out;
  }
  void compute_into(const model::batch& batch, std::span<const float>, std::span<const float>,
                    model::batch_result& out) override {
    out.row_grads.assign(batch.keys().size() * dim_, -1.0f);
    out.dense_grads.clear();
    out.predictions.clear();
    out.loss = 0;
  }

 private:
  uint32_t dim_;
};

// --- the worker ----------------------------------------------------------------

// A batch read ahead: its distinct keys split into routes, one per cache
// tier it talks to (route r goes to peers.caches[r]). A key repeated in the
// batch is looked up once and pushed once, its gradients summed here in
// batch order (docs/architecture.md, Semantics: Duplicate keys) — less to
// send, copy and reduce downstream, with the same sums the owner would
// compute.
struct pending_batch {
  model::batch batch;
  size_t key_count = 0;                           // key positions, duplicates included
  std::vector<std::vector<uint64_t>> route_keys;  // distinct keys per route
  // Per route, (position in batch.keys(), index in route_keys[r]) for every
  // position routed there, in ascending position order.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> route_members;
};

// The batches read ahead, oldest first, in slots that are reused: a slot
// keeps its vectors' capacity from one batch to the next, and the ring
// grows only while the pipeline fills (prefetch_depth + 1 slots).
class batch_ring {
 public:
  bool empty() const { return n_ == 0; }
  size_t size() const { return n_; }
  pending_batch& front() { return slots_[first_]; }
  pending_batch& back() { return slots_[(first_ + n_ - 1) % slots_.size()]; }
  // A slot at the back, holding whatever the batch it last carried left.
  pending_batch& push_back() {
    if (n_ == slots_.size()) {
      std::rotate(slots_.begin(), slots_.begin() + static_cast<std::ptrdiff_t>(first_),
                  slots_.end());
      first_ = 0;
      slots_.emplace_back();
    }
    ++n_;
    return back();
  }
  void pop_front() {
    first_ = (first_ + 1) % slots_.size();
    --n_;
  }

 private:
  std::vector<pending_batch> slots_;
  size_t first_ = 0;
  size_t n_ = 0;
};

struct worker_state {
  static inline const char* name = "strata.worker";

  worker_config config;
  row_layout layout;
  worker_peers peers;
  std::shared_ptr<batch_source> source;
  std::shared_ptr<gradient_source> gradients;
  coordinator_actor report_to;

  // The pipeline.
  batch_ring ahead;  // read and prefetched, not yet trained
  // Key vectors for outgoing messages (prefetches, pushes): the push
  // acknowledgements' version and spare key vectors refill it.
  vector_pool<uint64_t, 8> key_pool;
  // Gradient vectors for pushes; the acknowledgements bring them back.
  vector_pool<float, 8> grad_pool;
  // Per route, the last lookup reply's record buffer: the next push to that
  // cache tier takes it back (push_request::spare_records).
  std::vector<std::vector<uint8_t>> used_records;
  // Acknowledgements missing per batch in flight (its sequence number).
  flat_map<uint32_t> acks_missing;
  uint64_t pushed_batches = 0;
  flat_map<uint32_t> route_index;  // make_pending's scratch: key -> index in its route
  std::vector<uint8_t> seen;       // train_head's scratch: first copy of a key summed
  bool data_end = false;
  uint64_t batches_read = 0;
  bool lookup_outstanding = false;
  size_t lookup_replies_missing = 0;
  std::vector<float> rows;   // row weights of the head batch, per position
  model::batch_result grads;  // the head batch's gradients (vectors reused)
  std::vector<float> dense;  // the replica's dense weights
  bool dense_pull_pending = false;
  uint32_t dense_pushes_outstanding = 0;
  uint32_t in_flight = 0;  // batches with pushes not yet acknowledged
  uint64_t steps = 0;
  uint64_t position = 0;  // batches of the stream trained, skipped ones included
  bool skipped = false;   // the restored position has been skipped
  uint64_t epoch = 0;     // checkpoint epoch the current run's pushes carry

  // The current run.
  std::optional<caf::typed_response_promise<worker_result>> run;
  uint64_t grant = 0;  // batches this run may start (0: no bound)
  uint64_t started_in_run = 0;
  worker_result result;
  std::optional<caf::error> failure;  // sticky: the worker stops training
};

using worker_pointer = worker_actor::stateful_pointer<worker_state>;

void pump(worker_pointer self);

void fail(worker_pointer self, caf::error err) {
  auto& st = self->state;
  if (!st.failure) st.failure = std::move(err);
  if (st.run) {
    st.run->deliver(*st.failure);
    st.run.reset();
  }
}

// The pool's largest key vector (empty, its capacity kept), else a new
// one: pooled vectors come back from the cache in several sizes, and a
// slot's route keys grow to a whole batch's distinct keys.
std::vector<uint64_t> take_keys(worker_state& st) { return st.key_pool.take(SIZE_MAX); }

// Fills the ring's new back slot with `batch` and its routes.
void make_pending(worker_state& st, pending_batch& p, model::batch batch) {
  p.batch = std::move(batch);
  const bool async = st.peers.mode == training_mode::async;
  const auto routes = async ? 1u : static_cast<uint32_t>(st.peers.caches.size());
  p.route_keys.resize(routes);
  p.route_members.resize(routes);
  size_t positions = 0;
  for (const auto& ex : p.batch.examples) positions += ex.features.size();
  // Room for every position up front: growing by push_back would reallocate
  // a pooled vector that came back smaller than this batch needs.
  for (auto& keys : p.route_keys) {
    keys.clear();
    keys.reserve(async ? positions : positions / routes + positions / 4 + 16);
  }
  for (auto& members : p.route_members) members.clear();
  auto& index = st.route_index;
  index.clear();
  uint32_t i = 0;
  for (const auto& ex : p.batch.examples) {
    for (const auto& f : ex.features) {
      const uint32_t r = async ? 0 : pass_owner_of(f.key, routes);
      auto [at, first] = index.try_emplace(f.key, static_cast<uint32_t>(p.route_keys[r].size()));
      if (first) p.route_keys[r].push_back(f.key);
      p.route_members[r].emplace_back(i++, *at);
    }
  }
  p.key_count = i;
}

bool may_start_batch(const worker_state& st) {
  return st.run && (st.grant == 0 || st.started_in_run < st.grant);
}

// Reads batches until prefetch_depth batches wait behind the head.
void read_ahead(worker_pointer self) {
  auto& st = self->state;
  if (!st.skipped) {
    // Resumed from a checkpoint: the batches before the recorded position
    // were trained by the run that took it; read past them.
    st.skipped = true;
    for (uint64_t i = 0; i < st.config.skip_batches; ++i) {
      auto batch = st.source->next(st.config.batch_size);
      if (!batch) {
        fail(self, caf::make_error(
                       caf::sec::runtime_error,
                       "worker " + std::to_string(st.config.index) +
                           ": skipping to the checkpoint's position: " + batch.err().to_string()));
        return;
      }
      if (batch->examples.empty()) {
        st.data_end = true;
        break;
      }
      ++st.batches_read;
      ++st.position;
    }
  }
  const size_t target = size_t{st.config.prefetch_depth} + 1;
  while (st.ahead.size() < target && !st.data_end) {
    if (st.config.max_batches != 0 && st.batches_read >= st.config.max_batches) {
      st.data_end = true;
      break;
    }
    auto batch = st.source->next(st.config.batch_size);
    if (!batch) {
      fail(self,
           caf::make_error(caf::sec::runtime_error, "worker " + std::to_string(st.config.index) +
                                                        ": " + batch.err().to_string()));
      return;
    }
    if (batch->examples.empty()) {
      st.data_end = true;
      break;
    }
    ++st.batches_read;
    // The head is looked up at once when nothing blocks it; every other
    // batch is prefetched so its rows are warm by the time it is looked up.
    const bool looked_up_now = st.ahead.empty() && !st.lookup_outstanding &&
                               st.in_flight < st.config.max_in_flight && may_start_batch(st);
    make_pending(st, st.ahead.push_back(), std::move(*batch));
    if (looked_up_now) continue;
    const auto& p = st.ahead.back();
    for (size_t r = 0; r < p.route_keys.size(); ++r) {
      if (p.route_keys[r].empty()) continue;
      auto keys = take_keys(st);
      keys.assign(p.route_keys[r].begin(), p.route_keys[r].end());
      self->send(st.peers.caches[r], prefetch_atom::value, std::move(keys));
    }
  }
}

// Fetches fresh dense weights into the replica; training waits for them.
void pull_dense(worker_pointer self) {
  self->state.dense_pull_pending = true;
  self->request(self->state.peers.dense, caf::infinite, pull_dense_atom::value)
      .then(
          [self](dense_weights& w) {
            self->state.dense = std::move(w.weights);
            self->state.dense_pull_pending = false;
            pump(self);
          },
          [self](caf::error& err) { fail(self, std::move(err)); });
}

void train_head(worker_pointer self) {
  auto& st = self->state;
  auto& head = st.ahead.front();
  const uint32_t dim = st.layout.dim;
  st.gradients->compute_into(head.batch, st.rows, st.dense, st.grads);
  auto& out = st.grads;
  if (out.row_grads.size() != head.key_count * dim) {
    fail(self, caf::make_error(
                   caf::sec::runtime_error,
                   "worker " + std::to_string(st.config.index) + ": gradient source returned " +
                       std::to_string(out.row_grads.size()) + " row gradients for " +
                       std::to_string(head.key_count) + " keys of dim " + std::to_string(dim)));
    return;
  }
  // Sparse gradients to the keys' owners; the batch is in flight until
  // every owner has acknowledged its part.
  const uint64_t seq = st.pushed_batches++;
  uint32_t acks = 0;
  for (size_t r = 0; r < head.route_keys.size(); ++r) {
    if (head.route_keys[r].empty()) continue;
    push_request push;
    push.epoch = st.epoch;
    // The slot's key vector travels with the push; a pooled one replaces it.
    push.keys = std::exchange(head.route_keys[r], take_keys(st));
    push.grads = st.grad_pool.take(push.keys.size() * dim);
    push.grads.resize(push.keys.size() * dim);
    if (r < st.used_records.size()) push.spare_records = std::move(st.used_records[r]);
    auto& seen = st.seen;
    seen.assign(push.keys.size(), 0);
    for (const auto& [pos, u] : head.route_members[r]) {  // ascending positions
      const float* g = out.row_grads.data() + size_t{pos} * dim;
      float* acc = push.grads.data() + size_t{u} * dim;
      if (!seen[u]) {  // the first copy, then the others added in batch order
        std::copy(g, g + dim, acc);
        seen[u] = 1;
        continue;
      }
      for (uint32_t j = 0; j < dim; ++j) acc[j] += g[j];
    }
    ++acks;
    self->request(st.peers.caches[r], caf::infinite, push_atom::value, std::move(push))
        .then(
            [self, seq](push_ack& ack) {
              auto& s = self->state;
              s.key_pool.give(std::move(ack.versions));
              s.key_pool.give(std::move(ack.spare_keys));
              s.grad_pool.give(std::move(ack.grads));
              uint32_t* missing = s.acks_missing.find(seq);
              if (missing == nullptr || --*missing > 0) return;
              s.acks_missing.erase(seq);
              --s.in_flight;
              pump(self);
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  }
  if (acks > 0) {
    st.acks_missing.try_emplace(seq, acks);
    ++st.in_flight;
  }

  // The dense gradient, and fresh dense weights every N steps. The pull is
  // sent after the push, so (FIFO per peer) it sees this step applied.
  ++st.steps;
  if (!out.dense_grads.empty()) {
    ++st.dense_pushes_outstanding;
    self->request(st.peers.dense, caf::infinite, push_dense_atom::value, std::move(out.dense_grads))
        .then(
            [self](uint64_t) {
              --self->state.dense_pushes_outstanding;
              pump(self);
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  }
  if (st.config.pull_dense_every != 0 && st.steps % st.config.pull_dense_every == 0) {
    pull_dense(self);
  }

  progress_report report;
  report.worker = st.config.index;
  report.batches = 1;
  report.examples = head.batch.examples.size();
  report.loss_sum = out.loss * static_cast<double>(report.examples);
  st.result.batches += 1;
  st.result.examples += report.examples;
  st.result.loss_sum += report.loss_sum;
  if (st.report_to) self->send(st.report_to, progress_atom::value, report);

  st.ahead.pop_front();
  st.lookup_outstanding = false;
  ++st.position;
}

void lookup_head(worker_pointer self) {
  auto& st = self->state;
  auto& head = st.ahead.front();
  const uint32_t dim = st.layout.dim;
  const size_t record_bytes = st.layout.record_bytes();
  st.lookup_outstanding = true;
  ++st.started_in_run;
  st.rows.assign(head.key_count * dim, 0.0f);
  st.lookup_replies_missing = 0;
  for (size_t r = 0; r < head.route_keys.size(); ++r) {
    if (head.route_keys[r].empty()) continue;
    ++st.lookup_replies_missing;
    const size_t expected = head.route_keys[r].size();
    // The keys travel to the cache and come back with the rows (the reply
    // carries the requested keys), so they are not copied.
    self->request(st.peers.caches[r], caf::infinite, lookup_atom::value,
                  std::move(head.route_keys[r]))
        .then(
            [self, r, expected, dim, record_bytes](lookup_reply& reply) {
              auto& s = self->state;
              if (reply.rows.keys.size() != expected ||
                  reply.rows.records.size() != expected * record_bytes) {
                fail(self, caf::make_error(caf::sec::runtime_error,
                                           "worker " + std::to_string(s.config.index) +
                                               ": lookup reply of " +
                                               std::to_string(reply.rows.keys.size()) +
                                               " rows for " + std::to_string(expected) + " keys"));
                return;
              }
              auto& head = s.ahead.front();
              head.route_keys[r] = std::move(reply.rows.keys);
              const auto* records = reinterpret_cast<const std::byte*>(reply.rows.records.data());
              for (const auto& [pos, u] : head.route_members[r]) {
                const float* w = weights_of(records + size_t{u} * record_bytes);
                std::copy(w, w + dim, s.rows.data() + size_t{pos} * dim);
              }
              if (s.used_records.size() <= r) s.used_records.resize(r + 1);
              reply.rows.records.clear();
              s.used_records[r] = std::move(reply.rows.records);
              --s.lookup_replies_missing;
              pump(self);
            },
            [self](caf::error& err) { fail(self, std::move(err)); });
  }
}

void finish_run_if_done(worker_pointer self) {
  auto& st = self->state;
  if (!st.run || st.lookup_outstanding || st.in_flight != 0 || st.dense_pushes_outstanding != 0)
    return;
  const bool exhausted = st.ahead.empty() && st.data_end;
  const bool granted_done = st.grant != 0 && st.started_in_run >= st.grant;
  if (!exhausted && !granted_done) return;
  st.result.worker = st.config.index;
  st.result.bad_lines = st.source->bad_lines();
  st.result.finished = exhausted;
  st.result.position = st.position;
  st.run->deliver(st.result);
  st.run.reset();
}

void pump(worker_pointer self) {
  auto& st = self->state;
  while (!st.failure) {
    read_ahead(self);
    if (st.failure) return;
    if (st.lookup_outstanding) {
      if (st.lookup_replies_missing != 0 || st.dense_pull_pending) break;
      train_head(self);  // rows and dense weights are in
      continue;
    }
    if (!st.ahead.empty() && st.in_flight < st.config.max_in_flight && may_start_batch(st)) {
      lookup_head(self);
      continue;
    }
    break;
  }
  if (!st.failure) finish_run_if_done(self);
}

worker_actor::behavior_type worker_behavior(worker_pointer self, worker_config config,
                                            row_layout layout, worker_peers peers,
                                            std::shared_ptr<batch_source> batches,
                                            std::shared_ptr<gradient_source> gradients) {
  auto& st = self->state;
  st.config = std::move(config);
  if (st.config.max_in_flight == 0) st.config.max_in_flight = 1;
  if (st.config.batch_size == 0) st.config.batch_size = 1;
  st.layout = layout;
  st.peers = std::move(peers);
  st.source = std::move(batches);
  st.gradients = std::move(gradients);
  if (st.peers.caches.empty())
    st.failure = caf::make_error(caf::sec::invalid_argument,
                                 "worker " + std::to_string(st.config.index) + ": no cache tier");
  // The replica starts from the dense actor's weights.
  pull_dense(self);
  return {
      [self](stats_atom) {
        return actor_stats{"worker", self->state.config.index,
                           static_cast<uint64_t>(self->mailbox().size())};
      },
      [self](run_atom, uint64_t batches,
             uint64_t epoch) -> caf::typed_response_promise<worker_result> {
        auto& s = self->state;
        // Before make_response_promise, which takes over the sender.
        auto sender = caf::actor_cast<coordinator_actor>(self->current_sender());
        auto promise = self->make_response_promise<worker_result>();
        if (s.failure) {
          promise.deliver(*s.failure);
          return promise;
        }
        if (s.run) {
          promise.deliver(caf::make_error(
              caf::sec::invalid_argument,
              "worker " + std::to_string(s.config.index) + ": run while a run is active"));
          return promise;
        }
        s.report_to = std::move(sender);
        s.run = promise;
        s.grant = batches;
        s.epoch = epoch;
        s.started_in_run = 0;
        s.result = worker_result{};
        pump(self);
        return promise;
      },
      [self](rebind_atom, std::vector<cache_tier_actor>& caches) -> caf::result<ok_atom> {
        auto& s = self->state;
        const std::string who = "worker " + std::to_string(s.config.index) + ": rebind: ";
        if (s.run) return caf::make_error(caf::sec::invalid_argument, who + "refused during a run");
        // Pass mode routes keys by the number of cache tiers: it must not change.
        if (caches.size() != s.peers.caches.size() ||
            std::any_of(caches.begin(), caches.end(), [](const auto& c) { return !c; }))
          return caf::make_error(caf::sec::invalid_argument,
                                 who + std::to_string(caches.size()) +
                                     " cache tiers (or a null one) where it talks to " +
                                     std::to_string(s.peers.caches.size()));
        s.peers.caches = std::move(caches);
        return ok_atom::value;
      },
  };
}

}  // namespace

expected<std::unique_ptr<batch_source>> open_reader_source(const worker_config& config) {
  auto reader = model::reader::open(config.data);
  if (!reader) return reader.err();
  return std::unique_ptr<batch_source>(std::make_unique<reader_source>(
      config.data, std::max<uint32_t>(config.epochs, 1), std::move(*reader)));
}

std::unique_ptr<gradient_source> make_model_gradients(const model::model_config& config) {
  return std::make_unique<model_gradients>(config);
}

std::unique_ptr<gradient_source> make_count_gradients(uint32_t dim) {
  return std::make_unique<count_gradients>(dim);
}

worker_actor spawn_worker(caf::actor_system& system, const worker_config& config,
                          const row_layout& layout, worker_peers peers,
                          std::shared_ptr<batch_source> batches,
                          std::shared_ptr<gradient_source> gradients) {
  return system.spawn(worker_behavior, config, layout, std::move(peers), std::move(batches),
                      std::move(gradients));
}

}  // namespace strata::actors
