#include "serving/shard_resend.hpp"

#include <chrono>
#include <cstring>
#include <future>
#include <memory>

#include "actors/error.hpp"

namespace strata::serving {

resend_source shard_resend(caf::actor_system& system,
                           std::vector<std::pair<uint32_t, actors::shard_actor>> shards,
                           uint32_t partitions, row_layout layout) {
  // Weak references: the source must not keep the shards alive (an actor
  // system waits for every actor someone still references at its end).
  std::vector<std::pair<uint32_t, caf::weak_actor_ptr>> weak;
  for (auto& [index, shard] : shards)
    weak.emplace_back(index, caf::actor_cast<caf::weak_actor_ptr>(shard));
  return [&system, weak = std::move(weak), partitions, layout](const resend_emit& emit) -> status {
    const size_t record_bytes = layout.record_bytes();
    std::vector<float> weights;
    std::vector<uint64_t> versions;
    for (const auto& [index, ref] : weak) {
      auto strong = ref.lock();
      if (!strong)
        return error(errc::unavailable,
                     "shard " + std::to_string(index) + " has stopped: no resend");
      const auto shard = caf::actor_cast<actors::shard_actor>(std::move(strong));
      for (uint32_t p = 0; p < partitions; ++p) {
        // An event-based actor asks (no blocking actor from this foreign
        // thread); the answer comes back through a promise.
        auto answer = std::make_shared<std::promise<expected<actors::row_batch>>>();
        auto future = answer->get_future();
        system.spawn(
            [answer, shard = shard, p, index = index, &system](caf::event_based_actor* self) {
              self->request(shard, std::chrono::seconds(60), actors::resend_atom::value, p)
                  .then([answer](actors::row_batch& b) { answer->set_value(std::move(b)); },
                        [answer, p, index, &system](caf::error& err) {
                          answer->set_value(
                              error(errc::unavailable, "shard " + std::to_string(index) +
                                                           ", partition " + std::to_string(p) +
                                                           ": " + actors::describe(system, err)));
                        });
            });
        expected<actors::row_batch> got = error(errc::unavailable, "");
        try {
          got = future.get();
        } catch (const std::future_error&) {  // the asking actor died unanswered (a stop)
          return error(errc::unavailable,
                       "shard " + std::to_string(index) + ": no answer to the resend (stopping)");
        }
        if (!got) return got.err();
        actors::row_batch rows = std::move(*got);
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
