// `strata serve MANIFEST`: a serving node (docs/serving.md). Loads the
// manifest's checkpoint into the serving tiers (cache -> DRAM -> LMDB),
// answers lookups over the binary protocol and HTTP, follows an update
// publishers serving.subscribe names, and stops on SIGINT/SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "actors/checkpoint.hpp"
#include "deploy/cache_backend_choice.hpp"
#include "deploy/commands.hpp"
#include "deploy/launch_report.hpp"
#include "deploy/manifest.hpp"
#include "deploy/preflight.hpp"
#include "serving/binary_server.hpp"
#include "serving/http_server.hpp"
#include "serving/service.hpp"
#include "serving/transport_endpoint.hpp"
#include "serving/update_stream.hpp"
#include "tiers/cpu_cache.hpp"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

// A checkpoint directory itself, or the latest complete one under a root.
expected<fs::path> resolve_checkpoint(const fs::path& dir, const std::string& manifest) {
  if (dir.empty())
    return error(errc::invalid_argument,
                 manifest + ": serving.checkpoint (or checkpoint.dir) is needed to serve");
  if (fs::exists(dir / actors::checkpoint_meta_name)) return dir;
  auto latest = actors::latest_checkpoint(dir);
  if (!latest)
    return error(errc::not_found, dir.string() + ": no complete checkpoint to serve (" + manifest +
                                      ": serving.checkpoint)");
  return *latest;
}

int serve(const std::string& path, const std::string& port_file) {
  auto fail = [&](const std::string& what) {
    std::cerr << "strata serve: " << what << '\n';
    return 1;
  };
  // Signals are waited for below; block them before any server thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto m = deploy::load_manifest(path);
  if (!m) return fail(m.err().message());
  const deploy::serving_settings& s = m->serving;
  if (!s.present) return fail(path + ": no serving section");
  // The serving cache in HBM (gpu): the CUDA backend behind pinned staging,
  // sized for the largest lookup; refused with the reason where unusable.
  std::optional<actors::cache_backend_factory> gpu_factory;
  if (s.cache_backend == "gpu") {
    auto f = gpu_cache_factory(path + ": serving.cache_backend: gpu", 16384);
    if (!f) return fail(f.err().message());
    gpu_factory = std::move(*f);
  }
  auto checkpoint = resolve_checkpoint(
      s.checkpoint.empty() ? m->cluster.checkpoint.directory : s.checkpoint, path);
  if (!checkpoint) return fail(checkpoint.err().message());

  const auto& table = m->cluster.table;
  serving::serving_store_config sc;
  sc.table = table.name;
  sc.dim = table.layout.dim;
  sc.lmdb_path = s.lmdb_path;
  sc.partitions = m->cluster.partitions;
  sc.dram_bytes = s.dram_bytes;
  sc.default_value = s.default_value;
  sc.async_insert_hit_rate = s.async_insert_hit_rate;
  sc.hit_rate_window = s.hit_rate_window;
  sc.warmup_keys = s.warmup_keys;
  sc.lmdb_read_handles = s.lmdb_read_handles;
  const row_layout layout{sc.dim, optimizer_kind::sgd, false};
  const cache_geometry geometry{s.cache_sets, s.cache_slabs_per_set};
  std::unique_ptr<cache_backend> cache;
  if (gpu_factory) {
    auto made = (*gpu_factory)(layout, geometry);
    if (!made) return fail(path + ": serving.cache_backend: gpu: " + made.err().message());
    cache = std::move(*made);
  } else {
    cache = std::make_unique<cpu_cache>(layout, geometry);
  }
  // Storage failures keep their code in front ("disk_full: ..."): what a
  // full serving disk is must not read as a plain I/O error.
  auto store = serving::serving_store::open(sc, std::move(cache));
  if (!store) return fail(store.err().to_string());
  if (auto ok = (*store)->load_checkpoint(*checkpoint); !ok) return fail(ok.err().to_string());
  const auto loaded = (*store)->stats();

  serving::serving_service service({s.max_request_keys});
  service.add_table(std::move(*store));
  serving::binary_server binary(service);
  if (auto ok = binary.start(s.bind_address, s.binary_port); !ok) return fail(ok.err().message());
  std::unique_ptr<serving::http_server> http;
  if (s.http_port != 0) {
    http = std::make_unique<serving::http_server>(service, s.max_http_body_bytes);
    if (auto ok = http->start(s.bind_address, s.http_port); !ok) return fail(ok.err().message());
  }
  // Lookups over UCX for clients in the cluster (serving.transport_port).
  std::unique_ptr<serving::transport_endpoint> ucx;
  if (s.transport_port != 0) {
    ucx = std::make_unique<serving::transport_endpoint>(service);
    transport::bridge_config bc;
    bc.node_name = "serve-" + table.name + "-" + std::to_string(::getpid());
    bc.listen_address = s.bind_address;
    bc.listen_port = s.transport_port;
    if (auto ok = ucx->start(bc); !ok)
      return fail(path + ": serving.transport_port: " + ok.err().message());
  }
  // One subscriber per publisher (a training cluster of several nodes has
  // one per node); each key comes from one publisher, and versions never go
  // backwards whatever the order batches arrive in.
  // Rows are applied only from a publisher that proves the cluster secret
  // (and a publisher streams only to a subscriber that proves it).
  std::vector<std::unique_ptr<serving::update_subscriber>> subscribers;
  auth::secret secret;
  if (!s.subscribe.empty()) {
    if (auto ok = deploy::ensure_cluster_secret_file(*m, std::cout); !ok)
      return fail(ok.err().message());
    auto read = deploy::cluster_secret(*m);
    if (!read)
      return fail(path + ": serving.subscribe: updates need the cluster secret: " +
                  read.err().message());
    secret = std::move(*read);
  }
  for (const auto& publisher : s.subscribe) {
    serving::subscriber_config uc;
    uc.publisher = {publisher.host, publisher.port};
    uc.table = table.name;
    uc.secret = secret;
    subscribers.push_back(std::make_unique<serving::update_subscriber>(uc, service));
    if (auto ok = subscribers.back()->start(); !ok) return fail(ok.err().message());
  }
  std::printf("strata serve: table '%s' dim %u from %s: %llu rows (%llu warmed); binary %s:%u",
              table.name.c_str(), sc.dim, checkpoint->string().c_str(),
              static_cast<unsigned long long>(loaded.loaded_rows),
              static_cast<unsigned long long>(loaded.warmed_rows), s.bind_address.c_str(),
              binary.port());
  if (http) std::printf("; http %s:%u", s.bind_address.c_str(), http->port());
  if (ucx) std::printf("; ucx %s:%u", s.bind_address.c_str(), ucx->port());
  for (size_t i = 0; i < s.subscribe.size(); ++i)
    std::printf("%s%s:%u", i == 0 ? "; updates from " : ", ", s.subscribe[i].host.c_str(),
                s.subscribe[i].port);
  std::printf("\n");
  std::fflush(stdout);
  if (!port_file.empty()) {
    // Written whole, then renamed: a reader never sees half of it.
    const fs::path tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << "binary=" << binary.port() << "\nhttp=" << (http ? http->port() : 0) << "\n";
      if (!out) return fail("cannot write " + tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, port_file, ec);
    if (ec) return fail("cannot write " + port_file + ": " + ec.message());
  }
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  std::fprintf(stderr, "strata serve: %s: stopping\n", detail::signal_name(sig).c_str());
  for (auto& subscriber : subscribers) subscriber->stop();
  if (ucx) ucx->stop();
  if (http) http->stop();
  binary.stop();
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto port_file = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "serve", "serve a checkpoint's embeddings (binary protocol, HTTP/JSON) with online updates");
  cmd->add_option("manifest", *path, "the manifest with a serving section")->required();
  cmd->add_option(
      "--port-file", *port_file,
      "write the bound ports (binary=P, http=P) here once serving (for scripts, tests)");
  cmd->callback([path, port_file, &exit_code] { exit_code = serve(*path, *port_file); });
}

}  // namespace strata::cli
