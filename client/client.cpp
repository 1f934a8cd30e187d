#include "client/client.hpp"

#include <algorithm>
#include <deque>

namespace strata::client {

expected<serving_client> serving_client::connect(client_options options) {
  if (options.replicas.empty())
    return error(errc::invalid_argument, "serving client: no replicas given");
  serving_client c(std::move(options));
  // Connect eagerly to the first replica that answers, so a bad address
  // list fails here rather than at the first lookup.
  for (size_t i = 0; i < c.options_.replicas.size(); ++i) {
    auto s = wire::frame_socket::connect(c.options_.replicas[i], c.options_.timeout);
    if (s) {
      c.socket_ = std::move(*s);
      c.connected_ = true;
      c.current_ = i;
      return c;
    }
  }
  return error(errc::unavailable, "serving client: no replica answers (first: " +
                                      c.options_.replicas.front().to_string() + ")");
}

std::string serving_client::current_replica() const {
  return options_.replicas[current_].to_string();
}

status serving_client::request(wire::frame_type type, std::span<const std::byte> payload,
                               bool idempotent, wire::rows_reply* rows) {
  std::string last_error;
  const size_t n = options_.replicas.size();
  for (size_t attempt = 0; attempt <= n; ++attempt) {
    if (!connected_) {
      auto s = wire::frame_socket::connect(options_.replicas[current_], options_.timeout);
      if (s) {
        socket_ = std::move(*s);
        connected_ = true;
      } else {
        last_error = s.err().message();
      }
    }
    if (connected_) {
      const uint64_t id = next_request_++;
      auto sent = socket_.send(type, id, payload);
      if (sent) {
        auto received = rows ? socket_.receive_rows_into(reply_, *rows)
                             : socket_.receive_into(reply_);
        if (received && reply_.header.request == id) {
          if (reply_.header.type != wire::frame_type::error) return {};
          auto e = wire::decode_error(reply_.payload);
          if (!e) return e.err();
          return error(static_cast<errc>(e->code), current_replica() + ": " + e->message);
        }
        last_error =
            received ? current_replica() + ": reply to another request" : received.err().message();
      } else {
        last_error = sent.err().message();
      }
      socket_ = wire::frame_socket();
      connected_ = false;
      // A push may have been applied before the connection broke: retrying
      // it elsewhere could apply it twice, so the caller decides.
      if (!idempotent)
        return error(errc::unavailable, current_replica() +
                                            ": sent, but no acknowledgement arrived (" +
                                            last_error + "); it may or may not have been applied");
    }
    // Fail over to the next replica.
    current_ = (current_ + 1) % n;
    ++failovers_;
  }
  return error(errc::unavailable, "serving client: every replica failed; last: " + last_error);
}

expected<rows> serving_client::lookup(const std::string& table, std::span<const uint64_t> keys) {
  rows out;
  auto ok = lookup_into(table, keys, out);
  if (!ok) return ok.err();
  return out;
}

status serving_client::lookup_into(const std::string& table, std::span<const uint64_t> keys,
                                   rows& out) {
  payload_.clear();
  wire::writer w(payload_);
  w.text16(table);
  w.u32(static_cast<uint32_t>(keys.size()));
  w.raw(keys.data(), keys.size_bytes());
  // The rows land straight in `out`'s buffers (reused across calls).
  STRATA_TRY(request(wire::frame_type::lookup, payload_, true, &out));
  if (reply_.header.type != wire::frame_type::rows)
    return error(errc::corrupt_data, current_replica() + ": lookup answered with frame type " +
                                         std::to_string(int(reply_.header.type)));
  if (out.versions.size() != keys.size())
    return error(errc::corrupt_data, current_replica() + ": " +
                                         std::to_string(out.versions.size()) + " rows for " +
                                         std::to_string(keys.size()) + " keys");
  return {};
}

status serving_client::lookup_pipelined(
    const std::string& table, std::span<const std::vector<uint64_t>> batches,
    const std::function<status(size_t, const rows&)>& on_rows, size_t depth) {
  constexpr size_t max_unread_request_bytes = 64 * 1024;
  depth = std::max<size_t>(depth, 1);
  struct sent_request {
    uint64_t id;
    size_t bytes;
  };
  std::deque<sent_request> in_flight;
  size_t in_flight_bytes = 0, next_send = 0, next_answer = 0;
  std::string broken;  // why the connection was given up, if it was
  while (next_answer < batches.size() && broken.empty()) {
    if (!connected_) {
      broken = "not connected";
      break;
    }
    // Write what the window allows.
    while (next_send < batches.size() && in_flight.size() < depth) {
      const auto& keys = batches[next_send];
      const size_t bytes = wire::header_bytes + 2 + table.size() + 4 + keys.size() * 8;
      if (!in_flight.empty() && in_flight_bytes + bytes > max_unread_request_bytes) break;
      payload_.clear();
      wire::writer w(payload_);
      w.text16(table);
      w.u32(static_cast<uint32_t>(keys.size()));
      w.raw(keys.data(), keys.size() * 8);
      const uint64_t id = next_request_++;
      if (auto sent = socket_.send(wire::frame_type::lookup, id, payload_); !sent) {
        broken = sent.err().message();
        break;
      }
      in_flight.push_back({id, bytes});
      in_flight_bytes += bytes;
      ++next_send;
    }
    if (!broken.empty() || in_flight.empty()) break;
    // Read the oldest reply.
    auto received = socket_.receive_rows_into(reply_, pipelined_rows_);
    if (!received) {
      broken = received.err().message();
      break;
    }
    if (reply_.header.request != in_flight.front().id) {
      broken = current_replica() + ": reply to another request";
      break;
    }
    // Returning early leaves later replies unread: the connection goes.
    auto drop = [&](error e) {
      socket_ = wire::frame_socket();
      connected_ = false;
      return e;
    };
    if (reply_.header.type == wire::frame_type::error) {
      auto e = wire::decode_error(reply_.payload);
      if (!e) return drop(e.err());
      return drop(error(static_cast<errc>(e->code), current_replica() + ": " + e->message));
    }
    if (reply_.header.type != wire::frame_type::rows ||
        pipelined_rows_.versions.size() != batches[next_answer].size())
      return drop(error(errc::corrupt_data, current_replica() + ": lookup " +
                                           std::to_string(next_answer) + " of " +
                                           std::to_string(batches.size()) +
                                           " answered with frame type " +
                                           std::to_string(int(reply_.header.type)) + " and " +
                                           std::to_string(pipelined_rows_.versions.size()) +
                                           " rows for " +
                                           std::to_string(batches[next_answer].size()) + " keys"));
    in_flight_bytes -= in_flight.front().bytes;
    in_flight.pop_front();
    if (auto ok = on_rows(next_answer, pipelined_rows_); !ok)
      return in_flight.empty() ? ok.err() : drop(ok.err());
    ++next_answer;
  }
  if (!broken.empty() && connected_) {
    // Replies still in flight cannot be matched any more: a new connection.
    socket_ = wire::frame_socket();
    connected_ = false;
  }
  // The rest one at a time, with lookup_into's reconnect and failover.
  for (; next_answer < batches.size(); ++next_answer) {
    STRATA_TRY(lookup_into(table, batches[next_answer], pipelined_rows_));
    STRATA_TRY(on_rows(next_answer, pipelined_rows_));
  }
  return {};
}

status serving_client::prefetch(const std::string& table, std::span<const uint64_t> keys) {
  std::vector<std::byte> payload;
  wire::encode(payload, wire::key_request{table, {keys.begin(), keys.end()}});
  STRATA_TRY(request(wire::frame_type::prefetch, payload));
  if (reply_.header.type != wire::frame_type::ack)
    return error(errc::corrupt_data, current_replica() + ": prefetch not acknowledged");
  return {};
}

status serving_client::push(const std::string& table, std::span<const uint64_t> keys,
                            std::span<const float> grads, uint64_t id) {
  if (keys.empty()) return {};
  if (grads.size() % keys.size() != 0)
    return error(errc::invalid_argument, "push to table '" + table + "': " +
                                             std::to_string(grads.size()) +
                                             " gradients are not a whole row per key (" +
                                             std::to_string(keys.size()) + " keys)");
  const auto dim = static_cast<uint32_t>(grads.size() / keys.size());
  while (id == 0) id = push_ids_();
  last_push_id_ = id;
  payload_.clear();
  wire::encode_push(payload_, table, dim, keys, grads, id);
  // With its id the push is idempotent: a broken connection fails over and
  // re-sends it, and a push the gateway applied only in part (or not at
  // all, unavailable) is re-sent whole; the shards apply each part once.
  status sent;
  for (uint32_t attempt = 0; attempt <= options_.push_retries; ++attempt) {
    sent = request(wire::frame_type::push, payload_, /*idempotent=*/true);
    if (sent || sent.err().code() != errc::unavailable) break;
  }
  if (!sent)
    return error(sent.err().code(), sent.err().message() + " (push id " + std::to_string(id) +
                                        ": re-sending it with this id is safe)");
  if (reply_.header.type != wire::frame_type::ack)
    return error(errc::corrupt_data, current_replica() + ": push not acknowledged");
  return {};
}

expected<std::vector<wire::table_info>> serving_client::tables() {
  STRATA_TRY(request(wire::frame_type::tables, {}));
  if (reply_.header.type != wire::frame_type::table_list)
    return error(errc::corrupt_data, current_replica() + ": tables answered with frame type " +
                                         std::to_string(int(reply_.header.type)));
  auto out = wire::decode_table_list(reply_.payload);
  if (!out) return error(out.err().code(), current_replica() + ": " + out.err().message());
  return out;
}

expected<std::vector<uint64_t>> serving_client::list_keys(const std::string& table,
                                                          uint32_t limit) {
  // Checked here too: the server would refuse it, after a round trip.
  if (limit == 0 || limit > wire::max_list_keys)
    return error(errc::invalid_argument, "list keys of table '" + table + "': limit " +
                                             std::to_string(limit) + " is outside 1.." +
                                             std::to_string(wire::max_list_keys));
  payload_.clear();
  wire::encode(payload_, wire::list_keys_request{table, limit});
  STRATA_TRY(request(wire::frame_type::list_keys, payload_));
  if (reply_.header.type != wire::frame_type::key_list)
    return error(errc::corrupt_data, current_replica() + ": list_keys answered with frame type " +
                                         std::to_string(int(reply_.header.type)));
  auto out = wire::decode_key_list(reply_.payload);
  if (!out) return error(out.err().code(), current_replica() + ": " + out.err().message());
  if (out->size() > limit)
    return error(errc::corrupt_data, current_replica() + ": " + std::to_string(out->size()) +
                                         " keys for a limit of " + std::to_string(limit));
  return out;
}

}  // namespace strata::client
