#include "bench/scale_bench.hpp"

#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include "actors/coordinator_actor.hpp"
#include "actors/shard_actor.hpp"
#include "actors/training_protocol.hpp"
#include "common/hash.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::bench {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr uint32_t partitions = 4096;
constexpr uint32_t dim = 16;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

void check(const status& s, const char* what) {
  if (!s) throw std::runtime_error(std::string(what) + ": " + s.err().to_string());
}

table_config bench_table() {
  table_config t;
  t.name = "bench";
  t.layout = row_layout{dim, optimizer_kind::adagrad, true};
  t.optimizer.kind = optimizer_kind::adagrad;
  t.optimizer.learning_rate = 0.05f;
  t.initializer.kind = initializer_kind::normal;
  return t;
}

actors::shard_config shard_at(const std::filesystem::path& dir, uint32_t index) {
  actors::shard_config c;
  c.index = index;
  c.table = bench_table();
  c.dram.capacity_bytes = size_t{32} << 20;  // far below the rows: most spill to LMDB
  c.lmdb.directory = dir / ("shard" + std::to_string(index));
  c.lmdb.table = c.table.name;
  c.lmdb.partitions = partitions;
  c.lmdb.map_bytes = size_t{64} << 30;
  c.flush_batch_rows = 8192;
  c.max_flushes_in_flight = 4;
  return c;
}

// Writes `keys` (rows from the table's initializer) into the LMDB tier at
// `config`, 10 000-row transactions in the keys' order; returns the rows/s
// of the store calls alone.
double fill(const actors::shard_config& config, const std::vector<uint64_t>& keys) {
  auto tier = lmdb_tier::open(config.table.layout, config.lmdb);
  if (!tier) throw std::runtime_error(tier.err().to_string());
  const size_t rb = config.table.layout.record_bytes();
  constexpr size_t batch = 10000;
  std::vector<std::byte> records(batch * rb);
  double timed = 0;
  for (size_t first = 0; first < keys.size(); first += batch) {
    const size_t n = std::min(batch, keys.size() - first);
    for (size_t i = 0; i < n; ++i)
      config.table.initial_row(keys[first + i], records.data() + i * rb, 1);
    row_buffer none(config.table.layout);
    const auto start = clock_type::now();
    check((*tier)->store({keys.data() + first, n}, const_rows_span{records.data(), rb}, true, none),
          "lmdb store");
    timed += seconds_since(start);
  }
  return timed > 0 ? static_cast<double>(keys.size()) / timed : 0;
}

template <class Reply, class Handle, class... Ts>
Reply ask(caf::actor_system& system, const Handle& h, Ts... xs) {
  caf::scoped_actor self{system};
  std::optional<Reply> out;
  std::string failure;
  self->request(h, caf::infinite, xs...)
      .receive([&](Reply& r) { out = std::move(r); },
               [&](caf::error& e) { failure = system.render(e); });
  if (!out) throw std::runtime_error(failure);
  return std::move(*out);
}

struct bench_system_config : caf::actor_system_config {
  bench_system_config() {
    set("logger.verbosity", caf::atom("quiet"));
    actors::add_message_types(*this);
    actors::add_training_message_types(*this);
  }
};

// Random keys over [1, key_space], as a worker stream.
class random_batches final : public actors::batch_source {
 public:
  random_batches(uint64_t seed, uint64_t key_space) : rng_(seed), keys_(1, key_space) {}
  expected<model::batch> next(size_t n) override {
    model::batch b;
    b.examples.resize(n);
    for (auto& ex : b.examples)
      for (uint32_t f = 0; f < 8; ++f) ex.features.push_back({f, keys_(rng_), 1.0f});
    return b;
  }
  uint64_t bad_lines() const override { return 0; }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<uint64_t> keys_;
};

void migrate_bench(const scale_bench_options& o, bench_report& report) {
  const auto dir = o.work_dir / "migrate";
  std::vector<uint64_t> keys(o.rows);
  for (uint64_t i = 0; i < o.rows; ++i) keys[i] = i + 1;
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(7));
  const auto source_config = shard_at(dir, 0), dest_config = shard_at(dir, 1);
  const double write_rate = fill(source_config, keys);  // the tier's write rate; fills the source

  bench_system_config cfg;
  caf::actor_system system(cfg);
  auto source = actors::spawn_shard(system, source_config);
  auto dest = actors::spawn_shard(system, dest_config);
  if (!source || !dest) throw std::runtime_error((source ? dest.err() : source.err()).to_string());
  actors::migration_order order;
  order.epoch = 2;
  for (uint32_t p = 0; p < partitions; ++p) {
    order.partitions.push_back(p);
    order.destinations.push_back(caf::actor_cast<caf::actor>(*dest));
  }
  actors::routing_table table;
  table.epoch = 2;
  table.owners.assign(partitions, 1);
  table.shards = {caf::actor_cast<caf::actor>(*source), caf::actor_cast<caf::actor>(*dest)};
  const auto start = clock_type::now();
  auto copied = ask<actors::migration_stats>(system, *source, actors::migrate_atom::value, order);
  auto delta =
      ask<actors::migration_stats>(system, *source, actors::fence_atom::value, uint64_t{2});
  ask<actors::ok_atom>(system, *source, actors::commit_atom::value, table);
  ask<actors::ok_atom>(system, *dest, actors::commit_atom::value, table);
  ask<actors::ok_atom>(system, *dest, actors::drain_atom::value);
  const double seconds = seconds_since(start);
  const auto stats = ask<actors::tier_stats>(system, *dest, actors::stats_atom::value);
  if (copied.rows + delta.rows != o.rows || stats.lmdb_rows != o.rows)
    throw std::runtime_error("scale bench: moved " + std::to_string(copied.rows + delta.rows) +
                             " rows, destination LMDB holds " + std::to_string(stats.lmdb_rows) +
                             ", expected " + std::to_string(o.rows));
  const double bytes = static_cast<double>(copied.bytes + delta.bytes);
  report.add({"scale_migrate_rows_per_s", static_cast<double>(o.rows) / seconds, "rows/s",
              "lmdb_write", write_rate});
  report.add({"scale_migrate_seconds", seconds, "s", "", 0});
  report.add({"scale_migrate_mib", bytes / (1 << 20), "MiB", "", 0});
  caf::anon_send_exit(*source, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*dest, caf::exit_reason::user_shutdown);
}

void training_bench(const scale_bench_options& o, bench_report& report) {
  const auto dir = o.work_dir / "train";
  const uint64_t key_space = std::max<uint64_t>(o.rows / 2, 10000);
  actors::cluster_config c;
  c.name = "scale-bench";
  c.table = bench_table();
  c.partitions = partitions;
  c.checkpoint.round_batches = 16;
  for (uint32_t s = 0; s < 2; ++s) c.shards.push_back(shard_at(dir, s));
  // Every key already has a row in its owner's LMDB: the scale has rows to move.
  std::vector<std::vector<uint64_t>> owned(2);
  for (uint64_t k = 1; k <= key_space; ++k) owned[partition_of(k, partitions) % 2].push_back(k);
  for (uint32_t s = 0; s < 2; ++s) fill(c.shards[s], owned[s]);
  for (uint32_t i = 0; i < 2; ++i) {
    actors::cache_config cc;
    cc.index = i;
    cc.table = c.table;
    cc.geometry.sets = 512;
    cc.staleness = 8;
    c.caches.push_back(cc);
  }
  for (uint32_t w = 0; w < 2; ++w) {
    actors::worker_config wc;
    wc.index = w;
    wc.batch_size = 256;
    c.workers.push_back(wc);
  }
  actors::worker_seams seams;
  seams.batches =
      [key_space](
          const actors::worker_config& wc) -> expected<std::shared_ptr<actors::batch_source>> {
    return std::shared_ptr<actors::batch_source>(
        std::make_shared<random_batches>(wc.index + 1, key_space));
  };
  seams.gradients = [](const actors::worker_config&) -> std::shared_ptr<actors::gradient_source> {
    return actors::make_count_gradients(dim);
  };
  seams.initial_dense = std::vector<float>{};
  std::atomic<uint64_t> batches{0};
  bench_system_config cfg;
  caf::actor_system system(cfg);
  auto cluster = actors::spawn_training_cluster(
      system, c, seams, [&batches](const actors::training_progress& p) { batches = p.batches; });
  if (!cluster) throw std::runtime_error(cluster.err().to_string());
  auto run = std::thread([&] {
    try {
      ask<actors::training_summary>(system, cluster->coordinator, actors::run_atom::value);
    } catch (const std::exception&) {
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));  // warm up
  auto t0 = clock_type::now();
  uint64_t b0 = batches;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double before = static_cast<double>(batches - b0) / seconds_since(t0);
  t0 = clock_type::now();
  b0 = batches;
  auto result =
      ask<actors::scale_result>(system, cluster->coordinator, actors::scale_atom::value, 4u);
  const double seconds = seconds_since(t0);
  const double during = static_cast<double>(batches - b0) / seconds;
  caf::anon_send(cluster->coordinator, actors::stop_atom::value);
  run.join();
  cluster->stop();
  report.add({"train_during_scale", during, "batches/s", "train_before_scale", before});
  report.add({"train_scale_moved_rows", static_cast<double>(result.copied_rows + result.delta_rows),
              "rows", "", 0});
  report.add({"train_scale_seconds", seconds, "s", "", 0});
}

}  // namespace

void run_scale_bench(const scale_bench_options& options, bench_report& report) {
  migrate_bench(options, report);
  training_bench(options, report);
}

}  // namespace strata::bench
