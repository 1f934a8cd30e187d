#include "deploy/host_memory.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>

#include "model/ctr_model.hpp"

namespace strata::deploy {
namespace {

constexpr uint64_t max_bytes = std::numeric_limits<uint64_t>::max();

// Saturating: a manifest's sizes multiplied must not wrap around to a
// small total that passes.
uint64_t mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > max_bytes / a) return max_bytes;
  return a * b;
}
uint64_t add(uint64_t a, uint64_t b) { return b > max_bytes - a ? max_bytes : a + b; }

bool hosted_here(const std::vector<std::string>& nodes, size_t i, const std::string& node) {
  return node.empty() || nodes.empty() || i >= nodes.size() || nodes[i] == node;
}

// The dense model's floats (ctr_model's layout, without building it).
uint64_t dense_floats(const model::model_config& c) {
  uint64_t total = 0, in = uint64_t{c.slots} * c.embedding_dim;
  auto layer = [&](uint64_t out) {
    total = add(total, add(mul(in, out), out));
    in = out;
  };
  for (uint32_t width : c.hidden) layer(width);
  layer(1);
  return total;
}

std::string hidden_list(const std::vector<uint32_t>& hidden) {
  std::string out = "[";
  for (size_t i = 0; i < hidden.size(); ++i) out += (i ? ", " : "") + std::to_string(hidden[i]);
  return out + "]";
}

// A number from a cgroup file; nullopt for "max" or an absent file.
std::optional<uint64_t> cgroup_value(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoull(text);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

std::string approximate_size(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  char text[48];
  if (u == 0)
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(text, sizeof text, "%.1f %s", v, units[u]);
  return text;
}

std::vector<memory_item> start_allocations(const manifest& m, const std::string& node) {
  std::vector<memory_item> items;
  const auto& c = m.cluster;
  // The dense model: the dense actor (weights and two Adam moments) on the
  // first node, a copy and a gradient in every worker.
  uint32_t workers = 0;
  for (size_t i = 0; i < c.workers.size(); ++i)
    if (hosted_here(m.worker_nodes, i, node)) ++workers;
  const bool dense_here = node.empty() || m.nodes.empty() || m.nodes.front().name == node;
  const uint64_t copies = (dense_here ? 3 : 0) + uint64_t{2} * workers;
  const uint64_t dense_bytes = mul(dense_floats(c.model), sizeof(float));
  if (copies > 0)
    items.push_back({"model.hidden " + hidden_list(c.model.hidden) + ": dense weights of " +
                         approximate_size(dense_bytes) + " x " + std::to_string(copies) +
                         " copies (" + (dense_here ? "weights and Adam state, " : "") +
                         std::to_string(workers) + " workers' copy and gradient)",
                     mul(dense_bytes, copies)});
  // Each shard's DRAM tier allocates its whole budget at start.
  uint32_t shards = 0;
  uint64_t dram = 0;
  for (size_t i = 0; i < c.shards.size(); ++i) {
    if (!hosted_here(m.shard_nodes, i, node)) continue;
    ++shards;
    dram = add(dram, c.shards[i].dram.capacity_bytes);
  }
  if (shards > 0)
    items.push_back({"shards.dram_bytes " + approximate_size(c.shards.front().dram.capacity_bytes) +
                         " x " + std::to_string(shards) + " shards",
                     dram});
  // CPU cache tiers: every slot of every set holds a row.
  if (m.cache_backend == cache_backend_choice::cpu) {
    uint32_t caches = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < c.caches.size(); ++i) {
      if (!hosted_here(m.cache_nodes, i, node)) continue;
      ++caches;
      bytes = add(bytes, mul(c.caches[i].geometry.capacity_rows(), c.table.layout.record_bytes()));
    }
    if (caches > 0) {
      const auto& g = c.caches.front().geometry;
      items.push_back({"caches.sets " + std::to_string(g.sets) + " x " +
                           std::to_string(g.set_slots()) + " slots x " +
                           std::to_string(c.table.layout.record_bytes()) + " B rows x " +
                           std::to_string(caches) + " caches",
                       bytes});
    }
  }
  return items;
}

expected<host_memory> available_memory() {
  host_memory out;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    std::string unit;
    bool found = false;
    while (in >> key >> kib) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        out.bytes = mul(kib, 1024);
        out.source = "MemAvailable in /proc/meminfo";
        found = true;
        break;
      }
    }
    if (!found)
      return error(errc::unavailable,
                   "/proc/meminfo: no MemAvailable line (cannot tell the "
                   "memory this host has)");
  }
  // cgroup v2, then v1: a limit below what the host has left.
  struct limit_files {
    const char* limit;
    const char* usage;
  };
  for (const limit_files f :
       {limit_files{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        limit_files{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                    "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const auto limit = cgroup_value(f.limit);
    if (!limit) continue;
    const uint64_t usage = cgroup_value(f.usage).value_or(0);
    const uint64_t left = *limit > usage ? *limit - usage : 0;
    if (left < out.bytes) {
      out.bytes = left;
      out.source = std::string("the cgroup limit in ") + f.limit + " less its usage";
    }
    break;
  }
  return out;
}

status check_host_memory(const manifest& m, const std::string& node) {
  const auto items = start_allocations(m, node);
  uint64_t total = 0;
  for (const auto& i : items) total = add(total, i.bytes);
  auto available = available_memory();
  if (!available) return {};  // nothing to compare with: the allocation itself will tell
  if (total <= available->bytes) return {};
  std::ostringstream text;
  text << m.file.string() << ": this host cannot hold what "
       << (node.empty() ? "the manifest" : "node '" + node + "'")
       << " allocates at start: " << approximate_size(total) << " needed, "
       << approximate_size(available->bytes) << " available (" << available->source << "):";
  for (const auto& i : items) text << "\n  " << i.what << ": " << approximate_size(i.bytes);
  text << "\n(lower these sizes, or start on a larger host; LMDB's map_bytes is not counted)";
  return error(errc::capacity_exceeded, text.str());
}

}  // namespace strata::deploy
