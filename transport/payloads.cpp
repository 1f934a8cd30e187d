#include "transport/payloads.hpp"

#include "actors/protocol.hpp"
#include "actors/training_protocol.hpp"
#include "client/wire.hpp"
#include "transport/codec.hpp"

namespace strata::transport {
namespace {

template <class... Ts>
status try_decode(std::span<const std::byte> payload) {
  std::tuple<Ts...> values;
  return std::apply([&](auto&... xs) { return decode_payload(payload, xs...); }, values);
}

}  // namespace

status check_payload_value(const frame_header& header, std::span<const std::byte> payload) {
  using namespace actors;
  switch (header.type) {
    case frame_type::hello:
    case frame_type::hello_ack:
    case frame_type::hello_proof:
    case frame_type::hello_welcome:
    case frame_type::hello_refused:
      return try_decode<hello_payload>(payload);
    case frame_type::heartbeat:
    case frame_type::goodbye:
    case frame_type::shard_drain:
    case frame_type::shard_stats:
    case frame_type::cache_drain:
    case frame_type::cache_stats:
    case frame_type::dense_pull:
    case frame_type::dense_stats:
    case frame_type::worker_stats:
      return try_decode<>(payload);
    case frame_type::shard_checkpoint:  // the epoch only: never a path
    case frame_type::shard_copied:
    case frame_type::shard_fence:
    case frame_type::credit:
      return try_decode<uint64_t>(payload);
    case frame_type::worker_run:
      return try_decode<uint64_t, uint64_t>(payload);
    case frame_type::worker_progress:
      return try_decode<progress_report>(payload);
    case frame_type::serve_lookup:
    case frame_type::serve_prefetch: {
      auto r = wire::decode_key_request(payload);
      if (!r) return r.err();
      return {};
    }
    case frame_type::serve_push: {
      auto r = wire::decode_push(payload);
      if (!r) return r.err();
      return {};
    }
    case frame_type::shard_pull:
    case frame_type::shard_pull_ahead:
    case frame_type::shard_prefetch:
    case frame_type::cache_lookup:
    case frame_type::cache_prefetch:
      return try_decode<std::vector<uint64_t>>(payload);
    case frame_type::shard_push:
    case frame_type::cache_push:
      return try_decode<push_request>(payload);
    case frame_type::cache_pass_start:
    case frame_type::cache_pass_end:
      return try_decode<uint64_t>(payload);
    case frame_type::shard_write_back:
    case frame_type::shard_migrate_in:
      return try_decode<row_batch>(payload);
    case frame_type::shard_tick:
    case frame_type::shard_resend:
    case frame_type::spawn_shard:
    case frame_type::retire_shard:
      return try_decode<uint32_t>(payload);
    case frame_type::shard_migrate:
      return try_decode<migration_wire>(payload);
    case frame_type::shard_commit:
    case frame_type::cache_map:
      return try_decode<routing_wire>(payload);
    case frame_type::worker_rebind:
      return try_decode<std::vector<actor_ref>>(payload);
    case frame_type::dense_push:
      return try_decode<std::vector<float>>(payload);
    case frame_type::echo:
    case frame_type::sink:
      return {};  // opaque bytes
    case frame_type::reply_error:
      return try_decode<std::string>(payload);
    case frame_type::reply: {
      status last = try_decode<pull_reply>(payload);
      for (auto s : {last, try_decode<push_reply>(payload), try_decode<tier_stats>(payload),
                     try_decode<uint64_t>(payload), try_decode<dense_weights>(payload),
                     try_decode<actor_stats>(payload), try_decode<lookup_reply>(payload),
                     try_decode<push_ack>(payload), try_decode<worker_result>(payload),
                     try_decode<migration_stats>(payload), try_decode<row_batch>(payload),
                     try_decode<>(payload)}) {
        if (s) return s;
        last = s;
      }
      return last;
    }
  }
  return error(errc::corrupt_data, "no payload rule for frame type " +
                                       std::to_string(static_cast<uint16_t>(header.type)));
}

}  // namespace strata::transport
