#include "serving/transport_endpoint.hpp"

#include "client/wire.hpp"
#include "transport/codec.hpp"

namespace strata::serving {

using transport::frame_type;

transport_endpoint::transport_endpoint(lookup_service& service, size_t threads)
    : service_(service), threads_count_(threads) {}

transport_endpoint::~transport_endpoint() { stop(); }

status transport_endpoint::start(transport::bridge_config config) {
  auto bridge = transport::node_bridge::start(
      std::move(config), [this](transport::inbound_frame f) {
        if (threads_count_ == 0) return serve(std::move(f));  // on the progress thread
        {
          std::lock_guard lock(mu_);
          if (stopping_) return;
          queue_.push_back(std::move(f));
        }
        cv_.notify_one();
      });
  if (!bridge) return bridge.err();
  bridge_ = std::move(*bridge);
  for (size_t i = 0; i < threads_count_; ++i) threads_.emplace_back([this] { run(); });
  return {};
}

uint16_t transport_endpoint::port() const { return bridge_ ? bridge_->port() : 0; }

void transport_endpoint::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (bridge_) bridge_->stop();
}

void transport_endpoint::run() {
  for (;;) {
    transport::inbound_frame f;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued request answered
      f = std::move(queue_.front());
      queue_.pop_front();
    }
    serve(std::move(f));
  }
}

void transport_endpoint::serve(transport::inbound_frame f) {
  auto fail = [&](const error& e) {
    if (f.header.request_id != 0)
      bridge_->reply(f.peer, f.header.request_id, frame_type::reply_error,
                     transport::encode_payload(bridge_->name() + ": " + e.message()));
  };
  auto ack = [&](size_t n) {
    std::vector<std::byte> out;
    wire::writer(out).u32(static_cast<uint32_t>(n));
    bridge_->reply(f.peer, f.header.request_id, frame_type::reply, std::move(out));
  };
  switch (f.header.type) {
    case frame_type::serve_lookup: {
      auto req = wire::decode_key_request(f.payload);
      if (!req) return fail(req.err());
      lookup_result rows;
      rows.encoded = true;  // the store writes the rows payload: no split, no encode copy
      if (auto ok = service_.lookup(req->table, req->keys, rows); !ok) return fail(ok.err());
      std::vector<std::byte> out;
      if (rows.has_payload())
        out = std::move(rows.payload);
      else
        wire::encode_rows(out, rows.dim, rows.versions, rows.weights);
      bridge_->reply(f.peer, f.header.request_id, frame_type::reply, std::move(out));
      service_.finish_request();
      return;
    }
    case frame_type::serve_prefetch: {
      auto req = wire::decode_key_request(f.payload);
      if (!req) return fail(req.err());
      if (auto ok = service_.prefetch(req->table, req->keys); !ok) return fail(ok.err());
      return ack(req->keys.size());
    }
    case frame_type::serve_push: {
      auto req = wire::decode_push(f.payload);
      if (!req) return fail(req.err());
      if (auto ok = service_.push(req->table, req->dim, req->keys, req->grads, req->id); !ok)
        return fail(ok.err());
      return ack(req->keys.size());
    }
    default:
      return fail(error(errc::invalid_argument,
                        std::string("frame type ") + std::string(transport::to_string(f.header.type)) +
                            " is not a request a serving endpoint answers"));
  }
}

}  // namespace strata::serving
