// Readers of CTR training data.
//
//   criteo_tsv: the raw Criteo Kaggle layout: TAB-separated, label, 13
//               integer columns, 26 categorical hex columns; empty = missing.
//   csv:        comma-separated with a header; the columns named by
//               csv_columns are the label, the integer and the categorical
//               features (e.g. DeepCTR's label,I1..I13,C1..C26 or Avazu's
//               click + C*). Empty = missing.
//   libffm:     "label field:feature:value ..."; the value weights the
//               feature's embedding.
//
// Every categorical value becomes a key of its slot (features.hpp); a
// missing value gets no key; integer features are bucketized (log2) into keys
// of their own slots. A bad line (wrong column count, unparsable number or
// label, a line longer than max_line_bytes) is skipped, counted and reported
// with file and line number; more than max_bad_lines bad lines turn into an
// error. A bad line before a reader's window (`skip`) is not counted there:
// the window it lies in counts it. The data file must be a regular file (a
// device such as /dev/zero never ends). A reader owns its file handle; one thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/example.hpp"

namespace strata::model {

// The longest line a reader takes (without its line end); a longer one is
// skipped as a bad line, so a file without newlines costs bounded memory.
inline constexpr size_t max_line_bytes = size_t{4} << 20;  // 4 MiB

enum class data_format : uint8_t { criteo_tsv, csv, libffm };

struct csv_columns {
  std::string label = "label";
  std::vector<std::string> integer;      // e.g. I1..I13
  std::vector<std::string> categorical;  // e.g. C1..C26
};

struct reader_config {
  data_format format = data_format::criteo_tsv;
  std::filesystem::path path;
  csv_columns columns;           // csv only
  uint64_t max_bad_lines = 100;  // more than this is an error
  // Read only lines with (line_index % shard_count) == shard_index, so that
  // several workers split one file without overlap.
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
  // Skip the first `skip` examples of this shard and stop after `limit`
  // (0: no limit); a held-out split is another window of the same file.
  uint64_t skip = 0;
  uint64_t limit = 0;
};

struct bad_line {
  std::string file;
  uint64_t line = 0;  // 1-based
  std::string reason;
};

class reader {
 public:
  static expected<std::unique_ptr<reader>> open(const reader_config& config);
  virtual ~reader() = default;
  // Next example, nullopt at the end; an error once bad lines exceed the
  // limit (the message names the file and the last bad line).
  virtual expected<std::optional<example>> next() = 0;
  // Reads up to n examples into `out` (cleared first); empty at the end.
  expected<batch> next_batch(size_t n);
  virtual const std::vector<bad_line>& bad_lines() const = 0;
  virtual uint64_t lines_read() const = 0;  // position, for checkpoints
  // Bytes the reader's line buffer holds (bounded by max_line_bytes).
  virtual size_t buffer_bytes() const = 0;
};

}  // namespace strata::model
