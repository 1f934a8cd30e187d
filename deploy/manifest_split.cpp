// The data split: the workers' training windows and the held-out window,
// from explicit counts or a fraction of the data file's examples
// (deploy/manifest.hpp, deploy/manifest_parse.hpp).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/regular_file.hpp"
#include "common/stop_request.hpp"
#include "deploy/manifest.hpp"
#include "deploy/manifest_parse.hpp"

namespace strata::deploy {
namespace detail {

expected<void> apply_split(manifest& m, std::optional<uint64_t> examples) {
  auto& c = m.cluster;
  const uint32_t workers = static_cast<uint32_t>(c.workers.size());
  uint64_t train = m.split.train_examples;
  if (train == 0) {
    if (!examples) return error(errc::invalid_argument, "data split needs the example count");
    const auto heldout = static_cast<uint64_t>(
        std::floor(static_cast<double>(*examples) * m.split.heldout_fraction));
    train = *examples - heldout;
  }
  if (examples && train > *examples)
    return error(errc::invalid_argument, m.file.string() +
                                             ": data.train_examples: " + std::to_string(train) +
                                             " exceeds the " + std::to_string(*examples) +
                                             " examples in " + m.data.path.string());
  if (train < workers)
    return error(errc::invalid_argument,
                 m.file.string() + ": data: the training window (" + std::to_string(train) +
                     " examples of " + m.data.path.string() + ") is smaller than workers.count (" +
                     std::to_string(workers) + ")");
  for (uint32_t w = 0; w < workers; ++w) {
    auto& reader = c.workers[w].data;
    reader = m.data;
    reader.shard_index = w;
    reader.shard_count = workers;
    reader.skip = 0;
    reader.limit = (train - w + workers - 1) / workers;  // lines w, w + W, ... below `train`
  }
  const bool has_heldout = !examples || train < *examples;
  const bool wants_heldout = m.split.train_examples != 0 || m.split.heldout_fraction > 0;
  c.heldout = model::reader_config{};
  if (has_heldout && wants_heldout) {
    c.heldout = m.data;
    c.heldout.shard_index = 0;
    c.heldout.shard_count = 1;
    c.heldout.skip = train;
    c.heldout.limit = m.split.heldout_examples;
  }
  c.heldout_examples = m.split.heldout_examples;
  m.split_resolved = true;
  return {};
}

}  // namespace detail

expected<void> apply_data_split(manifest& m, uint64_t data_examples) {
  return detail::apply_split(m, data_examples);
}

namespace {

// The examples of the data file: its non-blank lines (what the reader
// reads; a line of only "\r" is blank too), less a csv header. With
// `first_only`, stops at the first example (1 or 0). A regular file only
// (a device such as /dev/zero has no end); a stop request ends the scan.
expected<uint64_t> count_examples(const manifest& m, bool first_only) {
  const std::string what = m.file.string() + ": data.path:";
  auto fd = open_regular_file(m.data.path, what);
  if (!fd) return fd.err();
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t examples = 0;
  bool blank = true;  // the current line has only '\r' so far
  const uint64_t wanted = m.data.format == model::data_format::csv ? 2 : 1;  // a header first
  for (;;) {
    if (stop_requested().load()) {
      ::close(*fd);
      return error(errc::unavailable, "stopped while counting the examples of " +
                                          m.data.path.string() + " (" + std::to_string(examples) +
                                          " so far)");
    }
    const ssize_t got = ::read(*fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int e = errno;
      ::close(*fd);
      return error(errc::io_error,
                   m.data.path.string() + ": cannot read the data file: " + std::strerror(e));
    }
    if (got == 0) break;
    for (const char* p = buffer.data(); p != buffer.data() + got; ++p) {
      if (*p == '\n') {
        if (!blank) ++examples;
        blank = true;
      } else if (*p != '\r') {
        blank = false;
      }
    }
    if (first_only && examples >= wanted) break;
  }
  ::close(*fd);
  if (!blank) ++examples;  // a last line without a newline
  if (m.data.format == model::data_format::csv && examples > 0) --examples;  // the header
  if (examples == 0)
    return error(errc::invalid_argument,
                 what + " " + m.data.path.string() +
                     " has no examples (it is empty or holds only blank lines" +
                     (m.data.format == model::data_format::csv ? " besides the header" : "") + ")");
  return first_only ? std::min<uint64_t>(examples, 1) : examples;
}

}  // namespace

expected<void> resolve_data_split(manifest& m) {
  if (m.split_resolved) {
    // Explicit counts: the file must still hold an example (a file of
    // blank lines would train nothing and end "successfully").
    auto any = count_examples(m, true);
    if (!any) return any.err();
    return {};
  }
  auto examples = count_examples(m, false);
  if (!examples) return examples.err();
  return detail::apply_split(m, *examples);
}

}  // namespace strata::deploy
