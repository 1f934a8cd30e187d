#include "transport/remote_actors.hpp"

#include <cstdio>
#include <functional>
#include <optional>
#include <tuple>

#include "actors/error.hpp"
#include "transport/codec.hpp"
#include "transport/remote_actors_internal.hpp"

namespace strata::transport {
using namespace remote_detail;
namespace {

using reply_atom = caf::atom_constant<caf::atom("rreply")>;
using fail_atom = caf::atom_constant<caf::atom("rfail")>;

// --- proxies (this node -> a remote actor) ------------------------------------

using deliver_fn = void (*)(caf::response_promise&, const inbound_frame&);

struct proxy_state {
  std::shared_ptr<node_bridge> bridge;
  std::string peer;
  uint32_t target = 0;
  uint64_t next_token = 1;
  std::unordered_map<uint64_t, std::pair<caf::response_promise, deliver_fn>> pending;
  static inline const char* name = "remote_proxy";
};
using proxy_actor = caf::stateful_actor<proxy_state>;

// Decodes a reply frame into Reply... and fulfils the promise.
template <class... Reply>
void deliver_decoded(caf::response_promise& rp, const inbound_frame& f) {
  if (f.header.type == frame_type::reply_error) {
    std::string text;
    if (auto s = decode_payload(f.payload, text); !s) text = "undecodable error reply";
    rp.deliver(caf::make_error(caf::sec::runtime_error, text));  // the text names the node
    return;
  }
  std::tuple<Reply...> values;
  auto s = std::apply([&](auto&... xs) { return decode_payload(f.payload, xs...); }, values);
  if (!s) {
    rp.deliver(caf::make_error(caf::sec::runtime_error,
                               "node '" + f.peer + "': bad reply: " + s.err().message()));
    return;
  }
  std::apply([&](auto&... xs) { rp.deliver(std::move(xs)...); }, values);
}

template <class... Reply>
caf::response_promise forward(proxy_actor* self, frame_type type, frame_payload payload) {
  auto rp = self->make_response_promise();
  auto& st = self->state;
  const uint64_t token = st.next_token++;
  auto me = caf::actor_cast<caf::actor>(self);
  auto sent = st.bridge->request(
      st.peer, type, st.target, std::move(payload), [me, token](expected<inbound_frame> r) {
        if (!r) {
          caf::anon_send(me, fail_atom::value, token, r.err().to_string());
        } else {
          caf::anon_send(me, reply_atom::value, token,
                         frame_ptr(std::make_shared<inbound_frame>(std::move(*r))));
        }
      });
  if (!sent) {
    rp.deliver(actors::to_caf(sent.err()));
    return rp;
  }
  st.pending.emplace(token, std::make_pair(rp, &deliver_decoded<Reply...>));
  return rp;
}

// A request whose payload names actors: an encoding error (a handle no
// other node can reach) fails the request here.
template <class Reply, class Wire>
caf::response_promise forward_wire(proxy_actor* self, frame_type type, expected<Wire> wire) {
  if (!wire) {
    auto rp = self->make_response_promise();
    rp.deliver(actors::to_caf(wire.err()));
    return rp;
  }
  return forward<Reply>(self, type, encode_payload(*wire));
}

void one_way(proxy_actor* self, frame_type type, frame_payload payload) {
  auto& st = self->state;
  // A down peer was logged by the bridge; a one-way message has no one to tell.
  (void)st.bridge->send(st.peer, type, st.target, std::move(payload));
}

void init_proxy(proxy_actor* self, std::shared_ptr<node_bridge> bridge, std::string peer,
                uint32_t target) {
  self->state.bridge = std::move(bridge);
  self->state.peer = std::move(peer);
  self->state.target = target;
}

void on_reply(proxy_actor* self, uint64_t token, const frame_ptr& f) {
  auto it = self->state.pending.find(token);
  if (it == self->state.pending.end()) return;
  auto [rp, deliver] = std::move(it->second);
  self->state.pending.erase(it);
  deliver(rp, *f);
}

void on_fail(proxy_actor* self, uint64_t token, const std::string& text) {
  auto it = self->state.pending.find(token);
  if (it == self->state.pending.end()) return;
  auto rp = std::move(it->second.first);
  self->state.pending.erase(it);
  rp.deliver(caf::make_error(caf::sec::runtime_error, text));
}

caf::behavior shard_proxy(proxy_actor* self, std::shared_ptr<node_bridge> bridge, std::string peer,
                          uint32_t target, std::weak_ptr<actor_directory> directory) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  auto gone = [self] {
    return error(errc::unavailable, "node '" + self->state.bridge->name() +
                                        "': the transport is stopped");
  };
  return {
      [=](migrate_atom, const migration_order& order) {
        auto d = directory.lock();
        return forward_wire<migration_stats>(self, frame_type::shard_migrate,
                                             d ? to_wire(*d, order) : expected<migration_wire>(gone()));
      },
      [=](fence_atom, uint64_t epoch) {
        return forward<migration_stats>(self, frame_type::shard_fence, encode_payload(epoch));
      },
      [=](migrate_in_atom, row_batch& rows) {
        return forward<ok_atom>(self, frame_type::shard_migrate_in, gather_payload(std::move(rows)));
      },
      [=](commit_atom, const routing_table& table) {
        auto d = directory.lock();
        return forward_wire<ok_atom>(self, frame_type::shard_commit,
                                     d ? to_wire(*d, table) : expected<routing_wire>(gone()));
      },
      [=](resend_atom, uint32_t partition) {
        return forward<row_batch>(self, frame_type::shard_resend, encode_payload(partition));
      },
      [=](pull_atom, std::vector<uint64_t>& keys) {
        return forward<pull_reply>(self, frame_type::shard_pull, gather_payload(std::move(keys)));
      },
      [=](pull_atom, prefetch_atom, std::vector<uint64_t>& keys) {
        return forward<pull_reply>(self, frame_type::shard_pull_ahead,
                                   gather_payload(std::move(keys)));
      },
      [=](push_atom, push_request& r) {
        return forward<push_reply>(self, frame_type::shard_push, gather_payload(std::move(r)));
      },
      [=](write_back_atom, row_batch& rows) {
        return forward<ok_atom>(self, frame_type::shard_write_back, gather_payload(std::move(rows)));
      },
      [=](prefetch_atom, std::vector<uint64_t>& keys) {
        one_way(self, frame_type::shard_prefetch, gather_payload(std::move(keys)));
      },
      [=](tick_atom, uint32_t tick) {
        one_way(self, frame_type::shard_tick, encode_payload(tick));
      },
      [=](drain_atom) { return forward<ok_atom>(self, frame_type::shard_drain, {}); },
      [=](stats_atom) { return forward<tier_stats>(self, frame_type::shard_stats, {}); },
      [=](checkpoint_atom, uint64_t epoch) {
        return forward<ok_atom>(self, frame_type::shard_checkpoint, encode_payload(epoch));
      },
      [=](copied_atom, uint64_t epoch) {
        return forward<uint64_t>(self, frame_type::shard_copied, encode_payload(epoch));
      },
      [=](reply_atom, uint64_t token, const frame_ptr& f) { on_reply(self, token, f); },
      [=](fail_atom, uint64_t token, const std::string& text) { on_fail(self, token, text); },
  };
}

// A remote worker. Its progress reports arrive as worker_progress frames,
// which node_transport hands to this proxy (registered as the upstream of
// peer/target): through the same mailbox as the run's reply, so they reach
// the runner (the sender of run, a coordinator) before it.
caf::behavior worker_proxy(proxy_actor* self, std::shared_ptr<node_bridge> bridge, std::string peer,
                           uint32_t target, std::weak_ptr<actor_directory> caches) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  auto report_to = std::make_shared<caf::actor>();
  return {
      [=](run_atom, uint64_t batches, uint64_t epoch) {
        *report_to = caf::actor_cast<caf::actor>(self->current_sender());
        return forward<worker_result>(self, frame_type::worker_run, encode_payload(batches, epoch));
      },
      // Its cache tiers travel as refs (node, target): the worker's node
      // maps them to its own cache tiers or proxies.
      [=](rebind_atom, const std::vector<cache_tier_actor>& tiers) {
        auto d = caches.lock();
        if (!d)
          return forward_wire<ok_atom>(self, frame_type::worker_rebind,
                                       expected<std::vector<actor_ref>>(
                                           error(errc::unavailable, "the transport is stopped")));
        std::vector<caf::actor> handles;
        for (const auto& t : tiers) handles.push_back(caf::actor_cast<caf::actor>(t));
        return forward_wire<ok_atom>(self, frame_type::worker_rebind, refs_of(*d, handles));
      },
      [=](stats_atom) { return forward<actor_stats>(self, frame_type::worker_stats, {}); },
      [=](frame_atom, const frame_ptr& f) {
        progress_report report;
        if (auto s = decode_payload(f->payload, report); !s) {
          std::fprintf(stderr, "strata transport: node '%s': bad worker_progress payload: %s\n",
                       f->peer.c_str(), s.err().message().c_str());
          return;
        }
        if (*report_to) self->send(*report_to, progress_atom::value, report);
      },
      [=](reply_atom, uint64_t token, const frame_ptr& f) { on_reply(self, token, f); },
      [=](fail_atom, uint64_t token, const std::string& text) { on_fail(self, token, text); },
  };
}

caf::behavior cache_proxy(proxy_actor* self, std::shared_ptr<node_bridge> bridge, std::string peer,
                          uint32_t target, std::weak_ptr<actor_directory> directory) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  return {
      [=](map_atom, const routing_table& table) {
        auto d = directory.lock();
        return forward_wire<ok_atom>(
            self, frame_type::cache_map,
            d ? to_wire(*d, table)
              : expected<routing_wire>(error(errc::unavailable, "the transport is stopped")));
      },
      [=](lookup_atom, std::vector<uint64_t>& keys) {
        return forward<lookup_reply>(self, frame_type::cache_lookup, gather_payload(std::move(keys)));
      },
      [=](prefetch_atom, std::vector<uint64_t>& keys) {
        one_way(self, frame_type::cache_prefetch, gather_payload(std::move(keys)));
      },
      [=](push_atom, push_request& r) {
        return forward<push_ack>(self, frame_type::cache_push, gather_payload(std::move(r)));
      },
      [=](pass_start_atom, uint64_t pass) {
        return forward<ok_atom>(self, frame_type::cache_pass_start, encode_payload(pass));
      },
      [=](pass_end_atom, uint64_t pass) {
        return forward<ok_atom>(self, frame_type::cache_pass_end, encode_payload(pass));
      },
      [=](drain_atom) { return forward<ok_atom>(self, frame_type::cache_drain, {}); },
      [=](stats_atom) { return forward<tier_stats>(self, frame_type::cache_stats, {}); },
      [=](reply_atom, uint64_t token, const frame_ptr& f) { on_reply(self, token, f); },
      [=](fail_atom, uint64_t token, const std::string& text) { on_fail(self, token, text); },
  };
}

caf::behavior dense_proxy(proxy_actor* self, std::shared_ptr<node_bridge> bridge, std::string peer,
                          uint32_t target) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  return {
      [=](push_dense_atom, std::vector<float>& grads) {
        return forward<uint64_t>(self, frame_type::dense_push, gather_payload(std::move(grads)));
      },
      [=](pull_dense_atom) { return forward<dense_weights>(self, frame_type::dense_pull, {}); },
      [=](stats_atom) { return forward<actor_stats>(self, frame_type::dense_stats, {}); },
      [=](reply_atom, uint64_t token, const frame_ptr& f) { on_reply(self, token, f); },
      [=](fail_atom, uint64_t token, const std::string& text) { on_fail(self, token, text); },
  };
}

}  // namespace

expected<std::unique_ptr<node_transport>> node_transport::start(caf::actor_system& system,
                                                                bridge_config config,
                                                                node_bridge::peer_handler on_peer,
                                                                bool hold_inbound) {
  std::unique_ptr<node_transport> t(new node_transport(system));
  t->holding_ = hold_inbound;
  auto* raw = t.get();
  auto bridge = node_bridge::start(
      std::move(config), [raw](inbound_frame f) { raw->on_inbound(std::move(f)); },
      std::move(on_peer));
  if (!bridge) return bridge.err();
  t->bridge_ = std::shared_ptr<node_bridge>(std::move(*bridge));
  auto* sys = &system;
  auto weak = std::make_shared<std::weak_ptr<actor_directory>>();
  t->directory_ = std::make_shared<actor_directory>(
      t->bridge_, [sys, b = t->bridge_, weak](const std::string& node, uint32_t target) {
        return sys->spawn(shard_proxy, b, node, target, *weak);
      });
  *weak = t->directory_;
  t->cache_directory_ = std::make_shared<actor_directory>(
      t->bridge_,
      [sys, b = t->bridge_, weak](const std::string& node, uint32_t target) {
        return sys->spawn(cache_proxy, b, node, target, *weak);
      },
      "cache tier");
  return t;
}

node_transport::~node_transport() { stop(); }

void node_transport::stop() {
  if (bridge_) bridge_->stop();
  std::lock_guard lock(mu_);
  for (auto& [target, relay] : relays_) caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
  relays_.clear();
  if (directory_) directory_->clear();
  if (cache_directory_) cache_directory_->clear();
  upstream_.clear();
}

void node_transport::on_inbound(inbound_frame frame) {
  // Frames are dispatched under release_mu_, so a release (which sends the
  // held frames first) never lets a newer frame overtake a held one.
  std::lock_guard release_lock(release_mu_);
  {
    std::lock_guard lock(mu_);
    if (holding_) {
      held_.push_back(std::move(frame));
      return;
    }
  }
  dispatch(std::move(frame));
}

void node_transport::release_inbound() {
  std::lock_guard release_lock(release_mu_);
  std::vector<inbound_frame> held;
  {
    std::lock_guard lock(mu_);
    holding_ = false;
    held.swap(held_);
  }
  for (auto& f : held) dispatch(std::move(f));
}

void node_transport::dispatch(inbound_frame frame) {
  caf::actor relay;
  bool echo = false;
  if (frame.header.type == frame_type::worker_progress) {
    caf::actor proxy;
    {
      std::lock_guard lock(mu_);
      if (auto it = upstream_.find({frame.peer, frame.header.target}); it != upstream_.end())
        proxy = it->second;
    }
    if (proxy)
      caf::anon_send(proxy, frame_atom::value,
                     frame_ptr(std::make_shared<inbound_frame>(std::move(frame))));
    return;  // one-way: nobody to tell about a stray report
  }
  notice_fn notice;
  {
    std::lock_guard lock(mu_);
    if (auto it = relays_.find(frame.header.target); it != relays_.end()) relay = it->second;
    echo = echo_targets_.count(frame.header.target) != 0;
    if (auto it = notices_.find(frame.header.target); it != notices_.end()) {
      notice = it->second;
      echo = true;
    }
  }
  if (notice && frame.header.type == frame_type::echo) {
    auto answer = notice(frame.peer, frame.payload);
    if (!answer)
      reply_error(*bridge_, frame, answer.err().message());
    else
      bridge_->reply(frame.peer, frame.header.request_id, frame_type::reply, std::move(*answer));
    return;
  }
  if (echo) {
    if (frame.header.type == frame_type::echo) {
      bridge_->reply(frame.peer, frame.header.request_id, frame_type::reply,
                     std::vector<std::byte>(frame.payload.begin(), frame.payload.end()));
    } else if (frame.header.type != frame_type::sink) {
      unsupported(*bridge_, frame, "echo target");
    }
    return;
  }
  if (!relay) {
    reply_error(*bridge_, frame,
                "node '" + bridge_->name() + "' exports no actor as target " +
                    std::to_string(frame.header.target));
    return;
  }
  caf::anon_send(relay, frame_atom::value,
                 frame_ptr(std::make_shared<inbound_frame>(std::move(frame))));
}

void node_transport::export_shard(uint32_t target, actors::shard_actor shard) {
  directory_->add_local(target, caf::actor_cast<caf::actor>(shard));
  auto relay = system_.spawn(shard_relay, bridge_, std::move(shard), directory_);
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

caf::actor node_transport::unexport_shard(uint32_t target) {
  caf::actor relay;
  {
    std::lock_guard lock(mu_);
    if (auto it = relays_.find(target); it != relays_.end()) {
      relay = std::move(it->second);
      relays_.erase(it);
    }
  }
  if (relay) caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
  return directory_->remove_local(target);
}

void node_transport::export_spawner(uint32_t target, spawn_fn spawn, retire_fn retire) {
  auto relay = system_.spawn(spawner_relay, bridge_, std::move(spawn), std::move(retire));
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_dense(uint32_t target, actors::dense_actor dense) {
  auto relay = system_.spawn(dense_relay, bridge_, std::move(dense));
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_cache(uint32_t target, actors::cache_tier_actor cache) {
  cache_directory_->add_local(target, caf::actor_cast<caf::actor>(cache));
  auto relay = system_.spawn(cache_relay, bridge_, std::move(cache), directory_);
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_worker(uint32_t target, actors::worker_actor worker) {
  auto relay = system_.spawn(worker_relay, bridge_, std::move(worker), target, cache_directory_);
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_notice(uint32_t target, notice_fn notice) {
  std::lock_guard lock(mu_);
  notices_[target] = std::move(notice);
}

void node_transport::export_echo(uint32_t target) {
  std::lock_guard lock(mu_);
  echo_targets_[target] = true;
}

actors::shard_actor node_transport::remote_shard(const std::string& peer, uint32_t target) {
  return caf::actor_cast<actors::shard_actor>(directory_->proxy(peer, target));
}

actors::cache_tier_actor node_transport::remote_cache(const std::string& peer, uint32_t target) {
  return caf::actor_cast<actors::cache_tier_actor>(cache_directory_->proxy(peer, target));
}

actors::worker_actor node_transport::remote_worker(const std::string& peer, uint32_t target) {
  auto proxy = system_.spawn(worker_proxy, bridge_, peer, target,
                             std::weak_ptr<actor_directory>(cache_directory_));
  std::lock_guard lock(mu_);
  upstream_[{peer, target}] = proxy;
  return caf::actor_cast<actors::worker_actor>(proxy);
}

actors::dense_actor node_transport::remote_dense(const std::string& peer, uint32_t target) {
  return caf::actor_cast<actors::dense_actor>(system_.spawn(dense_proxy, bridge_, peer, target));
}

}  // namespace strata::transport
