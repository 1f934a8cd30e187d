// raw_manifest -> manifest: the typed cluster config the actors take, with
// the placement of every shard, cache tier and worker resolved
// (deploy/manifest_parse.hpp).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "deploy/manifest_parse.hpp"

namespace strata::deploy::detail {

manifest build(const raw_manifest& r, const std::string& file) {
  manifest m;
  m.file = file;
  m.data = r.data;
  m.split = r.split;
  m.ssd_path = r.ssd_path;
  m.cache_backend = r.cache_backend;
  m.metrics = r.metrics;
  m.serving = r.serving;
  m.updates = r.updates;
  if (m.serving.present && m.serving.lmdb_path.empty())
    m.serving.lmdb_path = r.ssd_path / "serving";
  m.admin = r.admin;
  m.nodes = r.nodes;
  m.placement = r.placement;
  m.transport = r.transport;
  m.gateway = r.gateway;
  // Who hosts what: listed names, else dealt round-robin over the nodes
  // that start (a standby node hosts nothing until a scale places shards on it).
  if (!r.nodes.empty()) {
    std::vector<std::string> starting;
    for (const auto& n : r.nodes)
      if (!n.standby) starting.push_back(n.name);
    if (starting.empty()) starting.push_back(r.nodes.front().name);  // refused by the rules
    auto resolve = [&starting](const std::vector<std::string>& listed, uint32_t count) {
      if (!listed.empty()) return listed;
      std::vector<std::string> out;
      for (uint32_t i = 0; i < count; ++i) out.push_back(starting[i % starting.size()]);
      return out;
    };
    m.shard_nodes = resolve(r.placement, r.shard_count);
    m.cache_nodes = resolve(r.cache_placement, r.cache_count);
    m.worker_nodes = resolve(r.worker_placement, r.worker_count);
  }
  m.admin.token_file = r.admin_token_file;
  m.cluster_secret.file = r.cluster_secret_file;
  m.cluster_secret.create_if_missing = r.cluster_secret_create;
  if (m.metrics.node.empty()) m.metrics.node = r.name;
  m.on_failure = r.on_failure;
  m.max_restarts = r.max_restarts;
  if (r.generate) {
    m.generate = *r.generate;
    m.generate->output = r.data.path;
  }
  auto& c = m.cluster;
  c.name = r.name;
  c.mode = r.mode;
  c.partitions = r.partitions;
  c.pass_batches = r.pass_batches;
  c.threads = r.threads;
  c.dense = r.dense;
  c.model = r.model;
  c.checkpoint = r.checkpoint;
  c.gradients = r.objective;
  if (r.model_slots)
    c.model.slots = *r.model_slots;
  else if (reader_slots(r) != 0)
    c.model.slots = reader_slots(r);
  c.table = r.table;
  c.table.layout = row_layout{c.model.row_dim(), r.table.optimizer.kind, true};

  for (uint32_t i = 0; i < r.shard_count; ++i) {
    actors::shard_config s;
    s.index = i;
    s.table = c.table;
    s.dram = r.dram;
    s.chain = r.chain;
    s.lmdb.directory = shard_directory(r.ssd_path, i);
    // On a node with its own ssd_path, the shard's environment lives there.
    if (!m.shard_nodes.empty()) {
      for (const auto& n : r.nodes)
        if (n.name == m.shard_nodes[i] && !n.ssd_path.empty())
          s.lmdb.directory = shard_directory(n.ssd_path, i);
    }
    s.lmdb.table = c.table.name;
    s.lmdb.partitions = r.partitions;
    s.lmdb.map_bytes = r.map_bytes;
    s.lmdb.sync = r.lmdb_sync;
    s.flush_batch_rows = r.flush_batch_rows;
    s.max_flushes_in_flight = r.max_flushes_in_flight;
    s.max_queued_flush_batches = r.max_queued_flush_batches;
    s.migration_rows_per_s = r.migration_rows_per_s;
    c.shards.push_back(std::move(s));
  }
  for (uint32_t i = 0; i < r.cache_count; ++i) {
    actors::cache_config cc;
    cc.index = i;
    cc.table = c.table;
    cc.geometry = r.geometry;
    cc.staleness = r.staleness;
    c.caches.push_back(std::move(cc));
  }
  for (uint32_t w = 0; w < r.worker_count; ++w) {
    actors::worker_config wc = r.worker;
    wc.index = w;
    wc.data = r.data;
    wc.data.shard_index = w;
    wc.data.shard_count = r.worker_count;
    c.workers.push_back(std::move(wc));
  }
  return m;
}

}  // namespace strata::deploy::detail
