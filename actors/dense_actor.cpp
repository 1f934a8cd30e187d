#include "actors/dense_actor.hpp"

#include <caf/all.hpp>
#include <cstring>

#include "tiers/optimizer.hpp"
#include "tiers/row.hpp"

namespace strata::actors {
namespace {

struct dense_state {
  static inline const char* name = "strata.dense";
  row_layout layout;
  optimizer_config optimizer;
  std::vector<std::byte> record;  // [row_meta][weights][m][v][step]
};

}  // namespace

optimizer_config dense_optimizer(const dense_config& config) {
  optimizer_config optimizer;
  optimizer.kind = optimizer_kind::adam;
  optimizer.learning_rate = config.learning_rate;
  optimizer.beta1 = config.beta1;
  optimizer.beta2 = config.beta2;
  optimizer.epsilon = config.epsilon;
  optimizer.l2 = 0.0f;
  return optimizer;
}

size_t dense_record_bytes(size_t weights) {
  return row_layout{static_cast<uint32_t>(weights), optimizer_kind::adam, true}.record_bytes();
}

expected<dense_actor> spawn_dense(caf::actor_system& system, const dense_config& config,
                                  std::vector<float> initial, std::vector<uint8_t> restored,
                                  const std::string& restored_from) {
  if (!restored.empty() && restored.size() != dense_record_bytes(initial.size()))
    return error(errc::format_mismatch,
                 (restored_from.empty() ? std::string("restored dense record") : restored_from) +
                     ": " + std::to_string(restored.size()) + " bytes, the model's " +
                     std::to_string(initial.size()) + " dense weights need a record of " +
                     std::to_string(dense_record_bytes(initial.size())) +
                     " bytes (a checkpoint of another model, or a damaged dense record)");
  auto behavior = [](dense_actor::stateful_pointer<dense_state> self, dense_config cfg,
                     std::vector<float> weights,
                     std::vector<uint8_t> restored) -> dense_actor::behavior_type {
    auto& st = self->state;
    st.layout = row_layout{static_cast<uint32_t>(weights.size()), optimizer_kind::adam, true};
    st.optimizer = dense_optimizer(cfg);
    st.record.assign(st.layout.record_bytes(), std::byte{0});
    if (!restored.empty()) {  // its size was checked before the spawn
      std::memcpy(st.record.data(), restored.data(), restored.size());
    } else {
      std::copy(weights.begin(), weights.end(), weights_of(st.record.data()));
      init_optimizer_state(st.optimizer, st.layout, st.record.data());
    }
    return {
        [self](push_dense_atom, const std::vector<float>& grads) -> caf::result<uint64_t> {
          auto& s = self->state;
          if (grads.size() != s.layout.dim)
            return caf::make_error(caf::sec::invalid_argument,
                                   "push_dense: " + std::to_string(grads.size()) +
                                       " gradients for " + std::to_string(s.layout.dim) +
                                       " dense weights");
          apply_optimizer(s.optimizer, s.layout, s.record.data(), grads.data());
          return uint64_t{adam_step(s.layout, s.record.data())};
        },
        [self](pull_dense_atom) {
          auto& s = self->state;
          dense_weights out;
          out.step = adam_step(s.layout, s.record.data());
          const float* w = weights_of(s.record.data());
          out.weights.assign(w, w + s.layout.dim);
          return out;
        },
        [self](stats_atom) {
          return actor_stats{"dense", 0, static_cast<uint64_t>(self->mailbox().size())};
        },
        [self](checkpoint_atom) {
          const auto& r = self->state.record;
          std::vector<uint8_t> out(r.size());
          std::memcpy(out.data(), r.data(), r.size());
          return out;
        },
    };
  };
  return dense_actor{system.spawn(behavior, config, std::move(initial), std::move(restored))};
}

}  // namespace strata::actors
