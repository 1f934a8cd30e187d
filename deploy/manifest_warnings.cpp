#include "deploy/manifest_warnings.hpp"

#include <filesystem>
#include <system_error>

namespace strata::deploy {
namespace {

namespace fs = std::filesystem;

bool exists_here(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

}  // namespace

std::vector<std::string> missing_file_warnings(const manifest& m) {
  std::vector<std::string> out;
  const std::string where = m.file.string() + ": ";
  const std::string tail =
      " does not exist on this machine (strata launch refuses to start "
      "without it";
  if (!m.generate && !m.data.path.empty()) {
    std::error_code ec;
    if (!exists_here(m.data.path))
      out.push_back(where + "data.path: " + m.data.path.string() + tail +
                    "; add data.generate to have launch write it)");
    else if (!fs::is_regular_file(m.data.path, ec))
      out.push_back(where + "data.path: " + m.data.path.string() +
                    " is not a regular file (strata launch refuses it)");
  }
  if (!m.admin.token_file.empty() && !m.admin.create_if_missing && !exists_here(m.admin.token_file))
    out.push_back(where + "admin.token_file: " + m.admin.token_file.string() + tail +
                  "; admin.create_if_missing: true has launch create it)");
  if (!m.cluster_secret.file.empty() && !m.cluster_secret.create_if_missing &&
      !exists_here(m.cluster_secret.file))
    out.push_back(where + "cluster_secret.file: " + m.cluster_secret.file.string() + tail +
                  "; cluster_secret.create_if_missing: true has launch create it)");
  if (m.serving.present && !m.serving.checkpoint.empty() && !exists_here(m.serving.checkpoint))
    out.push_back(where + "serving.checkpoint: " + m.serving.checkpoint.string() +
                  " does not exist on this machine (strata serve refuses to start without it)");
  return out;
}

std::string store_without_checkpoint_warning(const manifest& m) {
  if (!m.cluster.workers.empty() || m.cluster.checkpoint.enabled()) return {};
  // Where the shards' environments are (a node may have an ssd_path of its own).
  std::string under;
  for (const auto& shard : m.cluster.shards) {
    const std::string dir = shard.lmdb.directory.parent_path().string();
    if (under.find(dir) == std::string::npos) under += (under.empty() ? "" : ", ") + dir;
  }
  return m.file.string() + ": a store (workers.count 0) without a checkpoint section: every " +
         "strata launch starts fresh and removes the rows under " + under +
         ", so what clients pushed is lost at the next start; add checkpoint: {dir: PATH} to "
         "keep it (then strata launch --resume)";
}

std::vector<std::string> manifest_warnings(const manifest& m) {
  auto out = missing_file_warnings(m);
  if (auto store = store_without_checkpoint_warning(m); !store.empty())
    out.push_back(std::move(store));
  return out;
}

}  // namespace strata::deploy
