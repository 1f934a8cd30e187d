// spawn_training_cluster and training_cluster::stop (coordinator_actor.hpp).
#include <caf/all.hpp>
#include <cctype>
#include <filesystem>
#include <optional>
#include <string>

#include "actors/cache_tier_actor.hpp"
#include "actors/checkpoint.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/dense_actor.hpp"
#include "actors/shard_actor.hpp"

namespace strata::actors {

void training_cluster::stop() {
  // The coordinator and workers first (they hold requests to the others),
  // then the storage actors.
  auto exit = [](const auto& handle) {
    if (handle) caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
  };
  exit(coordinator);
  for (auto& w : workers) exit(w);
  exit(dense);
  for (auto& c : caches) exit(c);
  for (auto& s : shards) exit(s);
}

namespace {

// "root/shard0" -> "root/shard<index>", "state/shard-0" -> "state/shard-<index>":
// the trailing digits of the name replaced (appended if there are none).
std::filesystem::path numbered_sibling(const std::filesystem::path& dir, uint32_t index) {
  std::string name = dir.filename().string();
  while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back()))) name.pop_back();
  return dir.parent_path() / (name + std::to_string(index));
}

}  // namespace

expected<training_cluster> spawn_training_cluster(caf::actor_system& system,
                                                  const cluster_config& config,
                                                  const worker_seams& seams, progress_sink sink,
                                                  const cluster_placement& placement) {
  if (config.shards.empty() || config.caches.empty())
    return error(errc::invalid_argument,
                 "cluster '" + config.name + "': needs at least one shard and cache tier");
  if (config.workers.empty() && config.mode != training_mode::async)
    return error(errc::invalid_argument,
                 "cluster '" + config.name +
                     "': a cluster without workers (a store for clients' pushes) runs in async "
                     "mode");
  if (config.partitions == 0)
    return error(errc::invalid_argument, "cluster '" + config.name + "': partitions must be > 0");
  if (!seams.gradients && config.table.layout.dim != config.model.row_dim())
    return error(errc::invalid_argument, "cluster '" + config.name + "': table dim " +
                                             std::to_string(config.table.layout.dim) +
                                             " is not the model's row dim " +
                                             std::to_string(config.model.row_dim()));
  training_cluster cluster;
  auto stop_on_error = [&cluster](error err) -> expected<training_cluster> {
    cluster.stop();
    return err;
  };
  for (uint32_t i = 0; i < config.shards.size(); ++i) {
    if (placement.remote_shard) {
      if (auto proxy = placement.remote_shard(i)) {
        cluster.shards.push_back(*proxy);
        cluster.shard_here.push_back(false);
        continue;
      }
    }
    auto shard = config.shards[i];
    shard.chain.incarnation = config.incarnation;
    shard.checkpoint_root = config.checkpoint.directory;
    auto spawned = spawn_shard(system, shard);
    if (!spawned) return stop_on_error(spawned.err());
    cluster.shards.push_back(*spawned);
    cluster.shard_here.push_back(true);
  }
  cluster.map = partition_map(config.partitions, static_cast<uint32_t>(cluster.shards.size()));
  for (uint32_t i = 0; i < config.caches.size(); ++i) {
    if (placement.remote_cache) {
      if (auto proxy = placement.remote_cache(i)) {
        cluster.caches.push_back(*proxy);
        cluster.cache_here.push_back(false);
        continue;
      }
    }
    auto spawned =
        spawn_cache_tier(system, config.caches[i], config.mode, cluster.shards, cluster.map);
    if (!spawned) return stop_on_error(spawned.err());
    cluster.caches.push_back(*spawned);
    cluster.cache_here.push_back(true);
  }
  if (placement.remote_dense) {
    cluster.dense = *placement.remote_dense;
    cluster.dense_here = false;
  } else {
    auto dense = spawn_dense(
        system, config.dense,
        seams.initial_dense ? *seams.initial_dense : model::ctr_model(config.model).initial_dense(),
        config.restored_dense, config.restored_dense_from);
    if (!dense) return stop_on_error(dense.err());
    cluster.dense = *dense;
  }
  // Worker w, resuming its stream at `position` (a relocation's successor;
  // a restore sets skip_batches in the config), talking to `caches`.
  auto make_worker = [&system, config, seams, dense = cluster.dense](
                         uint32_t w, std::optional<uint64_t> position,
                         std::vector<cache_tier_actor> caches) -> expected<worker_actor> {
    worker_config wc = config.workers[w];
    if (position) wc.skip_batches = *position;
    worker_peers peers;
    peers.mode = config.mode;
    peers.dense = dense;
    peers.caches = std::move(caches);
    std::shared_ptr<batch_source> batches;
    if (seams.batches) {
      auto opened = seams.batches(wc);
      if (!opened) return opened.err();
      batches = std::move(*opened);
    } else {
      auto opened = open_reader_source(wc);
      if (!opened) return opened.err();
      batches = std::move(*opened);
    }
    std::shared_ptr<gradient_source> gradients;
    if (seams.gradients)
      gradients = seams.gradients(wc);
    else if (config.gradients == gradient_kind::count)
      gradients = make_count_gradients(config.table.layout.dim);
    else
      gradients = make_model_gradients(config.model);
    return spawn_worker(system, wc, config.table.layout, std::move(peers), std::move(batches),
                        std::move(gradients));
  };
  for (uint32_t w = 0; w < config.workers.size(); ++w) {
    if (placement.remote_worker) {
      if (auto proxy = placement.remote_worker(w)) {
        cluster.workers.push_back(*proxy);
        cluster.worker_here.push_back(false);
        continue;
      }
    }
    cluster.worker_here.push_back(true);
    std::vector<cache_tier_actor> caches;
    if (config.mode == training_mode::async)
      caches.push_back(cluster.caches[w % cluster.caches.size()]);
    else
      caches = cluster.caches;
    auto worker = make_worker(w, std::nullopt, std::move(caches));
    if (!worker) return stop_on_error(worker.err());
    cluster.workers.push_back(*worker);
  }
  // New shards (scale up) take shard 0's settings, their own index and a
  // fresh directory named like shard 0's with the index at its end.
  cluster.spawn_shard_at = [&system, config, spawned = cluster.spawned](
                               uint32_t index,
                               const std::filesystem::path& dir) -> expected<shard_actor> {
    shard_config sc = config.shards.front();
    sc.index = index;
    sc.chain.incarnation = config.incarnation;
    sc.checkpoint_root = config.checkpoint.directory;
    sc.restored_sketch.clear();
    sc.lmdb.directory = dir.empty() ? numbered_sibling(sc.lmdb.directory, index) : dir;
    std::error_code ec;
    std::filesystem::remove_all(sc.lmdb.directory,
                                ec);  // a stale environment would inject old rows
    if (ec)
      return error(errc::io_error,
                   "cannot clear " + sc.lmdb.directory.string() + ": " + ec.message());
    auto shard = spawn_shard(system, sc);
    if (shard && *spawned) (*spawned)(*shard);
    return shard;
  };
  if (!placement.coordinator) return cluster;
  checkpoint_plan plan;
  plan.settings = config.checkpoint;
  plan.cluster = config.name;
  plan.table = config.table;
  plan.map = cluster.map;
  plan.incarnation = config.incarnation;
  plan.first_epoch = config.first_epoch;
  for (const auto& wc : config.workers) plan.positions.push_back(wc.skip_batches);
  plan.restored_passes = config.restored_passes;
  plan.restored_batches = config.restored_batches;
  plan.restored_examples = config.restored_examples;
  if (plan.settings.enabled()) {
    // Never reuse the name of an earlier (possibly interrupted) checkpoint.
    plan.first_epoch =
        std::max(plan.first_epoch, highest_checkpoint_epoch(plan.settings.directory) + 1);
  }
  shard_factory factory;
  factory.spawn = [spawn = cluster.spawn_shard_at](uint32_t index, const std::string&) {
    return spawn(index, {});
  };
  factory.refuse_scaling = placement.refuse_scaling;
  factory.remove_files = [config](uint32_t index) {
    const auto dir = index < config.shards.size()
                         ? config.shards[index].lmdb.directory
                         : numbered_sibling(config.shards.front().lmdb.directory, index);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  // Multi-node: the node the placement picks spawns it (and retires it).
  if (placement.spawn_shard) {
    factory.spawn = placement.spawn_shard;
    factory.spawn_waits = true;
  }
  if (placement.retire_shard) factory.remove_files = placement.retire_shard;
  factory.spawn_successor = placement.spawn_successor;
  factory.end_rehome = placement.end_rehome;
  // Relocated workers and cache tiers (a drained node hosted them) get
  // their successors here, on the coordinator's node.
  relocation_factory relocations;
  relocations.spawn_cache = [&system, config](uint32_t index,
                                              const std::vector<shard_actor>& shards,
                                              const partition_map& map) {
    return spawn_cache_tier(system, config.caches[index], config.mode, shards, map);
  };
  relocations.spawn_worker = [make_worker](uint32_t index, uint64_t position,
                                           std::vector<cache_tier_actor> caches) {
    return make_worker(index, position, std::move(caches));
  };
  relocations.published = [publish = placement.publish_cache, told = cluster.relocated_cache](
                              uint32_t index, const cache_tier_actor& cache) {
    if (publish) publish(index, cache);
    if (*told) (*told)(index, cache);
  };
  cluster.coordinator = spawn_coordinator(
      system, config.mode, config.pass_batches,
      coordinator_peers{cluster.workers, cluster.caches, cluster.shards, cluster.dense, factory,
                        config.client_pushes, std::move(relocations)},
      std::move(sink), std::move(plan));
  return cluster;
}

}  // namespace strata::actors
