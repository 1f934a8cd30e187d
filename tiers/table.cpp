#include "tiers/table.hpp"

namespace strata {

void table_config::initial_row(uint64_t key, std::byte* record, uint64_t version) const {
  meta_of(record) = row_meta{version, 0, 0};
  initialize_weights(initializer, key, weights_of(record), layout.dim);
  init_optimizer_state(optimizer, layout, record);
}

}  // namespace strata
