// Node bridge receive path: active messages, rendezvous receives, in-order
// delivery, replies to pending requests and rejected frames
// (node_bridge_impl.hpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "common/crc32c.hpp"
#include "transport/node_bridge_impl.hpp"

namespace strata::transport {

ucs_status_t node_bridge::impl::on_am(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  static_cast<impl*>(arg)->received(header, header_length, data, length, param);
  return UCS_OK;
}

void node_bridge::impl::reject(peer_state* peer, const std::string& reason) {
  if (peer == nullptr) {
    ++rejected_unknown;
    log("rejected a frame from an unknown sender: " + reason);
    return;
  }
  ++peer->rejected;
  log("rejected a frame from node '" + peer->name + "': " + reason + "; closing the connection");
  mark_down(*peer, "rejected frame: " + reason);
}

std::unique_ptr<node_bridge::impl::rndv_context> node_bridge::impl::take_rndv(rndv_context* ctx) {
  auto node = rndv_pending.extract(ctx);
  return std::move(node.mapped());
}

void node_bridge::impl::on_rndv_done(void* request, ucs_status_t status, size_t, void* user_data) {
  auto* raw = static_cast<rndv_context*>(user_data);
  std::unique_ptr<rndv_context> ctx = raw->owner->take_rndv(raw);
  auto& peer = *ctx->owner->peers_[ctx->peer];
  --peer.rndv_in_flight;
  if (status != UCS_OK) {
    ctx->owner->mark_down(peer, std::string("receive failed: ") + ucs_status_string(status),
                          /*disconnected=*/true);
  } else {
    ctx->owner->complete(peer, ctx->header, std::move(ctx->payload));
  }
  ucp_request_free(request);
}

void node_bridge::impl::received(const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  const std::span<const std::byte> hbytes(static_cast<const std::byte*>(header), header_length);
  auto h = check_arrival(hbytes, length, config.max_payload_bytes);
  // Membership: a frame is from the peer its endpoint authenticated as
  // (every frame is sent with UCX's reply flag, so reply_ep is the
  // endpoint it came over), never from the header's sender field, which
  // anyone can copy (docs/multi-node.md, "Membership").
  const ucp_ep_h reply_ep =
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  const bool handshake = h && (h->type == frame_type::hello || h->type == frame_type::hello_ack ||
                               h->type == frame_type::hello_proof ||
                               h->type == frame_type::hello_welcome ||
                               h->type == frame_type::hello_refused);
  peer_state* peer = handshake ? nullptr : peer_of(reply_ep);
  if (!handshake && peer == nullptr) {
    // Dropped unread (a rendezvous payload is never fetched); logged at
    // powers of two so that a flood cannot flood the log.
    const uint64_t n = ++unauthenticated;
    if ((n & (n - 1)) == 0)
      log("dropped a frame from an endpoint that has not authenticated as a member (" +
          std::to_string(n) + " so far)");
    return;
  }
  if (!h) return reject(peer, h.err().message());
  if (handshake) {
    if (rndv) return reject(nullptr, "hello by rendezvous");
    // A hello is a few hundred bytes: a larger one is refused unread.
    if (length > 64 * 1024)
      return reject(nullptr, "hello of " + std::to_string(length) + " bytes (at most 65536)");
    std::vector<std::byte> payload(static_cast<std::byte*>(data),
                                   static_cast<std::byte*>(data) + length);
    if (auto s = check_payload(*h, payload); !s) return reject(nullptr, s.err().message());
    return handle_hello(*h, payload, reply_ep);
  }
  if (peer->down) return;  // late frames of a closed connection
  if (h->sender != peer->node_id)
    return reject(peer, "sender id " + std::to_string(h->sender) + " is not node '" + peer->name +
                            "''s id (the endpoint it came over is)");
  // Flow control: checked before a rendezvous buffer is allocated.
  if (is_sequenced(h->type) && !admit(*peer, *h, length)) return;
  if (rndv) {
    auto ctx = std::make_unique<rndv_context>();
    ctx->owner = this;
    ctx->peer = peer->index;
    ctx->header = *h;
    ctx->payload.resize(length);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &impl::on_rndv_done;
    p.user_data = ctx.get();
    ++peer->rndv_in_flight;
    ++peer->rndv_received;
    auto* raw = ctx.get();
    rndv_pending.emplace(raw, std::move(ctx));
    auto* r = ucp_am_recv_data_nbx(worker, data, raw->payload.data(), length, &p);
    if (r == nullptr) {
      std::unique_ptr<rndv_context> done = take_rndv(raw);
      --peer->rndv_in_flight;
      complete(*peer, done->header, std::move(done->payload));
    } else if (UCS_PTR_IS_ERR(r)) {
      std::unique_ptr<rndv_context> done = take_rndv(raw);
      --peer->rndv_in_flight;
      mark_down(*peer, std::string("receive failed: ") + ucs_status_string(UCS_PTR_STATUS(r)),
                /*disconnected=*/true);
    }
    return;
  }
  // Eager: copied out of UCX's buffer in chunks, each checksummed while
  // it is in cache; a frame whose checksum is wrong is refused before any
  // of its bytes is used (the lengths were checked by check_arrival).
  // 256 KiB: smaller chunks measured slower (16 KiB: 15-25%, each CRC call
  // combines its three chains), and an eager frame is one chunk.
  payload_bytes payload;
  payload.resize(length);
  const auto* in = static_cast<const std::byte*>(data);
  uint32_t crc = header_crc(*h);
  constexpr size_t chunk = size_t{256} << 10;
  for (size_t off = 0; off < length; off += chunk) {
    const size_t n = std::min(chunk, length - off);
    std::memcpy(payload.data() + off, in + off, n);
    crc = crc32c_extend(crc, payload.data() + off, n);
  }
  if (auto s = check_crc(*h, crc); !s) return reject(peer, s.err().message());
  complete(*peer, *h, std::move(payload), /*checked=*/true);
}

bool node_bridge::impl::admit(peer_state& peer, const frame_header& h, size_t length) {
  // A sender that keeps to its credit never gets here with a frame above
  // the window: its credit (acked) is never above ours (credited), so it
  // posted seq <= credited + credit_frames, and the frames held above our
  // credit were all unacked there together (bytes within credit_bytes,
  // unless one frame went alone).
  const uint64_t bytes = frame_header_bytes + length;
  std::string why;
  if (h.seq > peer.credited + config.credit_frames) {
    why = "frame seq " + std::to_string(h.seq) + " is beyond the credit window (delivered and " +
          "credited up to seq " + std::to_string(peer.credited) + ", window " +
          std::to_string(config.credit_frames) + " frames)";
  } else if (peer.window_frames > 0 && peer.window_bytes + bytes > config.credit_bytes) {
    why = "frame seq " + std::to_string(h.seq) + " of " + std::to_string(bytes) +
          " bytes exceeds the credit window (" + std::to_string(peer.window_bytes) + " bytes in " +
          std::to_string(peer.window_frames) + " frames not yet credited, window " +
          std::to_string(config.credit_bytes) + " bytes)";
  }
  if (!why.empty()) {
    ++peer.window_violations;
    reject(&peer, "flow control: " + why);
    return false;
  }
  ++peer.window_frames;
  peer.window_bytes += bytes;
  if (peer.window_frames > peer.window_peak_frames) peer.window_peak_frames = peer.window_frames;
  if (peer.window_bytes > peer.window_peak_bytes) peer.window_peak_bytes = peer.window_bytes;
  return true;
}

void node_bridge::impl::complete(peer_state& peer, const frame_header& h, payload_bytes payload,
                                 bool checked) {
  if (peer.down) return;
  if (!checked) {
    if (auto s = check_payload(h, payload); !s) return reject(&peer, s.err().message());
  }
  peer.last_heard = clock::now();
  if (peer.transports.empty() && peer.ep != nullptr) {
    // Lanes are final once the peer answered over them.
    auto lanes = lanes_of(peer.ep);
    std::lock_guard lock(mu_);
    peer.transports = std::move(lanes);
  }
  peer.bytes_received += frame_header_bytes + payload.size();
  ++peer.frames_received;
  if (!is_sequenced(h.type)) {
    if (h.type == frame_type::goodbye) {
      peer.leaving = true;
      maybe_leave(peer);
    } else if (h.type == frame_type::credit) {
      on_credit(peer, payload);
    }
    return;  // heartbeat: last_heard is all it does
  }
  if (h.seq < peer.next_deliver || peer.reorder.count(h.seq) != 0) {
    return reject(&peer, "duplicate frame seq " + std::to_string(h.seq));
  }
  peer.reorder.emplace(h.seq, inbound_frame{peer.name, h, std::move(payload)});
  if (peer.reorder.size() > peer.reorder_peak) peer.reorder_peak = peer.reorder.size();
  const uint64_t delivered_before = peer.delivered_frames;
  while (!peer.reorder.empty() && peer.reorder.begin()->first == peer.next_deliver) {
    auto frame = std::move(peer.reorder.begin()->second);
    peer.reorder.erase(peer.reorder.begin());
    ++peer.next_deliver;
    ++peer.delivered_frames;
    peer.delivered_bytes += frame_header_bytes + frame.payload.size();
    deliver(peer, std::move(frame));
    if (peer.down) return;
  }
  // Credits go back at once past half the window, otherwise credit_delay
  // later (flush_credits, from the progress loop): one credit frame per
  // burst, and a sender waiting for credit always gets it.
  if (peer.delivered_frames * 2 >= config.credit_frames ||
      peer.delivered_bytes * 2 >= config.credit_bytes) {
    send_credit(peer);
  } else if (peer.delivered_frames > delivered_before && !peer.credit_owed) {
    peer.credit_owed = true;
    if (credits_owed.empty()) credits_owed_since = clock::now();
    credits_owed.push_back(peer.index);
  }
  maybe_leave(peer);
}

void node_bridge::impl::maybe_leave(peer_state& peer) {
  if (peer.leaving && peer.reorder.empty() && peer.rndv_in_flight == 0) {
    mark_down(peer, "node left (goodbye)");
  }
}

void node_bridge::impl::deliver(peer_state& peer, inbound_frame frame) {
  const auto type = frame.header.type;
  if (type == frame_type::reply || type == frame_type::reply_error) {
    std::optional<peer_state::pending> req;
    {
      std::lock_guard lock(mu_);
      auto it = peer.pending_requests.find(frame.header.request_id);
      if (it != peer.pending_requests.end()) {
        req = std::move(it->second);
        peer.pending_requests.erase(it);
        peer.outstanding -= std::min(peer.outstanding, req->bytes);
      }
    }
    cv_.notify_all();
    if (!req) {
      return reject(&peer, "reply to unknown request " + std::to_string(frame.header.request_id));
    }
    req->handler(std::move(frame));
    return;
  }
  if (on_inbound) on_inbound(std::move(frame));
}

std::string node_bridge::impl::lanes_of(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  if (out == nullptr) return {};
  ucp_ep_print_info(ep, out);
  std::fclose(out);
  std::string info(text, size);
  std::free(text);
  // Lines like "lane[1]:  1:tcp/lo.0 md[1] -> ..." ("lane[0]: cm rdmacm" has no transport).
  std::string lanes;
  std::istringstream lines(info);
  for (std::string line; std::getline(lines, line);) {
    const size_t lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    std::istringstream words(line.substr(line.find("]:", lane) + 2));
    std::string first;
    words >> first;
    const size_t colon = first.find(':');
    if (colon == std::string::npos) continue;
    const auto name = first.substr(colon + 1);
    if (lanes.find(name) == std::string::npos) lanes += (lanes.empty() ? "" : ",") + name;
  }
  return lanes;
}

}  // namespace strata::transport
