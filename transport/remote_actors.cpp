#include "transport/remote_actors.hpp"

#include <cstdio>
#include <functional>
#include <tuple>

#include "actors/error.hpp"
#include "transport/codec.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(strata::transport::frame_ptr)

namespace strata::transport {
namespace {

using frame_atom = caf::atom_constant<caf::atom("frame")>;
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
                          uint32_t target) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  return {
      [=](pull_atom, std::vector<uint64_t>& keys) {
        return forward<pull_reply>(self, frame_type::shard_pull, gather_payload(std::move(keys)));
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
                           uint32_t target) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  auto report_to = std::make_shared<caf::actor>();
  return {
      [=](run_atom, uint64_t batches, uint64_t epoch) {
        *report_to = caf::actor_cast<caf::actor>(self->current_sender());
        return forward<worker_result>(self, frame_type::worker_run, encode_payload(batches, epoch));
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
                          uint32_t target) {
  using namespace actors;
  init_proxy(self, std::move(bridge), std::move(peer), target);
  return {
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

caf::behavior shard_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                          actors::shard_actor shard) {
  using namespace actors;
  return {[=](frame_atom, const frame_ptr& f) {
    auto& b = *bridge;
    switch (f->header.type) {
      case frame_type::shard_pull: {
        std::vector<uint64_t> keys;
        if (decode_request(b, *f, keys))
          relay<pull_reply>(self, bridge, f, shard, pull_atom::value, std::move(keys));
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
                          actors::cache_tier_actor cache) {
  using namespace actors;
  return {[=](frame_atom, const frame_ptr& f) {
    auto& b = *bridge;
    switch (f->header.type) {
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
caf::behavior worker_relay(caf::event_based_actor* self, std::shared_ptr<node_bridge> bridge,
                           actors::worker_actor worker, uint32_t target) {
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
  return t;
}

node_transport::~node_transport() { stop(); }

void node_transport::stop() {
  if (bridge_) bridge_->stop();
  std::lock_guard lock(mu_);
  for (auto& [target, relay] : relays_) caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
  relays_.clear();
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
  auto relay = system_.spawn(shard_relay, bridge_, std::move(shard));
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_dense(uint32_t target, actors::dense_actor dense) {
  auto relay = system_.spawn(dense_relay, bridge_, std::move(dense));
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_cache(uint32_t target, actors::cache_tier_actor cache) {
  auto relay = system_.spawn(cache_relay, bridge_, std::move(cache));
  std::lock_guard lock(mu_);
  relays_[target] = relay;
}

void node_transport::export_worker(uint32_t target, actors::worker_actor worker) {
  auto relay = system_.spawn(worker_relay, bridge_, std::move(worker), target);
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
  return caf::actor_cast<actors::shard_actor>(system_.spawn(shard_proxy, bridge_, peer, target));
}

actors::cache_tier_actor node_transport::remote_cache(const std::string& peer, uint32_t target) {
  return caf::actor_cast<actors::cache_tier_actor>(
      system_.spawn(cache_proxy, bridge_, peer, target));
}

actors::worker_actor node_transport::remote_worker(const std::string& peer, uint32_t target) {
  auto proxy = system_.spawn(worker_proxy, bridge_, peer, target);
  std::lock_guard lock(mu_);
  upstream_[{peer, target}] = proxy;
  return caf::actor_cast<actors::worker_actor>(proxy);
}

actors::dense_actor node_transport::remote_dense(const std::string& peer, uint32_t target) {
  return caf::actor_cast<actors::dense_actor>(system_.spawn(dense_proxy, bridge_, peer, target));
}

}  // namespace strata::transport
