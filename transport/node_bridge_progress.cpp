// Node bridge progress thread: its loop, the heartbeat that detects silent
// peers, marking peers down, shutdown and teardown (node_bridge_impl.hpp).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "transport/node_bridge_impl.hpp"

namespace strata::transport {

void node_bridge::impl::mark_down(peer_state& peer, const std::string& reason,
                                  bool disconnected) {
  std::unordered_map<uint64_t, peer_state::pending> pending;
  {
    std::lock_guard lock(mu_);
    if (peer.down) return;
    peer.down = true;
    peer.up = false;
    peer.down_reason = reason;
    pending.swap(peer.pending_requests);
    peer.outstanding = 0;
  }
  cv_.notify_all();
  ++peers_down;
  // Log what is true: a peer that said goodbye, or whose connection closed
  // once departures were expected (the end of a run), left; this node's
  // own stop is logged once by shutdown(); anything else is a failure.
  if (stop_announced_) {
  } else if (peer.leaving) {
    log("node '" + peer.name + "' left (goodbye)");
  } else if (disconnected && departures_expected_) {
    log("node '" + peer.name + "' left (disconnected at the end)");
  } else {
    log("node '" + peer.name + "' down: " + reason);
  }
  for (auto& c : ep_contexts) {
    if (!c->closed && c->peer == static_cast<int>(peer.index)) schedule_close(c.get());
  }
  peer.ep = nullptr;
  peer.wire_ep = nullptr;
  peer.reorder.clear();
  // Frames waiting for credit are never sent now (their requests fail below).
  peer.held.clear();
  peer.held_for_credit = 0;
  peer.unacked.clear();
  peer.unacked_bytes = 0;
  for (auto& [id, req] : pending) {
    req.handler(error(errc::unavailable, "node '" + peer.name + "' is down (" + reason +
                                             "): request " + std::string(to_string(req.type)) +
                                             " to target " + std::to_string(req.target) +
                                             " failed"));
  }
  if (on_peer) on_peer(peer.name, false, reason);
}

void node_bridge::impl::heartbeat(clock::time_point now) {
  expire_hellos(now);
  std::vector<peer_state*> live;
  {
    std::lock_guard lock(mu_);
    for (auto& p : peers_) {
      if (p->up && !p->down) live.push_back(p.get());
    }
  }
  for (auto* p : live) {
    if (now - p->last_heard > config.heartbeat_timeout) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - p->last_heard).count();
      mark_down(*p, "no frame for " + std::to_string(ms) + " ms (heartbeat timeout " +
                        std::to_string(config.heartbeat_timeout.count()) + " ms)");
      continue;
    }
    send_control(p->ep, frame_type::heartbeat, 0, false, static_cast<int>(p->index));
  }
}

void node_bridge::impl::run() {
  auto next_beat = clock::now() + config.heartbeat_interval;
  auto last_activity = clock::now();
  uint32_t idle_polls = 0;  // bounds the spin when the clock is coarse or the CPU busy
  while (true) {
    {
      std::deque<std::shared_ptr<connect_op>> connects_now;
      bool stop = false;
      {
        std::lock_guard lock(mu_);
        connects_now.swap(connects_queued_);
        stop = stopping_;
      }
      if (stop) break;
      for (auto& op : connects_now) start_connect(op);
    }
    const uint64_t posted_before = posted;
    drain_queue();
    bool active = posted != posted_before;
    while (ucp_worker_progress(worker) != 0) active = true;
    close_scheduled();
    const auto now = clock::now();
    // Credits owed go back credit_delay after the first delivery they
    // cover (past half the window they went at once, in complete()): one
    // credit frame per burst, not one per frame, and never a wake-up of
    // the peer per request.
    if (!credits_owed.empty() && now - credits_owed_since >= credit_delay) flush_credits();
    if (active) {
      last_activity = now;
      idle_polls = 0;
    }
    if (now >= next_beat) {
      heartbeat(now);
      next_beat = now + config.heartbeat_interval;
    }
    // Owed credits (flushed within credit_delay) count as waiting too.
    bool waiting_on_peers = sends_in_flight > 0 || !credits_owed.empty() || now < settle_until;
    {
      std::lock_guard lock(mu_);
      if (!queue_.empty() || !connects_queued_.empty() || stopping_) continue;
      for (auto& p : peers_) waiting_on_peers |= p->outstanding > 0 || p->rndv_in_flight > 0;
    }
    // Spin a little after activity: the next frame of a burst usually
    // follows within microseconds, and a sleep would add a wake-up to
    // each one.
    if (now - last_activity < config.spin_after_activity && ++idle_polls < 1000) continue;
    idle_polls = 0;
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    // Some transports' rendezvous steps do not signal the event fd: with
    // frames in flight, sleep at most 1 ms; idle, until the next heartbeat.
    const auto wait_ms =
        waiting_on_peers
            ? int64_t{1}
            : std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - clock::now())
                      .count() +
                  1;
    std::array<pollfd, 2> fds{pollfd{worker_fd, POLLIN, 0}, pollfd{wake_fd, POLLIN, 0}};
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait_ms, 0)));
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof v);
    }
  }
  shutdown();
}

void node_bridge::impl::shutdown() {
  std::vector<peer_state*> live;
  {
    std::lock_guard lock(mu_);
    for (auto& p : peers_) {
      if (p->up && !p->down) live.push_back(p.get());
    }
  }
  drain_queue();
  const auto deadline = clock::now() + std::chrono::seconds(2);
  // Frames waiting for credit go before the goodbye, which ends the
  // connection at the peer once everything sent before it is delivered.
  auto holding = [&] {
    for (auto* p : live)
      if (!p->down && !p->held.empty()) return true;
    return false;
  };
  while (holding() && clock::now() < deadline) ucp_worker_progress(worker);
  // Peers that went down meanwhile were logged as such.
  std::string names;
  size_t up = 0;
  for (auto* p : live)
    if (!p->down) names += (up++ == 0 ? "'" : ", '") + p->name + "'";
  if (up > 0) log("stopping: goodbye to node" + std::string(up == 1 ? " " : "s ") + names);
  stop_announced_ = true;
  for (auto* p : live)
    send_control(p->ep, frame_type::goodbye, 0, false, static_cast<int>(p->index));
  while (sends_in_flight > 0 && clock::now() < deadline) ucp_worker_progress(worker);
  // Sent is not delivered: frames by worker address can still sit in
  // shared memory when the listener connection's close reaches the peer,
  // which then drops them as late. Wait (same deadline) until the peer
  // credited every frame, or closed its side after our goodbye.
  auto undelivered = [&] {
    for (auto* p : live)
      if (!p->down && p->acked < p->last_posted_seq) return true;
    return false;
  };
  while (undelivered() && clock::now() < deadline) ucp_worker_progress(worker);
  // Nothing credits the goodbye (it is not sequenced): wait (same deadline)
  // until each peer closed its side, which it does once it has read the
  // goodbye. Closing first let our connection's reset overtake the goodbye
  // on the peer (a clean stop logged there as "connection error"). Peers
  // whose goodbye arrives meanwhile are closed at once: two nodes stopping
  // together must not wait for each other.
  auto open = [&] {
    for (auto* p : live)
      if (!p->down) return true;
    return false;
  };
  while (open() && clock::now() < deadline) {
    ucp_worker_progress(worker);
    close_scheduled();
  }
  for (auto& c : ep_contexts) schedule_close(c.get());
  close_scheduled();
  const auto close_deadline = clock::now() + std::chrono::milliseconds(200);
  while (clock::now() < close_deadline) ucp_worker_progress(worker);
  for (auto& p : peers_) mark_down(*p, "this node stopped");
  for (auto& [id, op] : connects) fail_connect_now(op, "this node stopped");
  connects.clear();
}

void node_bridge::impl::destroy() {
  if (listener != nullptr) ucp_listener_destroy(listener);
  if (worker != nullptr) ucp_worker_destroy(worker);
  in_flight.clear();  // no callback runs after the worker is gone
  rndv_pending.clear();
  if (context != nullptr) ucp_cleanup(context);
  if (wake_fd >= 0) ::close(wake_fd);
  listener = nullptr;
  worker = nullptr;
  context = nullptr;
  wake_fd = -1;
}

}  // namespace strata::transport
