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
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
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

  // Draining a node (docs/multi-node.md "Draining a node"): shard `index`
  // gets a successor on `node` (exported there as shard_base + index; its
  // directory distinct from the old one's where nodes share an ssd_path),
  // and its home becomes `node`. end_rehome then retires the old shard on
  // its node (keep: the drain committed) or the successor (abandoned: the
  // home is the old node again).
  expected<actors::shard_actor> spawn_successor(uint32_t index, const std::string& node);
  void end_rehome(uint32_t index, bool keep);
  // Waits (at most `timeout`) until every retire sent to `node` has been
  // answered: a drained node leaves only once its shards are gone.
  void wait_retired(const std::string& node, std::chrono::seconds timeout);

  // The node that hosts shard `index` now ("" if none).
  std::string node_of(uint32_t index) const;
  std::vector<std::string> homes() const;
  // Whether shard `index` lives on `node` only as a drain's successor that
  // is not committed yet (its loss abandons the drain, not the run).
  bool successor_only(uint32_t index, const std::string& node) const;

  // Tells the shards spawned here to exit (the node stops: the actor
  // system waits for every actor).
  void stop();

 private:
  std::filesystem::path directory_of(const std::string& node, uint32_t index) const;
  expected<actors::shard_actor> spawn_here(uint32_t index);
  void retire_here(uint32_t index, std::function<void(status)> done);
  void retire_on(uint32_t index, const std::string& node);
  expected<actors::shard_actor> spawn_on(uint32_t index, const std::string& node);
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
  std::map<uint32_t, std::filesystem::path> dirs_here_;  // spawned here, by index
  struct rehome {
    std::string old_node, new_node;
  };
  std::map<uint32_t, rehome> rehoming_;  // successors not committed or abandoned yet
  std::map<std::string, int> retires_sent_;  // per node, not answered yet
  std::condition_variable retired_;
};

}  // namespace strata::deploy
