// The coordinator's side of draining a node (docs/multi-node.md "Draining a
// node"): each shard index on the node gets a successor on another node,
// the partitions it owns move there with the scale's copy, fence and commit,
// and the committed map keeps its owners while its shards[index] is the
// successor. The old shards own nothing from then on (they forward) and are
// retired on their node. A copy failure (before the fence) abandons the
// drain: the successors go, the old map is committed again, training goes
// on. After the fence a failure is the crash policy's, as for a scale.
#include <algorithm>
#include <caf/all.hpp>
#include <memory>
#include <string>

#include "actors/coordinator_internal.hpp"

namespace strata::actors::coordinator_impl {
caf::typed_response_promise<scale_result> start_drain(
    coordinator_pointer self, const std::vector<uint32_t>& indices,
    const std::vector<std::string>& destinations) {
  auto& s = self->state;
  auto promise = self->make_response_promise<scale_result>();
  const uint32_t current = static_cast<uint32_t>(s.peers.shards.size());
  const std::string what = "cannot move shards " + index_list(indices) + " of cluster '" +
                           s.plan.cluster + "' to other nodes: ";
  auto refuse = [&](std::string why) {
    promise.deliver(caf::make_error(caf::sec::invalid_argument, what + why));
    return promise;
  };
  if (s.failed) return refuse("training has failed");
  if (s.scaling)
    return refuse("a scale to " + std::to_string(s.scaling->next.shards()) +
                  " shards is in progress");
  if (*s.removals_pending != 0)
    return refuse("the shards of an abandoned scale are still being removed; try again");
  if (!s.peers.factory.spawn_successor || !s.peers.factory.end_rehome)
    return refuse("this cluster runs in one process (draining moves shards between nodes)");
  if (indices.size() != destinations.size())
    return refuse(std::to_string(destinations.size()) + " destinations for " +
                  std::to_string(indices.size()) + " shards");
  for (size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] >= current)
      return refuse("no shard " + std::to_string(indices[k]) + " (the cluster has " +
                    std::to_string(current) + ")");
    if (std::count(indices.begin(), indices.end(), indices[k]) != 1)
      return refuse("shard " + std::to_string(indices[k]) + " named twice");
  }
  if (indices.empty()) {
    promise.deliver(scale_result{s.plan.map.epoch(), current, 0, 0, 0, 0});
    return promise;
  }
  coordinator_state::scaling_job job;
  job.next = partition_map(s.plan.map.epoch() + 1, s.plan.map.owners(), current);
  job.shards = s.peers.shards;
  job.old.resize(current);
  job.what = what;
  job.promise = promise;
  s.scaling = std::move(job);
  spawn_successor(self, indices, destinations, 0);
  return promise;
}

// The successor of the k-th shard to move (off the coordinator's thread,
// run_spawn), then the next; after the last, the copies start. A
// failure abandons the drain before anything moved: the successors spawned
// so far go, the map stays, training goes on.
void spawn_successor(coordinator_pointer self, std::vector<uint32_t> indices,
                     std::vector<std::string> destinations, size_t k) {
  auto& s = self->state;
  if (k == indices.size()) {
    auto& job = *s.scaling;
    const uint32_t current = static_cast<uint32_t>(job.old.size());
    std::vector<migration_order> orders(current);
    for (uint32_t p = 0; p < s.plan.map.partitions(); ++p) {
      const uint32_t from = s.plan.map.owner(p);
      if (!job.old[from]) continue;  // not moving
      orders[from].epoch = job.next.epoch();
      orders[from].partitions.push_back(p);
      orders[from].destinations.push_back(caf::actor_cast<caf::actor>(job.shards[from]));
      ++job.result.moved_partitions;
    }
    for (uint32_t i : job.rehomed)
      if (!orders[i].partitions.empty()) job.sources.push_back(i);
    start_copies(self, job.old, orders);
    return;
  }
  const uint32_t i = indices[k];
  const std::string node = destinations[k];
  auto spawn = [spawn = s.peers.factory.spawn_successor, i, node] { return spawn(i, node); };
  run_spawn(self, true, spawn,
            [self, indices, destinations, k](shard_actor successor, std::string why) {
              auto& s = self->state;
              const uint32_t i = indices[k];
              if (s.failed || !s.scaling) {
                // The run failed meanwhile (its drain with it): the successor goes.
                if (successor) s.peers.factory.end_rehome(i, false);
                return;
              }
              auto& job = *s.scaling;
              if (!successor) {
                for (uint32_t j : job.rehomed) {
                  self->unlink_from(job.shards[j]);
                  s.peers.factory.end_rehome(j, false);
                }
                end_scaling_job(self, caf::sec::invalid_argument,
                                job.what + "spawning the successor of shard " + std::to_string(i) +
                                    " on node '" + destinations[k] +
                                    "' failed (the drain is abandoned; training goes on): " + why);
                return;
              }
              self->link_to(successor);  // it stops with the cluster
              job.old[i] = job.shards[i];
              job.shards[i] = successor;
              job.rehomed.push_back(i);
              spawn_successor(self, indices, destinations, k + 1);
            });
}

// A copy failed before the fence: the successors are retired on their
// nodes, the old map (old shards) is committed at a new epoch so every
// source forgets its migration, the request gets the error and training
// goes on.
void abandon_drain(coordinator_pointer self) {
  auto& s = self->state;
  auto& job = *s.scaling;
  job.committing = true;  // no fence for this one
  for (uint32_t i : job.rehomed) {
    self->unlink_from(job.shards[i]);
    s.peers.factory.end_rehome(i, false);
  }
  recommit_and_fail(self, [](const partition_map& same, const coordinator_state::scaling_job& job) {
    return job.what +
           "copying partitions failed (the drain is abandoned; the shards stay where they were "
           "and keep training at map epoch " +
           std::to_string(same.epoch()) + "): " + job.copy_failure;
  });
}

}  // namespace strata::actors::coordinator_impl
