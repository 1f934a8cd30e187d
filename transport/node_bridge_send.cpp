// Node bridge send path: control frames, posting frames to UCX, their
// completion and the outstanding-bytes window callers wait on
// (node_bridge_impl.hpp).
#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include "transport/node_bridge_impl.hpp"

namespace strata::transport {

void node_bridge::impl::send_control(ucp_ep_h ep, frame_type type, uint64_t request_id,
                                     bool reply_flag, int peer) {
  auto op = std::make_unique<send_op>();
  op->owner = this;
  op->peer = peer < 0 ? 0 : static_cast<uint32_t>(peer);
  frame_header h;
  h.type = type;
  h.sender = node_id;
  h.request_id = request_id;
  seal_pieces(h, op->payload);
  encode_header(h, op->header);
  op->bytes = frame_header_bytes + op->payload.size();
  op->ep_override = ep;
  post(std::move(op), reply_flag, peer < 0 ? nullptr : peers_[peer].get());
}

void node_bridge::impl::on_sent(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<send_op*>(user_data);
  impl* owner = op->owner;
  owner->sent(owner->take_in_flight(op), status);
  ucp_request_free(request);
}

std::unique_ptr<send_op> node_bridge::impl::take_in_flight(send_op* op) {
  auto node = in_flight.extract(op);
  return std::move(node.mapped());
}

void node_bridge::impl::sent(std::unique_ptr<send_op> op, ucs_status_t status) {
  --sends_in_flight;
  if (op->release_when_sent && op->ep_override == nullptr) release(*peers_[op->peer], op->bytes);
  if (status != UCS_OK && status != UCS_ERR_CANCELED && op->ep_override == nullptr) {
    mark_down(*peers_[op->peer], std::string("send failed: ") + ucs_status_string(status),
              /*disconnected=*/true);
  }
  if (op->close_after) close_connection(context_of(op->ep_override), "hello refused");
}

void node_bridge::impl::release(peer_state& p, uint64_t bytes) {
  {
    std::lock_guard lock(mu_);
    p.outstanding -= std::min(p.outstanding, bytes);
  }
  cv_.notify_all();
}

void node_bridge::impl::post(std::unique_ptr<send_op> op, bool reply_flag, peer_state* peer) {
  ucp_ep_h ep = op->ep_override != nullptr ? op->ep_override : (peer ? peer->ep : nullptr);
  if (ep == nullptr) {
    if (op->release_when_sent && op->ep_override == nullptr && peer) release(*peer, op->bytes);
    return;
  }
  if (peer != nullptr) {
    peer->bytes_sent += op->bytes;
    ++peer->frames_sent;
  }
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  // Every frame carries the reply flag: the receiver attributes it by the
  // endpoint it came over (membership, docs/multi-node.md).
  (void)reply_flag;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  p.cb.send = &impl::on_sent;
  p.user_data = op.get();
  ++sends_in_flight;
  ++posted;
  auto* raw = op.get();
  in_flight.emplace(raw, std::move(op));
  const void* buffer = raw->payload.inline_bytes().data();
  size_t count = raw->payload.size();
  if (!raw->payload.contiguous()) {
    // Header, then the payload's pieces straight from the message: no
    // encode copy (frame_payload.hpp); UCX copies or fetches them once.
    raw->payload.for_each_piece([raw](const std::byte* data, size_t n) {
      raw->iov.push_back({const_cast<std::byte*>(data), n});
    });
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = ucp_dt_make_iov();
    buffer = raw->iov.data();
    count = raw->iov.size();
  }
  auto* r = ucp_am_send_nbx(ep, am_id, raw->header.data(), raw->header.size(), buffer, count, &p);
  if (r == nullptr) {
    sent(take_in_flight(raw), UCS_OK);
  } else if (UCS_PTR_IS_ERR(r)) {
    sent(take_in_flight(raw), UCS_PTR_STATUS(r));
  }
}

void node_bridge::impl::drain_queue() {
  std::deque<std::unique_ptr<send_op>> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(queue_);
  }
  for (auto& op : batch) {
    auto& peer = *peers_[op->peer];
    if (peer.down) {  // went down meanwhile: post() releases the bytes
      post(std::move(op), false, &peer);
      continue;
    }
    // Out of credit: the frame waits here, behind any earlier one, until
    // the peer's credits return (on_credit). Nothing is dropped.
    if (!peer.held.empty() || !has_credit(peer, *op)) {
      ++peer.credit_waits;
      peer.held.push_back(std::move(op));
      peer.held_for_credit = peer.held.size();
      continue;
    }
    post_sequenced(peer, std::move(op));
  }
}

bool node_bridge::impl::has_credit(const peer_state& p, const send_op& op) const {
  return op.seq <= p.acked + config.credit_frames &&
         (p.unacked.empty() || p.unacked_bytes + op.bytes <= config.credit_bytes);
}

void node_bridge::impl::post_sequenced(peer_state& p, std::unique_ptr<send_op> op) {
  p.unacked.emplace_back(op->seq, op->bytes);
  p.unacked_bytes += op->bytes;
  p.last_posted_seq = op->seq;
  post(std::move(op), false, &p);
}

void node_bridge::impl::on_credit(peer_state& p, std::span<const std::byte> payload) {
  uint64_t through = 0;
  if (auto s = decode_payload(payload, through); !s)
    return reject(&p, "bad credit payload: " + s.err().message());
  if (through > p.last_posted_seq)
    return reject(&p, "credit up to seq " + std::to_string(through) + ", but only up to " +
                          std::to_string(p.last_posted_seq) + " was sent");
  if (through <= p.acked) return;  // an older credit
  p.acked = through;
  while (!p.unacked.empty() && p.unacked.front().first <= through) {
    p.unacked_bytes -= p.unacked.front().second;
    p.unacked.pop_front();
  }
  while (!p.held.empty() && has_credit(p, *p.held.front())) {
    auto op = std::move(p.held.front());
    p.held.pop_front();
    post_sequenced(p, std::move(op));
  }
  p.held_for_credit = p.held.size();
}

void node_bridge::impl::send_credit(peer_state& p) {
  const uint64_t through = p.next_deliver - 1;
  p.window_frames -= std::min(p.window_frames, p.delivered_frames);
  p.window_bytes -= std::min(p.window_bytes, p.delivered_bytes);
  p.delivered_frames = p.delivered_bytes = 0;
  p.credited = through;
  if (p.ep == nullptr) return;
  auto op = std::make_unique<send_op>();
  op->owner = this;
  op->peer = p.index;
  op->payload = encode_payload(through);
  frame_header h;
  h.type = frame_type::credit;
  h.sender = node_id;
  seal_pieces(h, op->payload);
  encode_header(h, op->header);
  op->bytes = frame_header_bytes + op->payload.size();
  op->ep_override = p.ep;
  post(std::move(op), false, &p);
}

void node_bridge::impl::flush_credits() {
  auto owed = std::move(credits_owed);
  credits_owed.clear();
  for (uint32_t index : owed) {
    auto& p = *peers_[index];
    p.credit_owed = false;
    if (!p.down && p.delivered_frames > 0) send_credit(p);
  }
}

status node_bridge::impl::enqueue(const std::string& name, frame_type type, uint32_t target,
                                  uint64_t request_id, frame_payload payload,
                                  reply_handler on_reply) {
  auto op = std::make_unique<send_op>();
  op->owner = this;
  op->payload = std::move(payload);
  op->bytes = frame_header_bytes + op->payload.size();
  op->release_when_sent = !on_reply;
  const bool is_reply = type == frame_type::reply || type == frame_type::reply_error;
  if (!is_reply && std::this_thread::get_id() == thread.get_id()) {
    // Waiting for window space here would wait for this very thread.
    return error(errc::invalid_argument,
                 "node '" + config.node_name + "': " + std::string(to_string(type)) +
                     " sent from a transport handler; handlers may only reply or hand off");
  }
  {
    std::unique_lock lock(mu_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return error(errc::not_found, "no connection to node '" + name + "'");
    }
    auto& peer = *peers_[it->second];
    while (!is_reply && !peer.down && !stopping_ && peer.outstanding > 0 &&
           peer.outstanding + op->bytes > config.max_outstanding_bytes) {
      ++peer.blocked_senders;
      cv_.wait(lock);
      --peer.blocked_senders;
    }
    // A handler's reply still goes out while this node stops: the progress
    // thread runs the handler, so its shutdown (which sends the queue
    // first) comes after it. A member told `finished` stops at once; its
    // acknowledgement was dropped when its stop won the race.
    const bool handler_reply = is_reply && std::this_thread::get_id() == thread.get_id();
    if (peer.down || (stopping_ && !handler_reply)) {
      return error(errc::unavailable, "node '" + name + "' is down (" +
                                          (stopping_ ? "this node stopped" : peer.down_reason) +
                                          "): " + std::string(to_string(type)) + " to target " +
                                          std::to_string(target) + " not sent");
    }
    frame_header h;
    h.type = type;
    h.sender = node_id;
    h.seq = peer.next_seq++;
    op->seq = h.seq;
    h.request_id = request_id != 0 ? request_id : (on_reply ? next_request_id_++ : 0);
    h.target = target;
    seal_pieces(h, op->payload);
    if (config.outgoing_fault) {  // a test seam: it rewrites the frame in one buffer
      auto bytes = op->payload.flatten();
      config.outgoing_fault(h, bytes);
      op->payload = std::move(bytes);
    }
    encode_header(h, op->header);
    op->peer = peer.index;
    peer.outstanding += op->bytes;
    if (on_reply) {
      peer.pending_requests.emplace(
          h.request_id, peer_state::pending{std::move(on_reply), op->bytes, type, target});
    }
    queue_.push_back(std::move(op));
  }
  wake();
  return {};
}

}  // namespace strata::transport
