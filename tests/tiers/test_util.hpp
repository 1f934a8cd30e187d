// Helpers shared by the tier tests: temporary directories, record builders.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tiers/row.hpp"
#include "tiers/table.hpp"

namespace strata::testing {

// A fresh directory under the system temp dir, removed on destruction.
class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A loopback TCP port that was free a moment ago (bound and closed), for a
// process the test is about to start; chosen below the kernel's ephemeral
// range so that other tests' outgoing connections cannot take it meanwhile.
uint16_t free_port();

// A table with the given dim and optimizer, a normal initializer, seed 7.
table_config make_table(uint32_t dim, optimizer_kind optimizer = optimizer_kind::adagrad);

// The exact-sum table (docs/architecture.md, Semantics: The exact-sum
// test): zeros initializer, SGD with learning rate 1, so a pushed gradient
// of -n adds exactly n.
table_config exact_sum_table(uint32_t dim);

// `count` records of `layout`, the row of key k filled with values derived
// from (k, salt), version = salt + 1.
std::vector<std::byte> make_records(const row_layout& layout, const std::vector<uint64_t>& keys,
                                    uint32_t salt);

}  // namespace strata::testing
