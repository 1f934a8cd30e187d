// Shards spawned at run time on any node of a multi-node cluster (issue 19,
// docs/multi-node.md "Scaling across nodes"). Every node exports a spawner
// (targets::spawner): a spawn_shard frame carries a shard index only, never
// a path; the node spawns the shard as a scale does locally (shard 0's
// settings, its own index, ssd_flush actor) with its LMDB environment under
// its own ssd_path (<ssd_path>/shard-<index>), exports it as shard_base +
// index and answers. retire_shard: the shard exits and its files go, on
// that node. The coordinator's node uses spawn()/retire() as the scale's
// shard factory: it picks the node (the placement's name; empty: "spread",
// the connected node with the fewest shards, the manifest's order breaking
// ties), spawns there (or here) and returns the shard's proxy (or the shard).
//
// Refusals name the node: one not in the manifest; one that is not
// connected (its transport health: down with the reason, or never joined).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <caf/fwd.hpp>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/coordinator_actor.hpp"
#include "common/error.hpp"
#include "deploy/manifest.hpp"
#include "transport/remote_actors.hpp"

namespace strata::deploy {

class node_spawner {
 public:
  node_spawner(const manifest& m, std::string me, transport::node_transport& transport);
  ~node_spawner();

  // This node's spawner, once its cluster exists (join): spawn_at is
  // training_cluster::spawn_shard_at.
  using spawn_at_fn = std::function<expected<actors::shard_actor>(
      uint32_t index, const std::filesystem::path& dir)>;
  void export_spawner(spawn_at_fn spawn_at);

  // The coordinator's node: the scale's factory.
  expected<actors::shard_actor> spawn(uint32_t index, const std::string& node);
  void retire(uint32_t index);

  // The node that hosts shard `index` now ("" if none).
  std::string node_of(uint32_t index) const;
  std::vector<std::string> homes() const;

  // Tells the shards spawned here to exit (the node stops: the actor
  // system waits for every actor).
  void stop();

 private:
  std::filesystem::path directory_of(const std::string& node, uint32_t index) const;
  expected<actors::shard_actor> spawn_here(uint32_t index);
  void retire_here(uint32_t index, std::function<void(status)> done);
  status check_node(const std::string& node) const;
  std::string spread() const;

  const manifest& m_;
  std::string me_;
  transport::node_transport& transport_;
  mutable std::mutex mu_;
  spawn_at_fn spawn_at_;
  std::vector<std::string> homes_;          // shard index -> node
  std::vector<caf::actor> spawned_here_;    // to stop with the node
  std::set<uint32_t> retiring_;             // retires not finished yet
};

}  // namespace strata::deploy
