// The data split: the workers' training windows and the held-out window,
// from explicit counts or a fraction of the data file's examples
// (deploy/manifest.hpp, deploy/manifest_parse.hpp).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

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

expected<void> resolve_data_split(manifest& m) {
  if (m.split_resolved) return {};
  std::ifstream in(m.data.path, std::ios::binary);
  if (!in) return error(errc::not_found, m.data.path.string() + ": cannot open the data file");
  uint64_t lines = 0;
  bool pending = false;  // a last line without a newline
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    lines += static_cast<uint64_t>(std::count(buffer.data(), buffer.data() + got, '\n'));
    pending = buffer[got - 1] != '\n';
  }
  if (in.bad()) return error(errc::io_error, m.data.path.string() + ": read failed");
  if (pending) ++lines;
  if (m.data.format == model::data_format::csv && lines > 0) --lines;  // the header
  return detail::apply_split(m, lines);
}

}  // namespace strata::deploy
