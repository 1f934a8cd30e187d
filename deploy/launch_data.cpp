#include "deploy/launch_data.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "actors/checkpoint.hpp"
#include "deploy/status_line.hpp"
#include "model/datagen.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

}  // namespace

namespace detail {

expected<void> generate_data(const deploy::manifest& m) {
  const auto& g = *m.generate;
  std::printf("generating %llu rows (%llu distinct keys, seed %llu) into %s\n",
              static_cast<unsigned long long>(g.rows),
              static_cast<unsigned long long>(g.distinct_keys),
              static_cast<unsigned long long>(g.seed), g.output.c_str());
  std::fflush(stdout);
  std::error_code ec;
  if (g.output.has_parent_path()) fs::create_directories(g.output.parent_path(), ec);
  if (ec)
    return error(errc::io_error, g.output.parent_path().string() +
                                     ": cannot create the data directory: " + ec.message());
  const auto start = std::chrono::steady_clock::now();
  status_line line;
  auto quality = model::generate(g, [&](uint64_t done) {
    char text[120];
    std::snprintf(text, sizeof text, "datagen: %llu/%llu rows (%.0f%%)",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(g.rows),
                  100.0 * static_cast<double>(done) / static_cast<double>(g.rows));
    line.update(text);
  });
  line.done();
  if (!quality) return quality.err();
  std::printf("generated in %.1f s; planted model: AUC %.4f, logloss %.4f\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              quality->auc, quality->logloss);
  return {};
}

expected<void> clear_shard_state(const deploy::manifest& m, const std::vector<bool>& hosted) {
  static const std::set<std::string> lmdb_files = {"data.mdb", "lock.mdb"};
  bool announced = false;
  for (size_t i = 0; i < m.cluster.shards.size(); ++i) {
    if (!hosted.empty() && !hosted[i]) continue;  // another node's
    const fs::path& dir = m.cluster.shards[i].lmdb.directory;
    std::error_code ec;
    if (!fs::exists(dir, ec)) continue;
    if (!fs::is_directory(dir, ec))
      return error(errc::invalid_argument, dir.string() + ": shard state path is not a directory");
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (!lmdb_files.count(entry.path().filename().string()))
        return error(errc::invalid_argument,
                     dir.string() + ": holds " + entry.path().filename().string() +
                         ", not only an LMDB environment; refusing to clear it (pick another "
                         "shards.ssd_path)");
    }
    if (ec) return error(errc::io_error, dir.string() + ": " + ec.message());
    if (!announced) {
      std::printf("starting fresh: removing the previous run's shard state under %s\n",
                  dir.parent_path().c_str());
      announced = true;
    }
    fs::remove_all(dir, ec);
    if (ec) return error(errc::io_error, dir.string() + ": cannot remove: " + ec.message());
  }
  return {};
}

expected<std::vector<fs::path>> resume_candidates(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / actors::checkpoint_meta_name, ec)) return std::vector<fs::path>{dir};
  auto all = actors::complete_checkpoints(dir);
  if (all.empty())
    return error(errc::not_found, dir.string() +
                                      ": no complete checkpoint there (a checkpoint "
                                      "directory has a FILES list once complete)");
  std::reverse(all.begin(), all.end());
  return all;
}

std::string resume_hint(const deploy::manifest& m, const std::string& path) {
  std::error_code ec;
  if (!m.generate && !fs::exists(m.data.path, ec))
    return "A resume needs the data file " + m.data.path.string() +
           " (data.path), which does not exist: restore it, then strata launch " + path +
           " --resume";
  const fs::path root = m.cluster.checkpoint.directory;
  if (root.empty())
    return "No checkpoint to resume from (the manifest has no checkpoint.dir): start again with "
           "strata launch " +
           path;
  auto all = actors::complete_checkpoints(root);
  std::string damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto verified = actors::verify_checkpoint(*it, &m.cluster.table, m.cluster.partitions);
    if (verified)
      return "Resume from the latest complete checkpoint (" + it->filename().string() +
             ") with: strata launch " + path + " --resume";
    if (damaged.empty()) damaged = verified.err().message();
  }
  if (all.empty())
    return "No complete checkpoint under " + root.string() +
           " yet: a resume cannot help; start again with strata launch " + path;
  return "No checkpoint under " + root.string() + " verifies (" + damaged +
         "): a resume cannot help; start again with strata launch " + path;
}

expected<void> prepare_data(deploy::manifest& m, const std::string& path, const std::string& node,
                            bool coordinator_here) {
  std::error_code ec;
  if (!fs::exists(m.data.path, ec)) {
    if (!coordinator_here)
      return error(errc::not_found,
                   path + ": data.path: " + m.data.path.string() + " does not exist on node '" +
                       node +
                       "' (strata launch generates it first; by hand: strata datagen, or start "
                       "the first node, " +
                       m.nodes.front().name + ", first)");
    if (!m.generate)
      return error(errc::not_found, path + ": data.path: " + m.data.path.string() +
                                        " does not exist (add a data.generate block to create it)");
    auto generated = generate_data(m);
    if (!generated) return generated.err();
  } else if (m.generate) {
    std::printf("data %s exists; not generating it again\n", m.data.path.c_str());
  }
  auto split = deploy::resolve_data_split(m);
  if (!split) return split.err();
  uint64_t train = 0;
  for (const auto& w : m.cluster.workers) train += w.data.limit;
  if (m.cluster.heldout.path.empty())
    std::printf("data: %llu training examples, no held-out window\n",
                static_cast<unsigned long long>(train));
  else
    std::printf("data: %llu training examples, held-out window from example %llu%s\n",
                static_cast<unsigned long long>(train),
                static_cast<unsigned long long>(m.cluster.heldout.skip),
                m.cluster.heldout.limit
                    ? (" (" + std::to_string(m.cluster.heldout.limit) + " examples)").c_str()
                    : " to the end");
  return {};
}

}  // namespace detail
}  // namespace strata::cli
