// The training-data readers (model/reader.hpp) on a fuzzed file: the first
// byte picks the format (Criteo TSV, CSV with DeepCTR's columns, libffm)
// and a shard window, the rest is the file, read to the end (or to the
// bad-line limit) as a worker reads it. The file is an in-memory file
// (memfd) opened by its /proc path, so reader::open runs unchanged.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "model/reader.hpp"
#include "tests/fuzz/fuzz_entries.hpp"

namespace {

using namespace strata::model;

reader_config config_for(uint8_t selector) {
  reader_config config;
  config.format = static_cast<data_format>(selector % 3);
  config.max_bad_lines = 8;
  config.shard_count = 1 + (selector >> 2) % 2;
  config.shard_index = (selector >> 3) % config.shard_count;
  config.skip = (selector >> 4) % 2;
  config.limit = (selector >> 5) % 4;
  if (config.format == data_format::csv) {
    config.columns.label = "label";
    for (int i = 1; i <= 13; ++i) config.columns.integer.push_back("I" + std::to_string(i));
    for (int i = 1; i <= 26; ++i) config.columns.categorical.push_back("C" + std::to_string(i));
  }
  return config;
}

}  // namespace

int strata_fuzz_reader(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int fd = ::memfd_create("strata-reader-fuzz", 0);
  if (fd < 0) return 0;
  size_t written = 0;
  while (written < size - 1) {
    const ssize_t n = ::write(fd, data + 1 + written, size - 1 - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  auto config = config_for(data[0]);
  config.path = "/proc/self/fd/" + std::to_string(fd);
  if (auto r = reader::open(config)) {
    for (;;) {
      auto batch = (*r)->next_batch(64);
      if (!batch || batch->examples.empty()) break;
    }
  }
  ::close(fd);
  return 0;
}
