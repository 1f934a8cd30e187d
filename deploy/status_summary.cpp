#include "deploy/status_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata::deploy {
namespace {

using json = nlohmann::json;

std::string str(const json& j, const char* key, const std::string& otherwise = "") {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return otherwise;
  return j[key].get<std::string>();
}

// An unsigned field, or nullopt when absent or null.
std::optional<uint64_t> num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<uint64_t>();
}

std::string u(uint64_t v) { return std::to_string(v); }

// Columns padded to the widest cell (rows of equal length).
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += "  " + r[i];
      if (i + 1 < r.size()) line.append(width[i] - r[i].size(), ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string rows_text(const json& rows, bool cached) {
  std::string out = u(num(rows, "dram").value_or(0)) + " DRAM, " +
                    u(num(rows, "write_behind").value_or(0)) + " write-behind, " +
                    u(num(rows, "lmdb").value_or(0)) + " LMDB";
  if (cached) out += ", " + u(num(rows, "cache").value_or(0)) + " cached";
  return out;
}

}  // namespace

expected<std::string> status_summary(const std::string& status_json) {
  json doc = json::parse(status_json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object())
    return error(errc::corrupt_data, "the admin API's /status answer is not a JSON object");
  std::string out;
  const json map = doc.value("partition_map", json());
  out += "cluster " + str(doc, "cluster", "?") + ": " + str(doc, "state", "?");
  if (map.is_object())
    out += " (partition map epoch " + u(num(map, "epoch").value_or(0)) + ": " +
           u(num(map, "partitions").value_or(0)) + " partitions on " +
           u(num(map, "shards").value_or(0)) + " shards)";
  out += "\n";
  if (auto to = num(doc, "scaling_to")) out += "scaling to " + u(*to) + " shards\n";

  const json& nodes = doc.value("nodes", json::array());
  if (nodes.is_array() && !nodes.empty()) {
    out += "nodes:\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& n : nodes)
      rows.push_back({str(n, "name"), str(n, "host"), str(n, "health", "?")});
    out += table(rows);
  }
  const json& shards = doc.value("shards", json::array());
  if (shards.is_array() && !shards.empty()) {
    out += "shards:\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : shards) {
      std::vector<std::string> row{"shard " + u(num(s, "index").value_or(0)), str(s, "node", "-"),
                                   u(num(s, "partition_count").value_or(0)) + " partitions"};
      row.push_back(s.contains("rows") ? "rows " + rows_text(s["rows"], false) : "rows ?");
      row.push_back(str(s, "health", "?"));
      rows.push_back(std::move(row));
    }
    out += table(rows);
  }
  const json& caches = doc.value("caches", json::array());
  if (caches.is_array() && !caches.empty()) {
    uint64_t rows = 0;
    std::vector<std::string> unhealthy;
    for (const auto& c : caches) {
      rows += num(c, "rows").value_or(0);
      if (str(c, "health") != "ok")
        unhealthy.push_back("cache " + u(num(c, "index").value_or(0)) + ": " + str(c, "health", "?"));
    }
    out += "caches: " + u(caches.size()) + " tier" + (caches.size() == 1 ? "" : "s") + ", " +
           u(rows) + " rows";
    if (unhealthy.empty()) {
      out += ", all ok\n";
    } else {
      out += "\n";
      for (const auto& line : unhealthy) out += "  " + line + "\n";
    }
  }
  if (doc.contains("rows")) out += "rows: " + rows_text(doc["rows"], true) + "\n";

  const json& t = doc.value("training", json::object());
  if (t.is_object() && !t.empty()) {
    // Examples of the whole plan: those before a resume and this run's.
    const uint64_t restored = num(t, "restored_examples").value_or(0);
    const uint64_t examples = num(t, "examples").value_or(0) + restored;
    std::string line = "training: " + u(examples);
    const auto planned = num(t, "planned_examples");
    if (planned && *planned > 0) {
      line += " of " + u(*planned) + " examples (" +
              u(std::min<uint64_t>(100, examples * 100 / *planned)) + "%";
      if (restored > 0) line += "; " + u(restored) + " before the resume";
      line += ")";
      if (auto epochs = num(t, "epochs"); epochs && *epochs > 0) {
        // Workers move through their windows together, so roughly.
        const uint64_t epoch = std::min<uint64_t>(
            *epochs, static_cast<uint64_t>(static_cast<double>(examples) /
                                           static_cast<double>(*planned) * *epochs) + 1);
        line += ", epoch " + u(epoch) + " of " + u(*epochs);
      }
    } else {
      line += " examples";
    }
    if (t.contains("examples_per_second") && t["examples_per_second"].is_number()) {
      char rate[64];
      std::snprintf(rate, sizeof rate, ", %.0f examples/s", t["examples_per_second"].get<double>());
      line += rate;
    }
    if (t.contains("recent_loss") && t["recent_loss"].is_number() && examples > 0) {
      char loss[64];
      std::snprintf(loss, sizeof loss, ", loss %.4f", t["recent_loss"].get<double>());
      line += loss;
    }
    if (auto passes = num(t, "passes"); passes && *passes > 0) line += ", " + u(*passes) + " passes";
    if (auto workers = num(t, "workers"))
      line += ", " + u(*workers) + " worker" + (*workers == 1 ? "" : "s");
    out += line + "\n";
    const uint64_t checkpoints = num(t, "checkpoints").value_or(0);
    const std::string last = str(t, "last_checkpoint");
    if (checkpoints == 0 && last.empty()) {
      out += "checkpoints: none yet\n";
    } else {
      std::string ck = "checkpoints: " + u(checkpoints);
      if (!last.empty()) {
        ck += ", last";
        if (auto e = num(t, "last_checkpoint_epoch")) ck += " epoch " + u(*e);
        if (auto age = num(t, "last_checkpoint_age_seconds")) ck += ", " + u(*age) + " s ago";
        ck += ": " + last;
      }
      out += ck + "\n";
    }
  }
  return out;
}

std::string admin_error_text(const std::string& body) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("error") && doc["error"].is_string())
    return doc["error"].get<std::string>() + "\n";
  return body;
}

}  // namespace strata::deploy
