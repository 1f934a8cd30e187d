// The dense actor: owns the cluster's dense (MLP) weights and their Adam
// state. push_dense(grads) applies one Adam step and answers with the step
// count; pull_dense answers with the weights and the step count.
//
// The weights are kept as one record of the row format (tiers/row.hpp)
// whose dim is the dense size, so the step is exactly the table optimizers'
// Adam (tiers/optimizer.hpp, docs/optimizers.md) — one tested
// implementation, not a second copy. Pushes from several workers are
// applied in arrival order, one step each. State is touched by the actor
// alone.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/config.hpp"
#include "actors/protocol.hpp"
#include "common/error.hpp"

namespace strata::actors {

// Spawns a dense actor starting from `initial` weights (e.g.
// ctr_model::initial_dense()). A push whose size differs from the weights'
// is answered with an error (invalid_argument) and changes nothing.
// `restored`: a record from a checkpoint (checkpoint_atom's answer), used
// instead of `initial`. A restored record whose size is not the layout's
// (a checkpoint of another model, a damaged dense.bin) is refused with an
// error naming `restored_from` and both sizes, never silently replaced by
// the initial weights.
expected<dense_actor> spawn_dense(caf::actor_system& system, const dense_config& config,
                                  std::vector<float> initial, std::vector<uint8_t> restored = {},
                                  const std::string& restored_from = {});

// Bytes of the dense record for `weights` dense weights (weights, Adam m,
// v, step): the size of a checkpoint's dense.bin.
size_t dense_record_bytes(size_t weights);

// The optimizer configuration the dense actor runs (Adam, no L2).
optimizer_config dense_optimizer(const dense_config& config);

}  // namespace strata::actors
