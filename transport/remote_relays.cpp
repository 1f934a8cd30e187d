// Relays: frames from a peer, decoded and sent to an exported local actor;
// its reply (or error) goes back as a reply frame (remote_actors.hpp).
#include <functional>
#include <optional>

#include "actors/error.hpp"
#include "transport/codec.hpp"
#include "transport/remote_actors_internal.hpp"

namespace strata::transport::remote_detail {

// --- relays (a peer -> an exported local actor) ---------------------------------

void reply_error(node_bridge& bridge, const inbound_frame& f, const std::string& text) {
  if (f.header.request_id != 0) {
    bridge.reply(f.peer, f.header.request_id, frame_type::reply_error, encode_payload(text));
  }
}

template <class... Ts>
bool decode_request(node_bridge& bridge, const inbound_frame& f, Ts&... xs) {
  if (auto s = decode_payload(f.payload, xs...); !s) {
    reply_error(bridge, f,
                "node '" + bridge.name() + "': bad " + std::string(to_string(f.header.type)) +
                    " payload: " + s.err().message());
    return false;
  }
  return true;
}

// Sends the request to `dest` and the answer back as a reply frame.
template <class... Reply, class Handle, class... Args>
void relay(caf::event_based_actor* self, const std::shared_ptr<node_bridge>& bridge,
           const frame_ptr& f, const Handle& dest, Args&&... xs) {
  const std::string peer = f->peer;
  const uint64_t id = f->header.request_id;
  self->request(dest, caf::infinite, std::forward<Args>(xs)...)
      .then(
          [bridge, peer, id](Reply&... rs) {
            // The reply's arrays go out from the reply itself (no encode copy).
            bridge->reply(peer, id, frame_type::reply, gather_payload(std::move(rs)...));
          },
          [self, bridge, peer, id](caf::error& e) {
            bridge->reply(
                peer, id, frame_type::reply_error,
                encode_payload("node '" + bridge->name() + "': " + actors::describe(self->system(), e)));
          });
}

void unsupported(node_bridge& bridge, const inbound_frame& f, const char* kind) {
  reply_error(bridge, f,
              "node '" + bridge.name() + "': target " + std::to_string(f.header.target) + " is a " +
                  kind + ", not a " + std::string(to_string(f.header.type)) + " receiver");
}

// A payload that names shards: decoded, then mapped to this node's handles;
// a ref this node cannot map (unknown node, no such target) is the reply's
// error, naming it.
template <class Wire, class Value>
std::optional<Value> decode_refs(node_bridge& b, const inbound_frame& f, actor_directory& d) {
  Wire wire;
  if (!decode_request(b, f, wire)) return std::nullopt;
  auto value = from_wire(d, std::move(wire));
  if (!value) {
    reply_error(b, f,
                "node '" + b.name() + "': bad " + std::string(to_string(f.header.type)) +
                    " payload: " + value.err().message());
    return std::nullopt;
  }
  return std::move(*value);
}

caf::behavior shard_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::shard_actor shard, std::shared_ptr<actor_directory> directory) {
  using namespace actors;
  return {[=](frame_atom, const frame_ptr& f) {
    auto& b = *bridge;
    switch (f->header.type) {
      case frame_type::shard_migrate:
        if (auto order = decode_refs<migration_wire, migration_order>(b, *f, *directory))
          relay<migration_stats>(self, bridge, f, shard, migrate_atom::value, std::move(*order));
        break;
      case frame_type::shard_fence: {
        uint64_t epoch = 0;
        if (decode_request(b, *f, epoch))
          relay<migration_stats>(self, bridge, f, shard, fence_atom::value, epoch);
        break;
      }
      case frame_type::shard_migrate_in: {
        row_batch rows;
        if (decode_request(b, *f, rows))
          relay<ok_atom>(self, bridge, f, shard, migrate_in_atom::value, std::move(rows));
        break;
      }
      case frame_type::shard_commit:
        if (auto table = decode_refs<routing_wire, routing_table>(b, *f, *directory))
          relay<ok_atom>(self, bridge, f, shard, commit_atom::value, std::move(*table));
        break;
      case frame_type::shard_resend: {
        uint32_t partition = 0;
        if (decode_request(b, *f, partition))
          relay<row_batch>(self, bridge, f, shard, resend_atom::value, partition);
        break;
      }
      case frame_type::shard_pull: {
        std::vector<uint64_t> keys;
        if (decode_request(b, *f, keys))
          relay<pull_reply>(self, bridge, f, shard, pull_atom::value, std::move(keys));
        break;
      }
      case frame_type::shard_pull_ahead: {
        std::vector<uint64_t> keys;
        if (decode_request(b, *f, keys))
          relay<pull_reply>(self, bridge, f, shard, pull_atom::value, prefetch_atom::value,
                            std::move(keys));
        break;
      }
      case frame_type::shard_push: {
        push_request r;
        if (decode_request(b, *f, r))
          relay<push_reply>(self, bridge, f, shard, push_atom::value, std::move(r));
        break;
      }
      case frame_type::shard_write_back: {
        row_batch rows;
        if (decode_request(b, *f, rows)) {
          relay<ok_atom>(self, bridge, f, shard, write_back_atom::value, std::move(rows));
        }
        break;
      }
      case frame_type::shard_prefetch: {
        std::vector<uint64_t> keys;
        if (decode_request(b, *f, keys)) self->send(shard, prefetch_atom::value, std::move(keys));
        break;
      }
      case frame_type::shard_tick: {
        uint32_t tick = 0;
        if (decode_request(b, *f, tick)) self->send(shard, tick_atom::value, tick);
        break;
      }
      case frame_type::shard_drain:
        if (decode_request(b, *f)) relay<ok_atom>(self, bridge, f, shard, drain_atom::value);
        break;
      case frame_type::shard_stats:
        if (decode_request(b, *f)) relay<tier_stats>(self, bridge, f, shard, stats_atom::value);
        break;
      case frame_type::shard_checkpoint: {
        // The epoch alone: the shard derives its directory from its own
        // configuration. A payload with anything after the epoch (the old
        // directory string) is refused as trailing bytes.
        uint64_t epoch = 0;
        if (decode_request(b, *f, epoch))
          relay<ok_atom>(self, bridge, f, shard, checkpoint_atom::value, epoch);
        break;
      }
      case frame_type::shard_copied: {
        uint64_t epoch = 0;
        if (decode_request(b, *f, epoch))
          relay<uint64_t>(self, bridge, f, shard, copied_atom::value, epoch);
        break;
      }
      default:
        unsupported(b, *f, "shard");
    }
  }};
}

caf::behavior cache_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::cache_tier_actor cache, std::shared_ptr<actor_directory> directory) {
  using namespace actors;
  return {[=](frame_atom, const frame_ptr& f) {
    auto& b = *bridge;
    switch (f->header.type) {
      case frame_type::cache_map:
        if (auto table = decode_refs<routing_wire, routing_table>(b, *f, *directory))
          relay<ok_atom>(self, bridge, f, cache, map_atom::value, std::move(*table));
        break;
      case frame_type::cache_lookup: {
        std::vector<uint64_t> keys;
        if (decode_request(b, *f, keys)) {
          relay<lookup_reply>(self, bridge, f, cache, lookup_atom::value, std::move(keys));
        }
        break;
      }
      case frame_type::cache_prefetch: {
        std::vector<uint64_t> keys;
        if (decode_request(b, *f, keys)) self->send(cache, prefetch_atom::value, std::move(keys));
        break;
      }
      case frame_type::cache_push: {
        push_request r;
        if (decode_request(b, *f, r))
          relay<push_ack>(self, bridge, f, cache, push_atom::value, std::move(r));
        break;
      }
      case frame_type::cache_pass_start: {
        uint64_t pass = 0;
        if (decode_request(b, *f, pass))
          relay<ok_atom>(self, bridge, f, cache, pass_start_atom::value, pass);
        break;
      }
      case frame_type::cache_pass_end: {
        uint64_t pass = 0;
        if (decode_request(b, *f, pass))
          relay<ok_atom>(self, bridge, f, cache, pass_end_atom::value, pass);
        break;
      }
      case frame_type::cache_drain:
        if (decode_request(b, *f)) relay<ok_atom>(self, bridge, f, cache, drain_atom::value);
        break;
      case frame_type::cache_stats:
        if (decode_request(b, *f)) relay<tier_stats>(self, bridge, f, cache, stats_atom::value);
        break;
      default:
        unsupported(b, *f, "cache tier");
    }
  }};
}

caf::behavior dense_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::dense_actor dense) {
  using namespace actors;
  return {[=](frame_atom, const frame_ptr& f) {
    auto& b = *bridge;
    switch (f->header.type) {
      case frame_type::dense_push: {
        std::vector<float> grads;
        if (decode_request(b, *f, grads)) {
          relay<uint64_t>(self, bridge, f, dense, push_dense_atom::value, std::move(grads));
        }
        break;
      }
      case frame_type::dense_pull:
        if (decode_request(b, *f))
          relay<dense_weights>(self, bridge, f, dense, pull_dense_atom::value);
        break;
      case frame_type::dense_stats:
        if (decode_request(b, *f)) relay<actor_stats>(self, bridge, f, dense, stats_atom::value);
        break;
      default:
        unsupported(b, *f, "dense actor");
    }
  }};
}

// A worker run by a peer: the relay is the sender of run, so the worker's
// progress reports come here and go back to the runner's node as
// worker_progress frames, before the run's reply (same relay, same peer
// sequence).
// Cache tiers a worker_rebind may name: far above any cluster's, low
// enough that a frame cannot make a node build proxies without bound.
constexpr size_t max_rebind_caches = 4096;

caf::behavior worker_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                           actors::worker_actor worker, uint32_t target,
                           std::shared_ptr<actor_directory> caches) {
  using namespace actors;
  auto runner = std::make_shared<std::string>();
  return {
      [=](frame_atom, const frame_ptr& f) {
        auto& b = *bridge;
        switch (f->header.type) {
          case frame_type::worker_run: {
            uint64_t batches = 0, epoch = 0;
            if (decode_request(b, *f, batches, epoch)) {
              *runner = f->peer;
              relay<worker_result>(self, bridge, f, worker, run_atom::value, batches, epoch);
            }
            break;
          }
          case frame_type::worker_stats:
            if (decode_request(b, *f))
              relay<actor_stats>(self, bridge, f, worker, stats_atom::value);
            break;
          case frame_type::worker_rebind: {
            // Only the node that runs this worker (its coordinator's) may
            // tell it its cache tiers; a worker has a handful of them.
            if (runner->empty() || f->peer != *runner) {
              reply_error(b, *f,
                          "node '" + b.name() + "': worker_rebind from node '" + f->peer +
                              "', which does not run this worker");
              break;
            }
            std::vector<actor_ref> refs;
            if (!decode_request(b, *f, refs)) break;
            if (refs.size() > max_rebind_caches) {
              reply_error(b, *f,
                          "node '" + b.name() + "': worker_rebind names " +
                              std::to_string(refs.size()) + " cache tiers (at most " +
                              std::to_string(max_rebind_caches) + ")");
              break;
            }
            auto handles = actors_of(*caches, refs);
            if (!handles) {
              reply_error(
                  b, *f,
                  "node '" + b.name() + "': bad worker_rebind payload: " + handles.err().message());
              break;
            }
            std::vector<cache_tier_actor> tiers;
            for (const auto& h : *handles) tiers.push_back(caf::actor_cast<cache_tier_actor>(h));
            relay<ok_atom>(self, bridge, f, worker, rebind_atom::value, std::move(tiers));
            break;
          }
          default:
            unsupported(b, *f, "worker");
        }
      },
      [=](progress_atom, const progress_report& report) {
        if (runner->empty()) return;
        // A runner that went down was logged by the bridge; the run's
        // reply fails there anyway.
        (void)bridge->send(*runner, frame_type::worker_progress, target, encode_payload(report));
      },
  };
}

// A node's spawner: spawn and retire run on this actor's thread, in the
// order the frames came; a retire answers once its shard has gone.
caf::behavior spawner_relay(caf::event_based_actor*, std::shared_ptr<node_bridge> bridge,
                            node_transport::spawn_fn spawn, node_transport::retire_fn retire) {
  auto answer = [bridge](const std::string& peer, uint64_t id, const status& s) {
    if (id == 0) return;
    if (s)
      bridge->reply(peer, id, frame_type::reply, {});
    else
      bridge->reply(peer, id, frame_type::reply_error,
                    encode_payload("node '" + bridge->name() + "': " + s.err().message()));
  };
  return {[=](frame_atom, const frame_ptr& f) {
    auto& b = *bridge;
    uint32_t index = 0;
    switch (f->header.type) {
      case frame_type::spawn_shard:
        if (decode_request(b, *f, index)) answer(f->peer, f->header.request_id, spawn(index));
        break;
      case frame_type::retire_shard:
        if (decode_request(b, *f, index)) {
          const std::string peer = f->peer;
          const uint64_t id = f->header.request_id;
          retire(index, [answer, peer, id](status s) { answer(peer, id, s); });
        }
        break;
      default:
        unsupported(b, *f, "spawner");
    }
  }};
}

}  // namespace strata::transport::remote_detail
