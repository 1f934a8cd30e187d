#include "serving/metadata_requests.hpp"

#include "actors/checkpoint.hpp"
#include "serving/training_gateway.hpp"

namespace strata::serving {

namespace fs = std::filesystem;

status first_keys(lmdb_tier& tier, uint32_t partitions, uint32_t limit,
                  std::vector<uint64_t>& out) {
  const size_t want = out.size() + limit;
  for (uint32_t p = 0; p < partitions && out.size() < want; ++p) {
    STRATA_TRY(tier.range_scan(p, [&](uint64_t key, const std::byte*) {
      if (out.size() < want) out.push_back(key);
    }));
  }
  return {};
}

expected<std::vector<uint64_t>> checkpoint_keys(const fs::path& dir, const std::string& table,
                                                uint32_t limit) {
  fs::path checkpoint = dir;
  if (!fs::exists(dir / actors::checkpoint_meta_name)) {
    auto latest = actors::latest_checkpoint(dir);
    if (!latest)
      return error(errc::not_found, dir.string() +
                                        ": not a checkpoint, and no complete checkpoint under it");
    checkpoint = *latest;
  }
  auto meta = actors::read_checkpoint_meta(checkpoint);
  if (!meta) return meta.err();
  if (meta->table != table)
    return error(errc::not_found, checkpoint.string() + ": unknown table '" + table +
                                      "' (the checkpoint holds: " + meta->table + ")");
  std::vector<uint64_t> out;
  for (uint32_t shard = 0; shard < meta->shard_rows.size() && out.size() < limit; ++shard) {
    auto tier = actors::open_checkpoint_shard(checkpoint, *meta, shard);
    if (!tier) return tier.err();
    STRATA_TRY(first_keys(**tier, meta->partitions, limit - static_cast<uint32_t>(out.size()), out));
  }
  return out;
}

// --- the requests ------------------------------------------------------------

expected<std::vector<wire::table_info>> lookup_service::tables() {
  return error(errc::invalid_argument, "this endpoint does not list its tables");
}

expected<std::vector<uint64_t>> lookup_service::list_keys(const std::string& table, uint32_t) {
  return error(errc::invalid_argument,
               "list keys of table '" + table +
                   "': this endpoint does not list keys (list them from a checkpoint: strata "
                   "keys --checkpoint DIR --table " + table + ")");
}

expected<std::vector<wire::table_info>> serving_service::tables() {
  std::shared_lock tables(tables_mutex_);
  std::vector<wire::table_info> out;
  for (const auto& [name, entry] : tables_) out.push_back({name, entry->dim});
  return out;
}

expected<std::vector<uint64_t>> serving_service::list_keys(const std::string& table,
                                                           uint32_t limit) {
  if (limit == 0 || limit > wire::max_list_keys)
    return error(errc::invalid_argument, "list keys of table '" + table + "': limit " +
                                             std::to_string(limit) + " is outside 1.." +
                                             std::to_string(wire::max_list_keys));
  std::shared_lock tables(tables_mutex_);
  auto entry = find(table);
  if (!entry) return entry.err();
  std::vector<uint64_t> out;
  STRATA_TRY((*entry)->store->list_keys(limit, out));
  return out;
}

expected<std::vector<wire::table_info>> training_gateway::tables() {
  return std::vector<wire::table_info>{{config_.table, config_.layout.dim}};
}

bool answer_metadata_request(lookup_service& service, wire::frame_socket& socket,
                             const wire::frame& request) {
  const uint64_t id = request.header.request;
  std::vector<std::byte> out;
  auto fail = [&](const error& e) {
    wire::encode(out, wire::error_reply{static_cast<uint16_t>(e.code()), e.message()});
    return static_cast<bool>(socket.send(wire::frame_type::error, id, out));
  };
  if (request.header.type == wire::frame_type::tables) {
    if (!request.payload.empty())
      return fail(error(errc::invalid_argument,
                        "tables payload: " + std::to_string(request.payload.size()) +
                            " bytes, expected none"));
    auto tables = service.tables();
    if (!tables) return fail(tables.err());
    wire::encode(out, *tables);
    return static_cast<bool>(socket.send(wire::frame_type::table_list, id, out));
  }
  auto req = wire::decode_list_keys(request.payload);
  if (!req) return fail(req.err());
  auto keys = service.list_keys(req->table, req->limit);
  if (!keys) return fail(keys.err());
  // The service's limit check is its own; the reply never exceeds the request's.
  if (keys->size() > req->limit) keys->resize(req->limit);
  wire::encode_key_list(out, *keys);
  return static_cast<bool>(socket.send(wire::frame_type::key_list, id, out));
}

}  // namespace strata::serving
