// A table's configuration as the tiers see it: layout, optimizer, initializer.
//
// Filled by the composition root (deploy/) from the manifest; tiers never
// parse configuration themselves. Plain values, copyable.
#pragma once

#include <cstdint>
#include <string>

#include "tiers/initializer.hpp"
#include "tiers/optimizer.hpp"
#include "tiers/row.hpp"

namespace strata {

struct table_config {
  std::string name = "default";
  row_layout layout{};
  optimizer_config optimizer{};
  initializer_config initializer{};

  // Writes the initial record of `key` (version `version`, freq/tick 0,
  // weights from the initializer, optimizer state at its starting values).
  void initial_row(uint64_t key, std::byte* record, uint64_t version = 0) const;
};

}  // namespace strata
