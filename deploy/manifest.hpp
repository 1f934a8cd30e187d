// The cluster manifest: one YAML file that describes a local cluster (its
// table, model, shards, cache tiers, workers and their data), parsed into
// the typed actors::cluster_config the actors take (docs/architecture.md,
// Layout: actors never parse YAML). docs/manifest.md lists every field with
// its default.
//
// Errors name the file, the 1-based line and the field path, e.g.
//   local.yaml:12: shards.dram_bytes: expected a size like 64MiB, got "lots"
// Unknown keys are errors (typos do not pass silently), and so are
// duplicated keys. Every field error of a file is reported at once, one per
// line of the message; the rules between fields (docs/manifest.md, Rules
// between fields: async staleness >= prefetch depth + max in-flight, ...)
// are checked once the fields parse.
//
// Relative paths in a manifest are relative to the working directory of
// the process, not to the manifest's folder.
//
// Plain values and pure functions, except load_manifest (reads the file)
// and resolve_data_split (counts the data file's lines when the split is a
// fraction). Thread-compatible.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/config.hpp"
#include "common/auth.hpp"
#include "common/error.hpp"
#include "model/datagen.hpp"
#include "model/reader.hpp"

namespace strata::deploy {

// How the data file is cut into a training window (first) and a held-out
// window (after it). Either a fraction of the file's examples or explicit
// counts.
struct data_split {
  double heldout_fraction = 0.1;  // last fraction held out (0: no held-out window)
  uint64_t train_examples = 0;    // explicit: the first N examples train (0: use the fraction)
  uint64_t heldout_examples = 0;  // cap on held-out examples evaluated (0: the rest)
};

// `metrics`: the node's Prometheus endpoint (monitoring/exporter.hpp).
struct metrics_settings {
  uint16_t port = 0;                       // 0: no metrics endpoint
  std::string bind_address = "127.0.0.1";  // loopback unless asked otherwise
  std::string node;                        // label `node`; empty: the cluster's name
  uint32_t linger_seconds = 0;             // keep serving the final values this long after training
};

// `caches.backend`: where the cache tiers keep their rows.
enum class cache_backend_choice { cpu, gpu };

// `nodes[i]`: one host of the cluster (docs/manifest.md). The first node
// runs the coordinator, the dense model and the admin API; shards, cache
// tiers and workers are placed over the nodes (deploy/multi_node.hpp).
struct node_settings {
  std::string name;
  std::string host;
  uint16_t transport_port = 0;     // UCX listener; 0: chosen by the transport
  uint32_t devices = 0;            // GPUs used (0: the CPU cache backend)
  uint64_t dram_bytes = 0;         // DRAM budget of the node's shards (0: unchecked)
  std::filesystem::path ssd_path;  // LMDB environments on this node (empty: shards.ssd_path)
  uint16_t metrics_port = 0;
  uint16_t admin_port = 0;
  uint16_t updates_port = 0;  // this node's update publisher (`updates`; 0: updates.port)
  // May join the running cluster later (`strata node --node NAME` on its
  // host); hosts nothing at start, and the others neither dial nor wait for it.
  bool standby = false;
};

// `transport`: the UCX transport between nodes (transport/node_bridge.hpp).
struct transport_settings {
  uint32_t heartbeat_interval_ms = 1000;
  // Silence for this long marks a peer down. Generous: a loaded machine
  // must never declare a live node dead.
  uint32_t heartbeat_timeout_ms = 10000;
  // How long a node waits for its peers to start and join.
  uint32_t join_timeout_seconds = 120;
  uint64_t max_outstanding_bytes = uint64_t{64} << 20;  // per peer
};

// `gateway`: the coordinator node's endpoint for clients' own models
// (serving/training_gateway.hpp): lookups of current rows and pushes of
// gradients over the binary protocol. Absent (port 0): none.
struct gateway_settings {
  uint16_t port = 0;
  uint16_t transport_port = 0;  // the same over UCX (clients in the cluster); 0: none
  std::string bind_address = "127.0.0.1";  // loopback unless asked otherwise
  uint32_t max_request_keys = 1u << 20;
};

// `admin`: the coordinator node's admin API (deploy/admin_server.hpp).
struct admin_settings {
  uint16_t port = 0;                       // 0: no admin API
  std::string bind_address = "127.0.0.1";  // loopback unless asked otherwise
  std::string token;                       // required by every request (Bearer)
  std::filesystem::path token_file;        // or read from this file at start (trimmed)
  bool create_if_missing = false;          // token_file absent: create it (random, mode 0600)
};

// `cluster_secret`: the secret every node of a multi-node cluster proves it
// holds before its frames are accepted (docs/multi-node.md, "Membership").
// Required with a nodes list; the file is created at start when
// create_if_missing (deploy/preflight.hpp), like the admin token.
struct cluster_secret_settings {
  std::filesystem::path file;      // empty: none (single-process clusters)
  bool create_if_missing = false;  // absent file: create it (random, mode 0600)
};

// What the launcher does when a node process dies (checkpoint.on_failure).
enum class failure_policy : uint8_t {
  stop,     // exit non-zero naming the node (default)
  restart,  // restart the cluster from the latest complete checkpoint
};

// `serving`: what `strata serve` runs (docs/serving.md). Absent: no serving.
struct host_port {
  std::string host;
  uint16_t port = 0;
};
struct serving_settings {
  bool present = false;
  // A checkpoint directory (ckpt-...), or a checkpoint root whose latest
  // complete checkpoint is served. Empty: checkpoint.dir's latest.
  std::filesystem::path checkpoint;
  std::filesystem::path lmdb_path;    // the serving copy; default ssd_path / "serving"
  std::string cache_backend = "cpu";  // cpu (gpu: not wired for serving yet)
  uint32_t cache_sets = 1024;         // cache geometry (x 32 slots per slab)
  uint32_t cache_slabs_per_set = 1;
  size_t dram_bytes = size_t{64} << 20;
  std::string bind_address = "127.0.0.1";  // loopback unless asked otherwise
  uint16_t binary_port = 0;                // 0: none
  uint16_t http_port = 0;                  // 0: none
  uint16_t transport_port = 0;             // lookups over UCX for clients in the cluster; 0: none
  float default_value = 0.0f;              // every element of an unknown key's row
  double async_insert_hit_rate = 0.9;      // >=: misses go into the cache asynchronously
  uint32_t hit_rate_window = 4096;
  uint32_t warmup_keys = 0;              // most frequent keys put in the cache at start
  uint32_t lmdb_read_handles = 16;       // LMDB reads of misses side by side (1 .. 100)
  uint32_t max_request_keys = 1u << 20;  // per lookup (binary and HTTP)
  size_t max_http_body_bytes = size_t{16} << 20;
  std::vector<host_port> replicas;     // for clients: the serving nodes' binary endpoints
  std::vector<host_port> subscribe;    // update publishers to follow (one per training node)
};

// `updates`: a training node streams the rows its shards update to the
// serving nodes that subscribe (serving/update_stream.hpp).
struct updates_settings {
  bool present = false;
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;           // 0: a free port (printed at start)
  uint32_t interval_ms = 200;  // send at least this often
  uint32_t max_rows = 4096;    // or as soon as this many rows wait
  // The publisher's window (0: about 256 MiB of rows for the table's dim);
  // a subscriber older than it is resent every row.
  uint64_t max_retained_rows = 0;
};

struct manifest {
  std::filesystem::path file;  // the manifest itself (for messages)
  // gpu: the composition root gives each cache tier a CUDA backend
  // (deploy/cache_backend_choice.hpp) and refuses to start without a device.
  cache_backend_choice cache_backend = cache_backend_choice::cpu;
  actors::cluster_config cluster;
  // The whole data file as one stream (format, path, csv columns, bad-line
  // limit); the workers' and the held-out readers are windows of it.
  model::reader_config data;
  data_split split;
  // `data.generate`: launch generates the data into data.path if absent.
  std::optional<model::datagen_config> generate;
  std::filesystem::path ssd_path;  // shards' LMDB environments: ssd_path / "shard-<i>"
  metrics_settings metrics;        // node filled in (the cluster's name by default)
  admin_settings admin;
  cluster_secret_settings cluster_secret;
  std::vector<node_settings> nodes;    // empty: one implicit node
  std::vector<std::string> placement;  // shard -> node name; empty: spread
  // With a nodes list: the node of every shard, cache tier and worker
  // (placement lists, else dealt round-robin). Empty without nodes.
  std::vector<std::string> shard_nodes, cache_nodes, worker_nodes;
  transport_settings transport;
  gateway_settings gateway;
  failure_policy on_failure = failure_policy::stop;
  uint32_t max_restarts = 3;  // restarts before the launcher gives up (restart policy)
  // True once the training/held-out windows are in `cluster` (after
  // resolve_data_split, or at parse time for explicit counts).
  bool split_resolved = false;
  serving_settings serving;
  updates_settings updates;
};

// Reads and parses `file`; errors name it.
expected<manifest> load_manifest(const std::filesystem::path& file);
// Parses manifest text; `file_label` is the name errors show.
expected<manifest> parse_manifest(std::string_view text, const std::string& file_label);

// "4096", "64KiB", "64MiB", "1GiB", "2TiB" (powers of 1024), "500kB", "1MB",
// "1GB", "1TB" (powers of 1000), "100B"; an optional space before the unit.
expected<uint64_t> parse_size(std::string_view text);
// "64 MiB"-style rendering for messages and reports (exact: the largest unit
// dividing the value; else bytes).
std::string format_size(uint64_t bytes);

// Fills the workers' training windows and the held-out window from the
// split, given the number of examples (data lines, less a csv header) in
// the data file. Errors when the training window leaves a worker empty.
expected<void> apply_data_split(manifest& m, uint64_t data_examples);
// apply_data_split with the file's example count (its non-blank lines, less
// a csv header; counted only when the split is a fraction). The data file
// must be a regular file holding at least one example (with explicit counts
// too); a stop request (common/stop_request.hpp) ends the count.
expected<void> resolve_data_split(manifest& m);

// The admin token: admin.token, or the trimmed content of admin.token_file
// read with auth::read_secret_text (owner-only, at least 16 characters;
// errors name the file). A placeholder (deploy/placeholder_secret.hpp) is
// refused naming the field.
expected<std::string> admin_token(const manifest& m);

// The cluster secret: cluster_secret.file read with auth::read_secret_file
// (owner-only, at least 16 characters; errors name the manifest, the field
// and the file). invalid_argument when the manifest has no cluster_secret.
expected<auth::secret> cluster_secret(const manifest& m);

// The LMDB environment directory of shard `index`.
std::filesystem::path shard_directory(const std::filesystem::path& ssd_path, uint32_t index);

}  // namespace strata::deploy
