// `strata node --manifest M --node NAME [--resume DIR]`: one node of a
// manifest in this process (what `strata launch` starts per node,
// deploy/launch_command.cpp).
//
// A node's steps, each announced on stdout: validate the manifest;
// generate the data if the manifest has a `data.generate` block and the
// file is absent; cut the training and held-out windows; clear the shard
// state (the previous run's LMDB environments under shards.ssd_path are
// removed); with --resume, restore the checkpoint into them (never the live
// files a killed process left); train with a progress line on stderr
// (SIGINT/SIGTERM: a graceful stop at the next cut, with a final
// checkpoint); print the report. With a
// `metrics` port, /metrics is served from before training starts; after
// training the report's values are frozen there and served for
// metrics.linger_seconds (the report is printed first), then the node stops.
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <system_error>
#include <thread>

#include "actors/checkpoint.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/local_cluster.hpp"
#include "common/stop_request.hpp"
#include "deploy/admin_server.hpp"
#include "deploy/cache_backend_choice.hpp"
#include "deploy/commands.hpp"
#include "deploy/host_memory.hpp"
#include "deploy/launch_data.hpp"
#include "deploy/launch_report.hpp"
#include "deploy/manifest.hpp"
#include "deploy/multi_node.hpp"
#include "deploy/node_signals.hpp"
#include "deploy/preflight.hpp"
#include "deploy/status_line.hpp"
#include "deploy/version.hpp"
#include "monitoring/exporter.hpp"
#include "serving/binary_server.hpp"
#include "serving/training_gateway.hpp"
#include "serving/transport_endpoint.hpp"
#include "serving/update_stream.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;
// The node's steps (launch_data.hpp) and what it prints (launch_report.hpp).
using namespace detail;

int run_node(const std::string& path, const std::string& node, const std::string& resume) {
  auto fail = [](const error& e) {
    std::fflush(stdout);
    std::cerr << "strata node: " << e.message() << '\n';
    return 1;
  };
  // Lives as long as the process: its signal thread is never joined.
  static stop_on_signal& signals = *new stop_on_signal;
  auto loaded = deploy::load_manifest(path);
  if (!loaded) return fail(loaded.err());
  deploy::manifest& m = *loaded;
  // What this node allocates at start must fit this host: a named error
  // instead of std::bad_alloc halfway through the start.
  if (auto memory = deploy::check_host_memory(m, node); !memory) return fail(memory.err());
  // The cluster secret (created at the first start when the manifest says
  // so, as strata launch does), before anything proves it to a peer.
  if (auto secret = deploy::ensure_cluster_secret_file(m, std::cout); !secret)
    return fail(secret.err());
  // A manifest of several nodes: this process is one of them.
  std::unique_ptr<deploy::node_membership> member;
  if (m.nodes.size() > 1) {
    if (node.empty()) {
      std::string names;
      for (const auto& n : m.nodes) names += (names.empty() ? "" : ", ") + n.name;
      return fail(error(errc::invalid_argument,
                        path + ": describes " + std::to_string(m.nodes.size()) + " nodes (" +
                            names + "): give --node NAME, or start them all with strata launch"));
    }
    auto created = deploy::node_membership::create(m, node);
    if (!created) return fail(created.err());
    member = std::move(*created);
    signals.watch(member.get());
    const auto& me = *std::find_if(m.nodes.begin(), m.nodes.end(),
                                   [&](const auto& n) { return n.name == node; });
    // Each node its own metrics endpoint; the admin API on the first.
    m.metrics.node = node;
    if (me.metrics_port != 0)
      m.metrics.port = me.metrics_port;
    else if (!member->runs_coordinator())
      m.metrics.port = 0;
    if (!member->runs_coordinator())
      m.admin.port = 0;
    else if (me.admin_port != 0)
      m.admin.port = me.admin_port;
  } else if (!m.nodes.empty() && !node.empty()) {
    if (node != m.nodes.front().name)
      return fail(error(errc::not_found,
                        path + ": no node '" + node + "' (nodes: " + m.nodes.front().name + ")"));
  } else if (!node.empty() && node != m.metrics.node) {
    return fail(error(errc::not_found, path + ": no node '" + node +
                                           "' (this manifest describes one node, '" +
                                           m.metrics.node + "')"));
  }
  // A port in use fails the start here, named by its field, before
  // anything is written (a server's own error named neither).
  if (auto ports = deploy::check_ports_free(m, member ? member->name() : ""); !ports)
    return fail(ports.err());
  const bool coordinator_here = !member || member->runs_coordinator();
  const std::vector<bool> hosted = member ? member->hosted_shards() : std::vector<bool>{};
  if (status backend = apply_cache_backend(m); !backend) return fail(backend.err());
  std::printf("manifest %s: ok (node %s, pid %d)\n", path.c_str(), m.metrics.node.c_str(),
              static_cast<int>(::getpid()));
  if (member)
    std::printf("node %s of %zu: hosts %s\n", member->name().c_str(), m.nodes.size(),
                member->describe().c_str());

  // A cluster without workers is a store that clients train through (the
  // gateway): no data to read.
  const bool store_only = m.cluster.workers.empty();
  if (store_only) {
    std::printf("store: no workers; clients look up and push rows through the gateway\n");
  } else {
    auto prepared = prepare_data(m, path, node, coordinator_here);
    if (!prepared) return fail(prepared.err());
  }
  std::vector<fs::path> candidates;
  if (!resume.empty()) {
    // A checkpoint of another layout is refused before anything is cleared.
    auto found = resume_candidates(resume);
    if (!found) return fail(found.err());
    candidates = std::move(*found);
    auto meta = actors::read_checkpoint_meta(candidates.front());
    if (!meta) return fail(meta.err());
    auto fits =
        actors::check_compatible(*meta, candidates.front(), m.cluster.table, m.cluster.partitions);
    if (!fits) return fail(fits.err());
    // A finished run: nothing is cleared, trained or checkpointed (a new
    // checkpoint would push an older one out under `keep`). Only when its
    // checkpoint verifies: from a damaged one the restore below falls back
    // to the one before and trains the rest.
    if (auto done = nothing_to_train(m.cluster, meta->positions);
        !done.empty() &&
        actors::verify_checkpoint(candidates.front(), &m.cluster.table, m.cluster.partitions)) {
      std::printf("%s (%s)\n", done.c_str(), candidates.front().c_str());
      std::fflush(stdout);
      return 0;
    }
  }
  auto cleared = clear_shard_state(m, hosted);
  if (!cleared) return fail(cleared.err());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const fs::path* dir = &candidates[i];
    const auto start = std::chrono::steady_clock::now();
    actors::cluster_config restored = m.cluster;
    auto meta = actors::restore_checkpoint(*dir, restored, hosted, member ? member->name() : "");
    if (!meta) {
      const bool damaged =
          meta.err().code() == errc::corrupt_data || meta.err().code() == errc::not_found;
      if (!damaged || i + 1 == candidates.size()) return fail(meta.err());
      std::fprintf(stderr,
                   "strata node: checkpoint %s is damaged (%s); falling back to the previous "
                   "complete checkpoint, %s\n",
                   dir->c_str(), meta.err().message().c_str(), candidates[i + 1].c_str());
      cleared = clear_shard_state(m, hosted);  // what the failed restore wrote
      if (!cleared) return fail(cleared.err());
      continue;
    }
    m.cluster = std::move(restored);
    uint64_t rows = 0;
    for (uint64_t r : meta->shard_rows) rows += r;
    std::string positions;
    for (uint64_t p : meta->positions)
      positions += (positions.empty() ? "" : " ") + std::to_string(p);
    std::printf(
        "resumed from checkpoint %s: epoch %llu, %llu rows from %zu into %zu shards in %.1f s, "
        "incarnation %u, worker positions [%s]\n",
        dir->c_str(), static_cast<unsigned long long>(meta->epoch),
        static_cast<unsigned long long>(rows), meta->shard_rows.size(), m.cluster.shards.size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        static_cast<unsigned>(m.cluster.incarnation), positions.c_str());
    break;
  }
  if (m.cluster.checkpoint.enabled()) {
    const auto& ck = m.cluster.checkpoint;
    std::string every = "stop only";
    if (ck.interval_batches) every = std::to_string(ck.interval_batches) + " batches per worker";
    if (ck.interval_seconds) every = std::to_string(ck.interval_seconds) + " s";
    std::printf("checkpoints: into %s, every %s, keeping %u\n", ck.directory.c_str(), every.c_str(),
                ck.keep);
  }

  // Online updates: every shard tells the publisher of the rows it updates.
  std::shared_ptr<serving::update_publisher> publisher;
  // A node of several publishes its own shards' updates, on its
  // updates_port (updates.port on the first node if it has none).
  bool publishes = m.updates.present;
  uint16_t updates_port = m.updates.port;
  if (publishes && member) {
    const auto& me = *std::find_if(m.nodes.begin(), m.nodes.end(),
                                   [&](const auto& n) { return n.name == member->name(); });
    const bool hosts_shards = std::find(hosted.begin(), hosted.end(), true) != hosted.end();
    updates_port =
        me.updates_port != 0 ? me.updates_port : (member->runs_coordinator() ? m.updates.port : 0);
    if (!hosts_shards) {
      publishes = false;
    } else if (updates_port == 0) {
      return fail(error(errc::invalid_argument,
                        path + ": node '" + me.name +
                            "' hosts shards and the manifest has `updates`: give it "
                            "nodes[].updates_port (serving subscribes to every node's publisher)"));
    }
  }
  if (publishes) {
    serving::publisher_config pc;
    pc.table = m.cluster.table.name;
    pc.dim = m.cluster.table.layout.dim;
    pc.stream = (uint64_t{std::random_device{}()} << 32 | std::random_device{}()) | 1;
    pc.interval = std::chrono::milliseconds(m.updates.interval_ms);
    pc.max_rows = m.updates.max_rows;
    pc.max_retained_rows = m.updates.max_retained_rows;
    // Subscribers and the publisher prove the cluster secret to each other
    // (docs/serving.md, "Online updates").
    auto secret = deploy::cluster_secret(m);
    if (!secret)
      return fail(error(errc::invalid_argument,
                        path + ": updates: the publisher needs the cluster secret: " +
                            secret.err().message()));
    pc.secret = std::move(*secret);
    pc.bind_address = m.updates.bind_address;
    pc.port = updates_port;
    publisher = std::make_shared<serving::update_publisher>(pc);
    if (auto ok = publisher->start(); !ok) return fail(ok.err());
    for (auto& shard : m.cluster.shards) shard.updates = publisher;
    std::printf(
        "updates: publishing table '%s' on %s:%u every %u ms or %u rows, retaining %llu rows\n",
        pc.table.c_str(), pc.bind_address.c_str(), publisher->port(), m.updates.interval_ms,
        m.updates.max_rows, static_cast<unsigned long long>(publisher->stats().max_retained_rows));
  }

  const auto& c = m.cluster;
  const std::string workers =
      c.workers.empty() ? "no workers"
                        : count_of(c.workers.size(), "worker") + " (batch " +
                              std::to_string(c.workers.front().batch_size) + ")";
  // Where this node's shards keep their LMDB environments (a node's own
  // ssd_path, else shards.ssd_path): the first hosted shard's parent.
  std::string lmdb_root = m.ssd_path.string();
  for (size_t i = 0; i < c.shards.size(); ++i)
    if (hosted.empty() || hosted[i]) {
      lmdb_root = c.shards[i].lmdb.directory.parent_path().string();
      break;
    }
  std::printf(
      "%s: %s mode, %s (DRAM %s each, LMDB under %s), %s (%llu rows each), %s, %s threads\n",
      store_only ? "store" : "training", mode_name(c.mode).c_str(),
      count_of(c.shards.size(), "shard").c_str(),
      deploy::format_size(c.shards.front().dram.capacity_bytes).c_str(), lmdb_root.c_str(),
      count_of(c.caches.size(), "cache tier").c_str(),
      static_cast<unsigned long long>(c.caches.front().geometry.capacity_rows()), workers.c_str(),
      c.threads ? std::to_string(c.threads).c_str() : "all");
  std::fflush(stdout);

  std::unique_ptr<monitoring::exporter> metrics;
  if (m.metrics.port != 0) {
    monitoring::exporter_config mc;
    mc.bind_address = m.metrics.bind_address;
    mc.port = m.metrics.port;
    mc.node = m.metrics.node;
    mc.table = c.table.name;
    mc.trains = coordinator_here;  // a member node knows no training progress
    auto started = monitoring::exporter::start(
        mc, {STRATA_VERSION, STRATA_GIT_REVISION, STRATA_CUDA_ENABLED != 0});
    if (!started) return fail(started.err());
    metrics = std::move(*started);
    std::printf("metrics: serving %s (node %s)\n", metrics->url().c_str(), mc.node.c_str());
    std::fflush(stdout);
  }

  // Where each cache tier lives now: the manifest's placement, then this
  // node for one a drain relocated here (its /metrics and report keep it).
  struct cache_home_list {
    std::mutex mu;
    std::string me;
    std::vector<std::string> nodes;
  };
  auto cache_homes = std::make_shared<cache_home_list>();
  cache_homes->me = member ? member->name() : std::string();
  cache_homes->nodes = m.cache_nodes;

  const uint64_t total = planned_examples(c);
  std::atomic<double> rate{0};  // the progress line's examples/s, for /status
  status_line line;
  bool printed = false;
  // The admin API (admin.port): served from the coordinator's start until
  // the report is printed.
  std::string token;
  if (m.admin.port != 0) {
    if (auto file = deploy::ensure_admin_token_file(m, std::cout); !file) return fail(file.err());
    auto read = deploy::admin_token(m);
    if (!read) return fail(read.err());
    token = *read;
  }
  std::unique_ptr<deploy::admin_server> admin;
  std::optional<error> admin_failure;
  auto start_admin = [&](caf::actor_system& system, const actors::training_cluster& cluster) {
    if (m.admin.port == 0) return;
    deploy::admin_config ac;
    ac.bind_address = m.admin.bind_address;
    ac.port = m.admin.port;
    ac.token = token;
    ac.cluster = c.name;
    for (const auto& n : m.nodes) ac.nodes.push_back({n.name, n.host, n.standby});
    if (ac.nodes.empty()) ac.nodes.push_back({m.metrics.node, m.admin.bind_address});
    // /status: where each shard lives, the other nodes' health, the rate.
    ac.shard_nodes = m.shard_nodes;
    ac.cache_nodes = m.cache_nodes;
    ac.worker_nodes = m.worker_nodes;
    if (member && member->spawner()) {
      const auto* spawner = member->spawner();
      ac.current_shard_nodes = [spawner] { return spawner->homes(); };
    }
    if (member && member->bridge()) {
      auto* bridge = member->bridge();
      ac.transport = [bridge] { return bridge->stats(); };
    }
    if (member && member->runs_coordinator() && member->spawner()) {
      auto* mem = member.get();
      ac.release_node = [mem](const std::string& node) { return mem->release(node); };
      ac.left_nodes = [mem] { return mem->left(); };
    }
    ac.examples_per_second = [&rate] { return rate.load(); };
    ac.planned_examples = total;
    ac.epochs = c.workers.empty() ? 0 : c.workers.front().epochs;
    ac.restored_examples = c.restored_examples;
    auto started = deploy::admin_server::start(ac, system, cluster.coordinator);
    if (!started) {
      admin_failure = started.err();
      caf::anon_send(cluster.coordinator, actors::stop_atom::value);
      return;
    }
    admin = std::move(*started);
    std::printf("admin: serving %s\n", admin->url().c_str());
    std::fflush(stdout);
  };
  actors::cluster_hooks hooks;
  // The gateway (gateway.port): clients' lookups and pushes, served by the
  // coordinator's node from its start until training ends.
  std::unique_ptr<serving::training_gateway> gateway_service;
  std::unique_ptr<serving::binary_server> gateway;
  std::unique_ptr<serving::transport_endpoint> gateway_ucx;
  // Its pushes pass a gate the coordinator closes before the final cut.
  if (m.gateway.port != 0) m.cluster.client_pushes = std::make_shared<actors::push_gate>();
  auto start_gateway = [&](caf::actor_system& system, const actors::training_cluster& cluster) {
    if (m.gateway.port == 0) return;
    serving::gateway_config gc;
    gc.pushes = c.client_pushes;
    gc.table = c.table.name;
    gc.layout = c.table.layout;
    gc.accepts_push = c.mode == actors::training_mode::async;
    gc.max_request_keys = m.gateway.max_request_keys;
    gateway_service = std::make_unique<serving::training_gateway>(system, cluster.coordinator, gc);
    gateway = std::make_unique<serving::binary_server>(*gateway_service);
    if (auto ok = gateway->start(m.gateway.bind_address, m.gateway.port); !ok) {
      admin_failure = error(ok.err().code(), "gateway.port: " + ok.err().message());
      gateway.reset();
      caf::anon_send(cluster.coordinator, actors::stop_atom::value);
      return;
    }
    std::printf("gateway: serving lookups%s of table '%s' on %s:%u\n",
                gc.accepts_push ? " and pushes" : "", gc.table.c_str(),
                m.gateway.bind_address.c_str(), static_cast<unsigned>(gateway->port()));
    if (m.gateway.transport_port != 0) {
      // Gateway requests wait for shards: worker threads, not the progress thread.
      gateway_ucx = std::make_unique<serving::transport_endpoint>(*gateway_service, 2);
      transport::bridge_config bc;
      bc.node_name = "gateway-" + c.name;
      bc.listen_address = m.gateway.bind_address;
      bc.listen_port = m.gateway.transport_port;
      if (auto ok = gateway_ucx->start(bc); !ok) {
        admin_failure = error(ok.err().code(), "gateway.transport_port: " + ok.err().message());
        gateway_ucx.reset();
        caf::anon_send(cluster.coordinator, actors::stop_atom::value);
        return;
      }
      std::printf("gateway: the same over UCX on %s:%u\n", m.gateway.bind_address.c_str(),
                  static_cast<unsigned>(gateway_ucx->port()));
    }
    std::fflush(stdout);
  };
  hooks.started = [&](caf::actor_system& system, const actors::training_cluster& cluster) {
    if (cluster.coordinator) {
      signals.watch(cluster.coordinator);
      start_admin(system, cluster);
      start_gateway(system, cluster);
    }
    if (!metrics) return;
    // This node's own actors (a node of several exports only what it hosts).
    std::vector<actors::shard_actor> shards;
    std::vector<actors::cache_tier_actor> caches;
    std::vector<caf::actor> others;
    for (size_t i = 0; i < cluster.shards.size(); ++i)
      if (cluster.shard_here.empty() || cluster.shard_here[i]) shards.push_back(cluster.shards[i]);
    for (size_t i = 0; i < cluster.caches.size(); ++i)
      if (cluster.cache_here.empty() || cluster.cache_here[i]) caches.push_back(cluster.caches[i]);
    for (size_t i = 0; i < cluster.workers.size(); ++i)
      if (cluster.worker_here.empty() || cluster.worker_here[i])
        others.push_back(caf::actor_cast<caf::actor>(cluster.workers[i]));
    if (cluster.dense_here) others.push_back(caf::actor_cast<caf::actor>(cluster.dense));
    if (cluster.coordinator) others.push_back(caf::actor_cast<caf::actor>(cluster.coordinator));
    metrics->watch(system, shards, caches, others);
    // And the shards a scale spawns here from now on (a retired one leaves
    // by itself when it exits).
    *cluster.spawned = [exporter = metrics.get()](const actors::shard_actor& s) {
      exporter->watch_shard(s);
    };
    // And the cache tiers a drain relocates here (from a node that left).
    *cluster.relocated_cache = [exporter = metrics.get(), cache_homes](
                                   uint32_t index, const actors::cache_tier_actor& c) {
      {
        std::lock_guard lock(cache_homes->mu);
        if (index < cache_homes->nodes.size()) cache_homes->nodes[index] = cache_homes->me;
      }
      exporter->watch_cache(c);
    };
    if (member && member->bridge()) {
      auto* bridge = member->bridge();
      metrics->watch_transport([bridge] { return bridge->stats(); });
    }
  };
  // The actors are still alive here: freeze the final values, print the
  // report, and keep serving them for the linger period.
  hooks.finished = [&](const actors::training_report& r) {
    if (gateway) gateway->stop();
    if (gateway_ucx) gateway_ucx->stop();
    if (metrics) {
      // A node of several exports only the tiers it hosts (the
      // coordinator's report lists every node's).
      actors::training_report own = r;
      if (member) {
        // Shards where they are now (a scale or drain moves them).
        const auto shard_homes =
            member->spawner() ? member->spawner()->homes() : m.shard_nodes;
        std::vector<std::string> cache_nodes;
        {
          std::lock_guard lock(cache_homes->mu);
          cache_nodes = cache_homes->nodes;
        }
        std::erase_if(own.tiers, [&](const actors::tier_stats& t) {
          const auto& nodes = t.kind == "shard" ? shard_homes : cache_nodes;
          return t.index >= nodes.size() || nodes[t.index] != member->name();
        });
      }
      metrics->freeze(own);
    }
    line.done();
    if (coordinator_here)
      print_report(m, r, signals.first_signal());
    else
      std::fputs(member_report_text(m, member->name(), member->coordinator_node(), r).c_str(),
                 stdout);
    printed = true;
    std::fflush(stdout);  // the report is out before any teardown
    if (metrics && m.metrics.linger_seconds > 0) {
      std::printf("metrics: serving the final values on %s for %u s\n", metrics->url().c_str(),
                  m.metrics.linger_seconds);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(m.metrics.linger_seconds));
    }
  };
  if (member) {
    hooks.place = [&](caf::actor_system& system) { return member->place(system); };
    hooks.join = [&](const actors::training_cluster& cluster) { return member->join(cluster); };
    hooks.serve_until_done = [&] { return member->serve_until_done(); };
  }
  // While the actor system still exists: every server that reaches actors
  // (the gateway, the admin API, /metrics, the signal thread) lets go of
  // them before the actor system goes (a request in that window used the
  // destroyed system, issue 15 item 11).
  hooks.shutdown = [&](bool ok) {
    signals.forget();
    if (gateway) gateway->stop();
    if (gateway_ucx) gateway_ucx->stop();
    if (admin) admin->stop();
    if (metrics) metrics->detach();
    if (member) member->finish(ok);
  };
  actors::progress_callback progress;
  if (coordinator_here)
    progress = [&](const actors::training_progress& p) {
      if (metrics) metrics->update_training(p);
      rate.store(p.examples_per_s);
      line.update(progress_text(p, total, c.restored_examples));
    };
  // A resumed run's bar starts where the checkpoint is, from the start.
  if (coordinator_here && c.restored_examples > 0)
    line.update(progress_text(actors::training_progress{}, total, c.restored_examples));
  auto report = actors::run_local_cluster(c, progress, hooks);
  signals.forget();
  line.done();
  if (publisher) publisher->stop();  // sends what is still pending
  if (admin) admin->stop();
  if (gateway) gateway->stop();
  if (admin_failure) return fail(*admin_failure);
  if (!report) return fail(report.err());
  if (!printed) {
    if (coordinator_here)
      print_report(m, *report, signals.first_signal());
    else
      std::fputs(
          member_report_text(m, member->name(), member->coordinator_node(), *report).c_str(),
          stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_node_command(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto node = std::make_shared<std::string>();
  auto resume = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "node", "run one node of a manifest in this process (what strata launch starts per node)");
  cmd->add_option("--manifest", *path, "the manifest (YAML)")->required();
  cmd->add_option("--node", *node, "the node's name (the manifest's metrics.node, else its name)");
  cmd->add_option("--resume", *resume,
                  "restore this checkpoint (or the latest complete one under this directory)");
  cmd->callback([path, node, resume, &exit_code] { exit_code = run_node(*path, *node, *resume); });
}

}  // namespace strata::cli
