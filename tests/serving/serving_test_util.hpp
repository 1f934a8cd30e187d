// Helpers of the serving tests: a real checkpoint directory written with
// the checkpoint format's own pieces (LMDB shard copies, CHECKPOINT, FILES),
// and the rows it holds, to compare served rows against bit for bit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "serving/binary_server.hpp"
#include "serving/service.hpp"
#include "serving/serving_store.hpp"
#include "tests/tiers/test_util.hpp"
#include "tiers/row.hpp"

namespace strata::testing {

struct checkpoint_rows {
  uint32_t dim = 0;
  std::map<uint64_t, std::vector<float>> weights;  // key -> dim floats
  std::map<uint64_t, uint64_t> versions;
  std::map<uint64_t, uint32_t> freqs;
  std::vector<uint64_t> keys;  // ascending
};

// Writes checkpoint `dir` (ckpt-... layout) of table `table` with `rows`
// keys (1000, 1003, 1006, ...) over `shards` shard copies, Adagrad state
// included (serving must drop it), versions of incarnation `incarnation`.
// Key i's freq is i % 97 (the warm-up order).
checkpoint_rows write_test_checkpoint(const std::filesystem::path& dir, const std::string& table,
                                      uint32_t dim, uint32_t rows, uint32_t shards,
                                      uint16_t incarnation = 1, uint32_t partitions = 64);

// A manifest (YAML text) for `strata serve` of that checkpoint.
std::string serving_manifest(const std::string& table, uint32_t dim,
                             const std::filesystem::path& checkpoint,
                             const std::filesystem::path& state_dir, uint32_t partitions,
                             const std::string& serving_extra = "");

// Opens a serving store of table "ads" (dim `dim`, 64 partitions, an SGD
// CPU cache of 8 x 1 slabs, DRAM for 500 rows) at dir/serving and loads the
// checkpoint dir/ckpt into it; failures are test failures (null returned).
std::unique_ptr<serving::serving_store> open_test_store(const std::filesystem::path& dir,
                                                        uint32_t dim);

// Table "ads" served over the binary protocol on 127.0.0.1 (any port):
// a checkpoint of `rows` keys over 2 shard copies written under a temp dir,
// opened with open_test_store, a service taking up to 4096 keys a request.
// A failure to open or to listen throws (the test fails naming it).
struct served_test_table {
  explicit served_test_table(uint32_t dim, uint32_t rows = 2000);
  temp_dir dir;
  checkpoint_rows rows;
  std::unique_ptr<serving::serving_service> service;
  std::unique_ptr<serving::binary_server> binary;
};

}  // namespace strata::testing
