#include "serving/service.hpp"

#include "serving/connection_limits.hpp"

namespace strata::serving {

status lookup_service::apply_updates(const std::string& table, std::span<const uint64_t>,
                                     std::span<const float>, std::span<const uint64_t>) {
  return error(errc::invalid_argument,
               "updates for table '" + table + "': this endpoint takes no update stream");
}

expected<uint64_t> checked_reply_bytes(const std::string& table, size_t n, uint32_t dim,
                                       uint64_t cap) {
  const uint64_t bytes = uint64_t(n) * (8 + uint64_t(dim) * 4);
  if (bytes > cap)
    return error(errc::capacity_exceeded,
                 "lookup of " + std::to_string(n) + " keys of table '" + table + "' (dim " +
                     std::to_string(dim) + ") needs a " + std::to_string(bytes) +
                     "-byte reply, over max_reply_bytes " + std::to_string(cap) +
                     "; split the request (repeated keys count each time)");
  return bytes;
}

expected<uint64_t> lookup_service::reply_bytes(const std::string&, size_t n) {
  return uint64_t(n) * 8;
}

status lookup_service::push(const std::string& table, uint32_t, std::span<const uint64_t>,
                            std::span<const float>, uint64_t) {
  return error(errc::invalid_argument,
               "push to table '" + table +
                   "': a serving node takes no gradients; push to a training cluster's gateway "
                   "(manifest: gateway.port, async mode)");
}

void serving_service::add_table(std::unique_ptr<serving_store> store) {
  auto entry = std::make_unique<table_entry>();
  entry->dim = store->dim();
  entry->store = std::move(store);
  std::unique_lock lock(tables_mutex_);
  const std::string name = entry->store->table();
  tables_[name] = std::move(entry);
}

expected<serving_service::table_entry*> serving_service::find(const std::string& table) {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    std::string names;
    for (const auto& [name, entry] : tables_) names += (names.empty() ? "" : ", ") + name;
    return error(errc::not_found, "unknown table '" + table + "' (served: " + names + ")");
  }
  return it->second.get();
}

status serving_service::lookup(const std::string& table, std::span<const uint64_t> keys,
                               lookup_result& out) {
  if (keys.size() > limits_.max_request_keys)
    return error(errc::capacity_exceeded, "lookup of " + std::to_string(keys.size()) +
                                              " keys exceeds max_request_keys " +
                                              std::to_string(limits_.max_request_keys));
  std::shared_lock tables(tables_mutex_);
  auto entry = find(table);
  if (!entry) return entry.err();
  return (*entry)->store->lookup(keys, out);
}

status serving_service::prefetch(const std::string& table, std::span<const uint64_t> keys) {
  if (keys.size() > limits_.max_request_keys)
    return error(errc::capacity_exceeded, "prefetch of " + std::to_string(keys.size()) +
                                              " keys exceeds max_request_keys " +
                                              std::to_string(limits_.max_request_keys));
  std::shared_lock tables(tables_mutex_);
  auto entry = find(table);
  if (!entry) return entry.err();
  return (*entry)->store->prefetch(keys);
}

expected<uint64_t> serving_service::reply_bytes(const std::string& table, size_t n) {
  if (n > limits_.max_request_keys)
    return error(errc::capacity_exceeded, "lookup of " + std::to_string(n) +
                                              " keys exceeds max_request_keys " +
                                              std::to_string(limits_.max_request_keys));
  auto dim = dim_of(table);
  if (!dim) return dim.err();
  return checked_reply_bytes(table, n, *dim, limits_.max_reply_bytes);
}

void serving_service::finish_request() {
  std::shared_lock tables(tables_mutex_);
  for (auto& [name, entry] : tables_) {
    if (entry->store->has_pending())
      (void)entry->store->insert_pending();  // a failed insert is only a miss later
  }
}

status serving_service::apply_updates(const std::string& table, std::span<const uint64_t> keys,
                                      std::span<const float> weights,
                                      std::span<const uint64_t> versions) {
  std::shared_lock tables(tables_mutex_);
  auto entry = find(table);
  if (!entry) return entry.err();
  return (*entry)->store->apply_updates(keys, weights, versions);
}

expected<uint32_t> serving_service::dim_of(const std::string& table) {
  std::shared_lock tables(tables_mutex_);
  auto entry = find(table);
  if (!entry) return entry.err();
  return (*entry)->dim;
}

void serving_service::set_server_stats(const std::string& name,
                                       std::function<connection_stats()> stats) {
  std::lock_guard lock(servers_mutex_);
  if (stats)
    servers_[name] = std::move(stats);
  else
    servers_.erase(name);
}

std::map<std::string, connection_stats> serving_service::server_stats() {
  std::lock_guard lock(servers_mutex_);
  std::map<std::string, connection_stats> out;
  for (const auto& [name, stats] : servers_) out[name] = stats();
  return out;
}

std::map<std::string, serving_stats> serving_service::stats() {
  std::shared_lock tables(tables_mutex_);
  std::map<std::string, serving_stats> out;
  for (auto& [name, entry] : tables_) out[name] = entry->store->stats();
  return out;
}

}  // namespace strata::serving
