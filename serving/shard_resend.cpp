#include "serving/shard_resend.hpp"

#include <chrono>
#include <cstring>

#include "actors/error.hpp"

namespace strata::serving {

resend_source shard_resend(caf::actor_system& system,
                           std::vector<std::pair<uint32_t, actors::shard_actor>> shards,
                           uint32_t partitions, row_layout layout) {
  return [&system, shards = std::move(shards), partitions,
          layout](const resend_emit& emit) -> status {
    caf::scoped_actor self{system};
    const size_t record_bytes = layout.record_bytes();
    std::vector<float> weights;
    std::vector<uint64_t> versions;
    for (const auto& [index, shard] : shards) {
      for (uint32_t p = 0; p < partitions; ++p) {
        actors::row_batch rows;
        status result;
        self->request(shard, std::chrono::seconds(60), actors::resend_atom::value, p)
            .receive([&](actors::row_batch& b) { rows = std::move(b); },
                     [&](caf::error& err) {
                       result = error(errc::unavailable, "shard " + std::to_string(index) +
                                                             ", partition " + std::to_string(p) +
                                                             ": " + actors::describe(system, err));
                     });
        if (!result) return result;
        if (rows.keys.empty()) continue;
        if (rows.records.size() != rows.keys.size() * record_bytes)
          return error(errc::corrupt_data, "shard " + std::to_string(index) + ", partition " +
                                               std::to_string(p) + ": resend batch of " +
                                               std::to_string(rows.records.size()) + " bytes for " +
                                               std::to_string(rows.keys.size()) + " rows");
        weights.resize(rows.keys.size() * layout.dim);
        versions.resize(rows.keys.size());
        for (size_t i = 0; i < rows.keys.size(); ++i) {
          const auto* rec =
              reinterpret_cast<const std::byte*>(rows.records.data()) + i * record_bytes;
          versions[i] = meta_of(rec).version;
          std::memcpy(weights.data() + i * layout.dim, weights_of(rec), size_t{4} * layout.dim);
        }
        if (!emit(rows.keys, weights, versions)) return {};  // the subscriber is gone
      }
    }
    return {};
  };
}

}  // namespace strata::serving
