// What a manifest allocates at start on this host, checked against the
// memory the host has, so that `strata launch` / `strata node` refuse a
// manifest the host cannot hold with a named error instead of aborting in
// std::bad_alloc (docs/manifest.md, "Memory check").
//
// Counted: what is allocated up front or per copy of the model: the dense
// model (weights, the dense actor's Adam state, every worker's copy and
// gradient), each shard's DRAM tier (shards.dram_bytes: allocated whole at
// start), each CPU cache tier (sets x slots x row bytes). Not counted:
// sparse reservations (LMDB map_bytes: address space, not memory), GPU
// caches (rows in HBM), buffers bounded by batch sizes.
//
// Plain functions; available_memory() reads /proc and /sys/fs/cgroup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "deploy/manifest.hpp"

namespace strata::deploy {

struct memory_item {
  std::string what;  // e.g. "shards.dram_bytes 2 TiB x 2 shards"
  uint64_t bytes = 0;
};

// The start allocations of the components that `node` hosts (empty: every
// component, as `strata launch` starts every node on this host).
std::vector<memory_item> start_allocations(const manifest& m, const std::string& node);

struct host_memory {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "cgroup memory.max ..."
};

// Memory this process may still allocate: /proc/meminfo's MemAvailable,
// lowered to the cgroup's limit less its usage where one is set.
expected<host_memory> available_memory();

// capacity_exceeded naming every item, the total and what is available
// when start_allocations(m, node) exceed available_memory().
status check_host_memory(const manifest& m, const std::string& node);

// "1.5 GiB" (one decimal, binary units).
std::string approximate_size(uint64_t bytes);

}  // namespace strata::deploy
