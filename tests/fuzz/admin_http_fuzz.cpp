// The admin API (deploy/admin_api.hpp) on raw bytes: one request read with
// Beast's parser under the server's body limit, answered by the server's
// own admin_api::handle (or its parse-error answer), as admin_server's
// connection thread does. Behind it is a real actor system with a small
// coordinator that answers every message of coordinator_actor at once
// (a two-node cluster: one shard and one cache tier that report stats;
// scaling above 64 shards is refused), so every route runs to its reply
// without a training cluster. The token is "fuzz-token".
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <caf/all.hpp>
#include <span>
#include <string>

#include "deploy/admin_api.hpp"
#include "tests/fuzz/fuzz_entries.hpp"
#include "tests/fuzz/memory_stream.hpp"

namespace {

using namespace strata;
using namespace strata::actors;
namespace http = boost::beast::http;

coordinator_actor::behavior_type fake_coordinator(coordinator_actor::pointer, caf::actor shard,
                                                  caf::actor cache) {
  return {
      [](run_atom) { return training_summary{}; },
      [](progress_atom, progress_report) {},
      [](checkpoint_atom) { return std::string("checkpoints/ckpt-000001"); },
      [](stop_atom) {},
      [](tick_atom) {},
      [](idle_atom) {},
      [](scale_atom, uint32_t shards) -> caf::result<scale_result> {
        if (shards > 64) return caf::make_error(caf::sec::invalid_argument, "too many shards");
        scale_result r;
        r.shards = shards;
        r.epoch = 2;
        return r;
      },
      [](scale_atom, uint32_t shards, std::vector<std::string>&) -> caf::result<scale_result> {
        if (shards > 64) return caf::make_error(caf::sec::invalid_argument, "too many shards");
        scale_result r;
        r.shards = shards;
        r.epoch = 2;
        return r;
      },
      [](drain_atom, std::vector<uint32_t>&,
         std::vector<std::string>&) -> caf::result<scale_result> {
        return caf::make_error(caf::sec::invalid_argument, "nothing to drain");
      },
      [](relocate_atom, std::vector<uint32_t>&, std::vector<uint32_t>&) -> caf::result<ok_atom> {
        return caf::make_error(caf::sec::invalid_argument, "nothing to relocate");
      },
      [shard, cache](map_atom) {
        cluster_status st;
        st.routing.epoch = 1;
        st.routing.owners = {0, 0, 0, 0};
        st.routing.shards = {shard};
        st.caches = {cache};
        st.state = "training";
        st.workers = 1;
        return st;
      },
      [](stats_atom) {
        return actor_stats{"coordinator", 0, 0};
      },
  };
}

caf::behavior fake_tier(caf::event_based_actor*, std::string kind) {
  return {[kind](stats_atom) {
    tier_stats s;
    s.name = kind + " 0";
    s.kind = kind;
    return s;
  }};
}

struct fixture {
  caf::actor_system_config config;
  caf::actor_system system{config};
  caf::actor shard = system.spawn(fake_tier, std::string("shard"));
  caf::actor cache = system.spawn(fake_tier, std::string("cache"));
  coordinator_actor coordinator = system.spawn(fake_coordinator, shard, cache);
  deploy::admin_api api{
      deploy::admin_config{.bind_address = "127.0.0.1",
                           .port = 0,
                           .token = "fuzz-token",
                           .cluster = "fuzz",
                           .nodes = {{"node-0", "127.0.0.1"}, {"node-1", "10.0.0.2"}},
                           .request_timeout_seconds = 5},
      system, coordinator};
};

}  // namespace

int strata_fuzz_admin_http(const uint8_t* data, size_t size) {
  // Never destroyed: at exit, CAF's own statics (some made lazily by the
  // first request) may already be gone when an actor system is torn down.
  static fixture& f = *new fixture;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  strata::testing::memory_stream stream(bytes, size > 0 && data[0] % 2 ? 7 : 4096);
  boost::beast::flat_buffer buffer;
  http::request_parser<http::string_body> parser;
  parser.body_limit(deploy::admin_max_body_bytes);
  boost::beast::error_code ec;
  http::read(stream, buffer, parser, ec);
  if (!ec) {
    (void)f.api.handle(parser.get());
  } else if (ec != http::error::end_of_stream) {
    (void)deploy::admin_api::malformed(ec);
  }
  return 0;
}
