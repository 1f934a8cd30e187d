// Readers of CTR training data: one chunked line source, one windowing and
// bad-line policy (line_reader), and a parser per format.
#include "model/reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "common/regular_file.hpp"
#include "model/features.hpp"

namespace strata::model {
namespace {

constexpr size_t chunk_size = 1 << 20;
constexpr size_t buffer_limit = max_line_bytes + 2 + chunk_size;

// A line of the file, valid until the next call; `too_long` when the line
// was longer than max_line_bytes and has been skipped (its text is empty).
struct source_line {
  std::string_view text;
  bool too_long = false;
};

// The lines of a file, read in big chunks into a buffer that grows for a
// long line up to buffer_limit (a whole line of max_line_bytes, its "\r\n"
// and a chunk behind it). A longer line is skipped up to its newline and reported as too
// long, so a file without newlines costs bounded memory. Handles a last
// line without '\n' and strips a trailing '\r'.
class line_source {
 public:
  ~line_source() {
    if (file_ != nullptr) std::fclose(file_);
  }
  status open(const std::filesystem::path& path) {
    auto fd = open_regular_file(path, "data file");
    if (!fd) return fd.err();
    file_ = ::fdopen(*fd, "rb");
    if (file_ == nullptr) {
      const int e = errno;
      ::close(*fd);
      return error(errc::io_error,
                   "cannot open data file " + path.string() + ": " + std::strerror(e));
    }
    path_ = path.string();
    buffer_.resize(chunk_size);
    return {};
  }
  // Next line, nullopt at the end of the file.
  expected<std::optional<source_line>> next() {
    for (;;) {
      const char* begin = buffer_.data() + pos_;
      const char* nl = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
      if (nl != nullptr) {
        pos_ = static_cast<size_t>(nl - buffer_.data()) + 1;
        const std::string_view text = trim_cr({begin, static_cast<size_t>(nl - begin)});
        if (skipping_ || text.size() > max_line_bytes) {
          skipping_ = false;
          return std::optional<source_line>(source_line{{}, true});
        }
        return std::optional<source_line>(source_line{text, false});
      }
      // No newline in what is buffered: a line longer than the cap (with
      // room for a '\r') is dropped as it is read.
      if (skipping_ || end_ - pos_ > max_line_bytes + 1) {
        skipping_ = true;
        pos_ = end_;
      }
      if (eof_) {
        if (pos_ == end_) {
          if (!skipping_) return std::optional<source_line>();
          skipping_ = false;
          return std::optional<source_line>(source_line{{}, true});
        }
        std::string_view last(begin, end_ - pos_);
        pos_ = end_;
        return std::optional<source_line>(source_line{trim_cr(last), false});
      }
      STRATA_TRY(refill());
    }
  }
  const std::string& path() const { return path_; }
  size_t buffer_capacity() const { return buffer_.capacity(); }

 private:
  static std::string_view trim_cr(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  }
  // Moves the partial line (at most max_line_bytes + 1) to the front and
  // reads more behind it; grows the buffer, up to buffer_limit, when the
  // partial line fills it.
  status refill() {
    const size_t partial = end_ - pos_;
    std::memmove(buffer_.data(), buffer_.data() + pos_, partial);
    pos_ = 0;
    end_ = partial;
    if (end_ == buffer_.size()) {
      const size_t grown = std::min(buffer_.size() * 2, buffer_limit);
      buffer_.reserve(grown);  // exactly: resize alone may double the capacity
      buffer_.resize(grown);
    }
    const size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_);
    if (got == 0) {
      if (std::ferror(file_)) return error(errc::io_error, "cannot read data file " + path_);
      eof_ = true;
    }
    end_ += got;
    return {};
  }

  std::FILE* file_ = nullptr;
  std::string path_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  bool skipping_ = false;  // inside a line longer than max_line_bytes
};

// Splits `line` at `sep` into `fields` (reused, no allocation once warm).
void split(std::string_view line, char sep, std::vector<std::string_view>& fields) {
  fields.clear();
  size_t start = 0;
  for (;;) {
    const void* hit = std::memchr(line.data() + start, sep, line.size() - start);
    if (hit == nullptr) {
      fields.push_back(line.substr(start));
      return;
    }
    const size_t at = static_cast<size_t>(static_cast<const char*>(hit) - line.data());
    fields.push_back(line.substr(start, at - start));
    start = at + 1;
  }
}

template <class T>
bool parse_whole(std::string_view s, T& out) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

// A 0/1 label ("0", "1", "0.0", "1.0").
bool parse_label(std::string_view s, float& out) {
  double d;
  if (!parse_whole(s, d) || (d != 0 && d != 1)) return false;
  out = static_cast<float>(d);
  return true;
}

// Returns nullptr on success, else the reason the line is bad.
using parse_result = const char*;

// Sharding, skip/limit windows and the bad-line policy; subclasses parse.
class line_reader : public reader {
 public:
  explicit line_reader(reader_config config) : config_(std::move(config)) {}

  status open() {
    if (config_.shard_count == 0 || config_.shard_index >= config_.shard_count)
      return error(errc::invalid_argument,
                   "reader: shard_index " + std::to_string(config_.shard_index) +
                       " not below shard_count " + std::to_string(config_.shard_count));
    STRATA_TRY(source_.open(config_.path));
    STRATA_TRY(open_format());
    if (!has_header()) return {};
    for (;;) {  // the header is the first non-empty line
      auto line = source_.next();
      if (!line) return line.err();
      if (!line->has_value())
        return error(errc::corrupt_data, "no header line in " + source_.path());
      ++lines_read_;
      if ((*line)->too_long)
        return error(errc::corrupt_data, source_.path() + ":" + std::to_string(lines_read_) +
                                             ": header line longer than " +
                                             std::to_string(max_line_bytes) + " bytes");
      if (!(*line)->text.empty()) return parse_header((*line)->text);
    }
  }

  expected<std::optional<example>> next() override {
    if (failure_) return *failure_;
    if (config_.limit != 0 && delivered_ >= config_.limit) return std::optional<example>();
    example out;
    for (;;) {
      auto line = source_.next();
      if (!line) return line.err();
      if (!line->has_value()) return std::optional<example>();
      ++lines_read_;
      const std::string_view text = (*line)->text;
      if (text.empty() && !(*line)->too_long) continue;
      const uint64_t index = data_lines_++;
      if (index % config_.shard_count != config_.shard_index) continue;
      out.features.clear();
      const char* reason = (*line)->too_long ? too_long_reason_.c_str() : parse(text, out);
      if (reason != nullptr) {
        // A bad line before the window belongs to the window that reads it
        // (a held-out reader skips the training window): counted there.
        if (skipped_ < config_.skip) continue;
        bad_lines_.push_back({source_.path(), lines_read_, reason});
        if (bad_lines_.size() > config_.max_bad_lines) {
          failure_ =
              error(errc::corrupt_data, source_.path() + ":" + std::to_string(lines_read_) + ": " +
                                            reason + " (" + std::to_string(bad_lines_.size()) +
                                            " bad lines, more than max_bad_lines " +
                                            std::to_string(config_.max_bad_lines) + ")");
          return *failure_;
        }
        continue;
      }
      if (skipped_ < config_.skip) {
        ++skipped_;
        continue;
      }
      ++delivered_;
      return std::optional<example>(std::move(out));
    }
  }

  const std::vector<bad_line>& bad_lines() const override { return bad_lines_; }
  uint64_t lines_read() const override { return lines_read_; }
  size_t buffer_bytes() const override { return source_.buffer_capacity(); }

 protected:
  virtual status open_format() { return {}; }
  virtual bool has_header() const { return false; }
  virtual status parse_header(std::string_view) { return {}; }
  // Fills `out` (label, features) from a non-empty line.
  virtual parse_result parse(std::string_view line, example& out) = 0;

  reader_config config_;
  line_source source_;
  std::vector<std::string_view> fields_;

 private:
  std::vector<bad_line> bad_lines_;
  std::optional<error> failure_;
  const std::string too_long_reason_ =
      "line longer than " + std::to_string(max_line_bytes) + " bytes (skipped)";
  uint64_t lines_read_ = 0, data_lines_ = 0, skipped_ = 0, delivered_ = 0;
};

// Criteo Kaggle: label, I1..I13, C1..C26, TAB-separated.
class criteo_tsv_reader final : public line_reader {
 public:
  using line_reader::line_reader;

 private:
  static constexpr uint32_t integers = 13, categoricals = 26;

  parse_result parse(std::string_view line, example& out) override {
    split(line, '\t', fields_);
    if (fields_.size() != 1 + integers + categoricals) return "wrong column count (want 40)";
    if (!parse_label(fields_[0], out.label)) return "bad label";
    out.features.resize(integers + categoricals);  // trimmed below
    feature* next = out.features.data();
    for (uint32_t i = 0; i < integers; ++i) {
      const std::string_view f = fields_[1 + i];
      if (f.empty()) continue;
      int64_t v;
      if (!parse_integer_value(f, v)) return "unparsable integer";
      *next++ = {i, integer_key(i, v), 1.0f};
    }
    for (uint32_t c = 0; c < categoricals; ++c) {
      const std::string_view f = fields_[1 + integers + c];
      if (f.empty()) continue;
      const uint32_t slot = integers + c;
      *next++ = {slot, categorical_key(slot, f), 1.0f};
    }
    out.features.resize(static_cast<size_t>(next - out.features.data()));
    return nullptr;
  }
};

// CSV with a header; the columns named in config.columns are used.
class csv_reader final : public line_reader {
 public:
  using line_reader::line_reader;

 private:
  status open_format() override {
    if (config_.columns.label.empty())
      return error(errc::invalid_argument,
                   "csv reader: no label column configured for " + config_.path.string());
    return {};
  }
  bool has_header() const override { return true; }
  status parse_header(std::string_view line) override {
    split(line, ',', fields_);
    columns_ = fields_.size();
    std::unordered_map<std::string_view, uint32_t> index;
    for (uint32_t i = 0; i < fields_.size(); ++i) index.emplace(fields_[i], i);
    auto find = [&](const std::string& name) -> expected<uint32_t> {
      auto it = index.find(name);
      if (it == index.end())
        return error(errc::invalid_argument, "csv reader: column '" + name +
                                                 "' not in the header of " + config_.path.string());
      return it->second;
    };
    auto label = find(config_.columns.label);
    if (!label) return label.err();
    label_column_ = *label;
    for (const auto& name : config_.columns.integer) {
      auto c = find(name);
      if (!c) return c.err();
      integer_columns_.push_back(*c);
    }
    for (const auto& name : config_.columns.categorical) {
      auto c = find(name);
      if (!c) return c.err();
      categorical_columns_.push_back(*c);
    }
    return {};
  }

  parse_result parse(std::string_view line, example& out) override {
    split(line, ',', fields_);
    if (fields_.size() != columns_) return "wrong column count (differs from the header)";
    if (!parse_label(fields_[label_column_], out.label)) return "bad label";
    out.features.reserve(integer_columns_.size() + categorical_columns_.size());
    uint32_t slot = 0;
    for (uint32_t column : integer_columns_) {
      const std::string_view f = fields_[column];
      if (!f.empty()) {
        int64_t v;
        if (!parse_integer_value(f, v)) return "unparsable integer";
        out.features.push_back({slot, integer_key(slot, v), 1.0f});
      }
      ++slot;
    }
    for (uint32_t column : categorical_columns_) {
      const std::string_view f = fields_[column];
      if (!f.empty()) out.features.push_back({slot, categorical_key(slot, f), 1.0f});
      ++slot;
    }
    return nullptr;
  }

  size_t columns_ = 0;
  uint32_t label_column_ = 0;
  std::vector<uint32_t> integer_columns_, categorical_columns_;
};

// libffm: "label field:feature:value ...", whitespace-separated.
class libffm_reader final : public line_reader {
 public:
  using line_reader::line_reader;

 private:
  parse_result parse(std::string_view line, example& out) override {
    size_t pos = 0;
    auto next_token = [&]() -> std::string_view {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
      const size_t start = pos;
      while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t') ++pos;
      return line.substr(start, pos - start);
    };
    const std::string_view label = next_token();
    double y;
    // libffm files use 0/1; -1 (the libsvm convention) also means negative.
    if (!parse_whole(label, y) || (y != 0 && y != 1 && y != -1)) return "bad label";
    out.label = y == 1 ? 1.0f : 0.0f;
    for (std::string_view token = next_token(); !token.empty(); token = next_token()) {
      const size_t c1 = token.find(':');
      const size_t c2 = c1 == std::string_view::npos ? c1 : token.find(':', c1 + 1);
      if (c2 == std::string_view::npos) return "feature not field:feature:value";
      uint32_t field;
      uint64_t feature;
      float value;
      if (!parse_whole(token.substr(0, c1), field) ||
          !parse_whole(token.substr(c1 + 1, c2 - c1 - 1), feature) ||
          !parse_whole(token.substr(c2 + 1), value) || !std::isfinite(value))
        return "unparsable field:feature:value";
      out.features.push_back({field, ffm_key(field, feature), value});
    }
    return nullptr;
  }
};

}  // namespace

expected<std::unique_ptr<reader>> reader::open(const reader_config& config) {
  std::unique_ptr<line_reader> r;
  switch (config.format) {
    case data_format::criteo_tsv:
      r = std::make_unique<criteo_tsv_reader>(config);
      break;
    case data_format::csv:
      r = std::make_unique<csv_reader>(config);
      break;
    case data_format::libffm:
      r = std::make_unique<libffm_reader>(config);
      break;
  }
  if (r == nullptr) return error(errc::invalid_argument, "reader: unknown data format");
  STRATA_TRY(r->open());
  return std::unique_ptr<reader>(std::move(r));
}

expected<batch> reader::next_batch(size_t n) {
  batch out;
  out.examples.reserve(n);
  while (out.examples.size() < n) {
    auto e = next();
    if (!e) return e.err();
    if (!e->has_value()) break;
    out.examples.push_back(std::move(**e));
  }
  return out;
}

}  // namespace strata::model
