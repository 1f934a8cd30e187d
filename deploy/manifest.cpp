// The public entry points of deploy/manifest.hpp: parse_manifest drives the
// steps of deploy/manifest_parse.hpp; sizes, shard directories and the
// admin token are small enough to live here.
#include "deploy/manifest.hpp"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "common/regular_file.hpp"
#include "deploy/manifest_parse.hpp"
#include "deploy/manifest_reader.hpp"
#include "deploy/placeholder_secret.hpp"

namespace strata::deploy {

// The parser's pieces (manifest_reader.hpp, manifest_parse.hpp).
using namespace detail;

expected<std::string> admin_token(const manifest& m) {
  std::string token = m.admin.token;
  std::string where = m.file.string() + ": admin.token";
  if (!m.admin.token_file.empty()) {
    // Owner-only, like every secret file (common/auth.hpp): a token others
    // can read is no token.
    where = m.file.string() + ": admin.token_file";
    auto read = auth::read_secret_text(m.admin.token_file, where);
    if (!read) return read.err();
    token = std::move(*read);
    where += ": " + m.admin.token_file.string();
  }
  if (!token.empty() && looks_like_placeholder(token))
    return error(errc::invalid_argument, placeholder_refusal(where));
  return token;
}

expected<auth::secret> cluster_secret(const manifest& m) {
  if (m.cluster_secret.file.empty())
    return error(errc::invalid_argument,
                 m.file.string() + ": cluster_secret: the manifest has none (add cluster_secret: "
                                   "{file: PATH, create_if_missing: true})");
  return auth::read_secret_file(m.cluster_secret.file, m.file.string() + ": cluster_secret.file");
}

std::filesystem::path shard_directory(const std::filesystem::path& ssd_path, uint32_t index) {
  return ssd_path / ("shard-" + std::to_string(index));
}

expected<uint64_t> parse_size(std::string_view text) {
  const auto bad = [&] {
    return error(errc::invalid_argument, "expected a size like 64MiB, got " + in_quotes(text));
  };
  size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '_'))
    ++digits;
  const auto number = parse_uint(text.substr(0, digits));
  if (!number) return bad();
  std::string_view unit = text.substr(digits);
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static const std::pair<std::string_view, uint64_t> units[] = {
      {"", 1},
      {"B", 1},
      {"KiB", uint64_t{1} << 10},
      {"MiB", uint64_t{1} << 20},
      {"GiB", uint64_t{1} << 30},
      {"TiB", uint64_t{1} << 40},
      {"kB", 1000},
      {"KB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000},
      {"TB", uint64_t{1000} * 1000 * 1000 * 1000},
  };
  for (const auto& [name, factor] : units) {
    if (unit != name) continue;
    if (name.empty() && digits != text.size()) return bad();  // "64 " with no unit
    if (*number > std::numeric_limits<uint64_t>::max() / factor)
      return error(errc::invalid_argument, "size " + in_quotes(text) + " overflows 64 bits");
    return *number * factor;
  }
  return bad();
}

std::string format_size(uint64_t bytes) {
  static const std::pair<const char*, uint64_t> units[] = {{"TiB", uint64_t{1} << 40},
                                                           {"GiB", uint64_t{1} << 30},
                                                           {"MiB", uint64_t{1} << 20},
                                                           {"KiB", uint64_t{1} << 10}};
  for (const auto& [name, factor] : units)
    if (bytes != 0 && bytes % factor == 0) return std::to_string(bytes / factor) + " " + name;
  return std::to_string(bytes) + " B";
}

expected<manifest> parse_manifest(std::string_view text, const std::string& file_label) {
  diagnostics diag(file_label);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    diag.fail(e.mark, "", "YAML syntax: " + e.msg);
    return diag.to_error();
  }
  if (!root.IsDefined() || root.IsNull()) {
    diag.fail(YAML::Mark(), "", "the manifest is empty");
    return diag.to_error();
  }
  diag.remember("", root.Mark());
  raw_manifest r;
  bool read_whole = true;  // false: a section reader threw; the rules would see half a file
  try {
    section top(diag, root, "", root.Mark());
    read_top(top, r);
    read_nodes(top, r);
    read_table(top.child("table"), r);
    read_tables(top, r);
    read_model(top.child("model"), r);
    top.require("shards");
    read_shards(top.child("shards"), r);
    read_caches(top.child("caches"), r);
    read_workers(top.child("workers"), r);
    // A cluster without workers (a store for clients' pushes) reads no data.
    if (r.worker_count > 0) top.require("data");
    if (top.has("data")) read_data(top.child("data"), r);
    read_dense(top.child("dense"), r);
    read_metrics(top.child("metrics"), r);
    read_admin(top.child("admin"), r);
    if (top.has("cluster_secret")) read_cluster_secret(top.child("cluster_secret"), r);
    read_checkpoint(top.child("checkpoint"), r);
    read_transport(top.child("transport"), r);
    read_gateway(top.child("gateway"), r);
    if (top.has("serving")) read_serving(top.child("serving"), r);
    if (top.has("updates")) read_updates(top.child("updates"), r);
    top.finish();
    apply_tables(r);
  } catch (const YAML::Exception& e) {
    diag.fail(e.mark, "", e.msg);
    read_whole = false;
  }
  // Field errors and the rules between fields in one report (issue 22): a
  // user fixes both in one round.
  if (read_whole) {
    diag.begin_rules();
    check_rules(r, diag);
  }
  if (!diag.ok()) return diag.to_error();

  manifest m = build(r, file_label);
  if (m.split.train_examples != 0) {
    auto split = apply_split(m, std::nullopt);
    if (!split) return split.err();
  }
  return m;
}

expected<manifest> load_manifest(const std::filesystem::path& file) {
  // A device or FIFO named as the manifest would be read without end.
  if (auto regular = check_regular_file(file, "manifest"); !regular) {
    if (regular.err().code() == errc::not_found)
      return error(errc::not_found, file.string() + ": cannot open the manifest");
    return regular.err();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return error(errc::not_found, file.string() + ": cannot open the manifest");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error(errc::io_error, file.string() + ": cannot read the manifest");
  return parse_manifest(text.str(), file.string());
}

}  // namespace strata::deploy
