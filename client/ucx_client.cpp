#include "client/ucx_client.hpp"

#include <unistd.h>

#include <atomic>
#include <future>

#include "client/wire.hpp"
#include "transport/codec.hpp"
#include "transport/node_bridge.hpp"

namespace strata::client {

using transport::frame_type;

ucx_client::~ucx_client() {
  if (bridge_) bridge_->stop();
}

expected<std::unique_ptr<ucx_client>> ucx_client::connect(const wire::endpoint& endpoint,
                                                          std::chrono::milliseconds timeout) {
  static std::atomic<uint32_t> clients{0};
  std::unique_ptr<ucx_client> c(new ucx_client);
  c->timeout_ = timeout;
  transport::bridge_config bc;
  // Unique among the server's peers: pid and a per-process counter.
  bc.node_name = "client-" + std::to_string(::getpid()) + "-" + std::to_string(clients++);
  // A client waits for its replies: poll a while before sleeping.
  bc.spin_after_activity = std::chrono::microseconds(500);
  auto bridge = transport::node_bridge::start(bc, [](transport::inbound_frame) {});
  if (!bridge) return bridge.err();
  c->bridge_ = std::move(*bridge);
  auto peer = c->bridge_->connect(endpoint.host, endpoint.port, timeout);
  if (!peer) return peer.err();
  c->server_ = *peer;
  return c;
}

expected<std::vector<std::byte>> ucx_client::call(int type, std::vector<std::byte> payload) {
  auto answer = std::make_shared<std::promise<expected<transport::inbound_frame>>>();
  auto future = answer->get_future();
  auto sent = bridge_->request(server_, static_cast<frame_type>(type), 0, std::move(payload),
                               [answer](expected<transport::inbound_frame> r) {
                                 answer->set_value(std::move(r));
                               });
  if (!sent) return sent.err();
  if (future.wait_for(timeout_) != std::future_status::ready)
    return error(errc::unavailable, "node '" + server_ + "': no answer within " +
                                        std::to_string(timeout_.count()) + " ms");
  auto reply = future.get();
  if (!reply) return reply.err();
  if (reply->header.type == frame_type::reply_error) {
    std::string text;
    if (auto s = transport::decode_payload(reply->payload, text); !s) text = "undecodable error";
    return error(errc::invalid_argument, text);
  }
  return std::vector<std::byte>(reply->payload.begin(), reply->payload.end());
}

status ucx_client::lookup_into(const std::string& table, std::span<const uint64_t> keys,
                               rows& out) {
  std::vector<std::byte> payload;
  wire::encode(payload, wire::key_request{table, {keys.begin(), keys.end()}});
  auto reply = call(static_cast<int>(frame_type::serve_lookup), std::move(payload));
  if (!reply) return reply.err();
  STRATA_TRY(wire::decode_rows_into(*reply, out));
  if (out.versions.size() != keys.size())
    return error(errc::corrupt_data, "node '" + server_ + "': " +
                                         std::to_string(out.versions.size()) + " rows for " +
                                         std::to_string(keys.size()) + " keys");
  return {};
}

status ucx_client::prefetch(const std::string& table, std::span<const uint64_t> keys) {
  std::vector<std::byte> payload;
  wire::encode(payload, wire::key_request{table, {keys.begin(), keys.end()}});
  auto reply = call(static_cast<int>(frame_type::serve_prefetch), std::move(payload));
  if (!reply) return reply.err();
  return {};
}

status ucx_client::push(const std::string& table, std::span<const uint64_t> keys,
                        std::span<const float> grads, uint64_t id) {
  if (keys.empty()) return {};
  if (grads.size() % keys.size() != 0)
    return error(errc::invalid_argument, "push to table '" + table + "': " +
                                             std::to_string(grads.size()) +
                                             " gradients are not a whole row per key");
  std::vector<std::byte> payload;
  wire::encode_push(payload, table, static_cast<uint32_t>(grads.size() / keys.size()), keys,
                    grads, id);
  auto reply = call(static_cast<int>(frame_type::serve_push), std::move(payload));
  if (!reply) return reply.err();
  return {};
}

}  // namespace strata::client
