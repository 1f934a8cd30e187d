#include "actors/protocol.hpp"

namespace strata::actors {

void add_message_types(caf::actor_system_config& config) {
  config.add_message_type<row_batch>("strata::row_batch");
  config.add_message_type<pull_reply>("strata::pull_reply");
  config.add_message_type<push_request>("strata::push_request");
  config.add_message_type<push_reply>("strata::push_reply");
  config.add_message_type<push_ack>("strata::push_ack");
  config.add_message_type<lookup_reply>("strata::lookup_reply");
  config.add_message_type<dense_weights>("strata::dense_weights");
  config.add_message_type<latency_snapshot>("strata::latency_snapshot");
  config.add_message_type<tier_stats>("strata::tier_stats");
  config.add_message_type<actor_stats>("strata::actor_stats");
  config.add_message_type<progress_report>("strata::progress_report");
  config.add_message_type<migration_stats>("strata::migration_stats");
  config.add_message_type<routing_table>("strata::routing_table");
  config.add_message_type<migration_order>("strata::migration_order");
  config.add_message_type<std::vector<uint32_t>>("std::vector<uint32_t>");
  config.add_message_type<std::vector<uint64_t>>("std::vector<uint64_t>");
  config.add_message_type<std::vector<float>>("std::vector<float>");
  config.add_message_type<std::vector<uint8_t>>("std::vector<uint8_t>");
}

}  // namespace strata::actors
