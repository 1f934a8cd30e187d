#include "serving/training_gateway.hpp"

#include <algorithm>
#include <optional>

#include "actors/error.hpp"

namespace strata::serving {
namespace {

error from_caf(caf::actor_system& system, const caf::error& err, const std::string& what) {
  return error(actors::code_of(system, err, errc::unavailable),
               what + ": " + actors::describe(system, err));
}

// The keys each shard owns, with their positions in the request.
struct shard_keys {
  uint32_t shard = 0;
  std::vector<uint32_t> positions;
  std::vector<uint64_t> keys;
};
std::vector<shard_keys> split_by_shard(const actors::partition_map& map,
                                       std::span<const uint64_t> keys) {
  const auto groups = map.group(std::vector<uint64_t>(keys.begin(), keys.end()));
  std::vector<shard_keys> out;
  for (uint32_t s = 0; s < groups.size(); ++s) {
    if (groups[s].empty()) continue;
    shard_keys part{s, groups[s], {}};
    part.keys.reserve(part.positions.size());
    for (uint32_t pos : part.positions) part.keys.push_back(keys[pos]);
    out.push_back(std::move(part));
  }
  return out;
}

// "3 keys: 5, 9, 12" (at most the first 256 listed).
std::string key_list(const std::vector<uint64_t>& keys) {
  constexpr size_t listed = 256;
  std::string out = std::to_string(keys.size()) + (keys.size() == 1 ? " key" : " keys");
  for (size_t i = 0; i < keys.size() && i < listed; ++i)
    out += (i == 0 ? ": " : ", ") + std::to_string(keys[i]);
  if (keys.size() > listed) out += ", ... (" + std::to_string(keys.size() - listed) + " more)";
  return out;
}

// What a push that failed at shard part `failed` did: the parts before it
// were applied, the failed one may or may not have been (a timed-out
// request can still apply), the rest were not sent; and whether a retry is
// safe (a push id).
std::string partial_push(const std::vector<shard_keys>& parts, size_t failed, uint64_t id) {
  std::vector<uint64_t> applied, not_sent;
  std::string applied_shards, not_sent_shards;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i == failed) continue;
    auto& keys = i < failed ? applied : not_sent;
    auto& shards = i < failed ? applied_shards : not_sent_shards;
    keys.insert(keys.end(), parts[i].keys.begin(), parts[i].keys.end());
    shards += (shards.empty() ? "" : ", ") + std::to_string(parts[i].shard);
  }
  std::string out = "; the push was applied only in part (applied: ";
  out += applied.empty() ? std::string("nothing")
                         : "shard" + std::string(failed > 1 ? "s " : " ") + applied_shards + " (" +
                               key_list(applied) + ")";
  out += "; unknown (the failed request may still apply): shard " +
         std::to_string(parts[failed].shard) + " (" + key_list(parts[failed].keys) + ")";
  out += "; not sent: " + (not_sent.empty() ? std::string("nothing")
                                            : "shards " + not_sent_shards + " (" +
                                                  key_list(not_sent) + ")");
  // With an id the shards remember what they applied: the same push may be
  // re-sent whole (the timed-out part, if it landed, is not applied twice).
  if (id != 0)
    out += "); retry the whole push with the same id (" + std::to_string(id) +
           "): each shard applies its part of an id once";
  else
    out +=
        "); re-sending the whole push would apply the applied keys twice (send a push id to "
        "make a retry safe)";
  return out;
}

}  // namespace

training_gateway::training_gateway(caf::actor_system& system,
                                   actors::coordinator_actor coordinator, gateway_config config)
    : system_(system), coordinator_(std::move(coordinator)), config_(std::move(config)) {}

status training_gateway::check(const std::string& table, size_t keys) const {
  if (table != config_.table)
    return error(errc::not_found,
                 "unknown table '" + table + "' (this cluster trains '" + config_.table + "')");
  if (keys > config_.max_request_keys)
    return error(errc::capacity_exceeded, "request of " + std::to_string(keys) +
                                              " keys exceeds the limit of " +
                                              std::to_string(config_.max_request_keys));
  return {};
}

expected<uint64_t> training_gateway::reply_bytes(const std::string& table, size_t n) {
  STRATA_TRY(check(table, n));
  return checked_reply_bytes(table, n, config_.layout.dim, config_.max_reply_bytes);
}

expected<training_gateway::routing> training_gateway::current_routing(caf::scoped_actor& self) {
  {
    std::lock_guard lock(mutex_);
    if (routing_ && std::chrono::steady_clock::now() - refreshed_ < config_.routing_refresh)
      return *routing_;
  }
  std::optional<error> failure;
  routing fresh;
  self->request(coordinator_, config_.map_timeout, actors::map_atom::value)
      .receive(
          [&](actors::cluster_status& st) {
            const auto shards = static_cast<uint32_t>(st.routing.shards.size());
            fresh.map = actors::partition_map(st.routing.epoch, std::move(st.routing.owners), shards);
            for (const auto& s : st.routing.shards)
              fresh.shards.push_back(caf::actor_cast<actors::shard_actor>(s));
          },
          [&](caf::error& e) { failure = from_caf(system_, e, "gateway: the partition map"); });
  if (failure) return *failure;
  std::lock_guard lock(mutex_);
  routing_ = fresh;
  refreshed_ = std::chrono::steady_clock::now();
  return fresh;
}

status training_gateway::lookup(const std::string& table, std::span<const uint64_t> keys,
                                lookup_result& out) {
  if (auto ok = check(table, keys.size()); !ok) return ok;
  const uint32_t dim = config_.layout.dim;
  const size_t record_bytes = config_.layout.record_bytes();
  out.dim = dim;
  out.weights.assign(keys.size() * dim, 0.0f);
  out.versions.assign(keys.size(), 0);
  if (keys.empty()) return {};
  caf::scoped_actor self{system_};
  auto r = current_routing(self);
  if (!r) return r.err();
  std::optional<error> failure;
  for (auto& part : split_by_shard(r->map, keys)) {
    const auto s = part.shard;
    const auto& positions = part.positions;
    self->request(r->shards[s], config_.timeout, actors::pull_atom::value, std::move(part.keys))
        .receive(
            [&](actors::pull_reply& reply) {
              if (reply.rows.records.size() != positions.size() * record_bytes) {
                failure = error(errc::corrupt_data, "gateway: shard " + std::to_string(s) +
                                                        "'s reply does not match the request");
                return;
              }
              const auto* records = reinterpret_cast<const std::byte*>(reply.rows.records.data());
              for (size_t j = 0; j < positions.size(); ++j) {
                const std::byte* rec = records + j * record_bytes;
                const size_t at = positions[j];
                std::copy(weights_of(rec), weights_of(rec) + dim, out.weights.data() + at * dim);
                out.versions[at] = meta_of(rec).version;
              }
            },
            [&](caf::error& e) {
              failure = from_caf(system_, e, "gateway: pull from shard " + std::to_string(s));
            });
    if (failure) return *failure;
  }
  return {};
}

status training_gateway::prefetch(const std::string& table, std::span<const uint64_t> keys) {
  if (auto ok = check(table, keys.size()); !ok) return ok;
  if (keys.empty()) return {};
  caf::scoped_actor self{system_};
  auto r = current_routing(self);
  if (!r) return r.err();
  for (auto& part : split_by_shard(r->map, keys))
    self->send(r->shards[part.shard], actors::prefetch_atom::value, std::move(part.keys));
  return {};
}

status training_gateway::push(const std::string& table, uint32_t dim,
                              std::span<const uint64_t> keys, std::span<const float> grads,
                              uint64_t id) {
  if (auto ok = check(table, keys.size()); !ok) return ok;
  if (!config_.accepts_push)
    return error(errc::invalid_argument,
                 "push to table '" + table +
                     "': this cluster trains in pass mode, where the cache tiers own the rows "
                     "during a pass; client pushes need mode: async");
  if (dim != config_.layout.dim)
    return error(errc::invalid_argument, "push to table '" + table + "': rows of dim " +
                                             std::to_string(dim) + ", the table's dim is " +
                                             std::to_string(config_.layout.dim));
  if (grads.size() != keys.size() * size_t{dim})
    return error(errc::invalid_argument, "push to table '" + table + "': " +
                                             std::to_string(grads.size()) + " gradients for " +
                                             std::to_string(keys.size()) + " keys of dim " +
                                             std::to_string(dim));
  if (keys.empty()) return {};
  // Inside the gate until applied: the final cut waits for this push.
  actors::push_gate::pass inside(config_.pushes.get());
  if (!inside.entered())
    return error(errc::unavailable,
                 "push to table '" + table +
                     "': the cluster is stopping (its final checkpoint and drain are under "
                     "way); pushes are no longer taken");
  caf::scoped_actor self{system_};
  auto r = current_routing(self);
  if (!r) return r.err();
  std::optional<error> failure;
  const auto parts = split_by_shard(r->map, keys);
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& part = parts[i];
    actors::push_request req;
    req.id = id;  // each shard applies its part of this id once
    req.keys = part.keys;
    req.grads.reserve(part.positions.size() * dim);
    for (uint32_t pos : part.positions)
      req.grads.insert(req.grads.end(), grads.begin() + size_t{pos} * dim,
                       grads.begin() + size_t{pos + 1} * dim);
    const auto s = part.shard;
    self->request(r->shards[s], config_.timeout, actors::push_atom::value, std::move(req))
        .receive([](actors::push_reply&) {},
                 [&](caf::error& e) {
                   failure = from_caf(system_, e, "gateway: push to shard " + std::to_string(s));
                 });
    // A push spanning shards can fail part-way: say exactly what was
    // applied, and whether the same push can be re-sent (an id).
    if (failure)
      return error(failure->code(), failure->message() + partial_push(parts, i, id));
  }
  return {};
}

}  // namespace strata::serving
