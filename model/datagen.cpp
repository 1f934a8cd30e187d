// Synthetic Criteo-layout data from a planted logistic model (datagen.hpp).
//
// Categorical slot s owns distinct_keys / 26 values (the first slots one
// more for the remainder); a row draws each slot's value by rank from a
// Zipf(zipf) alias table, so rank 0 is the most popular. Value (s, rank)
// has a global index g, written as 8 hex digits of a bijective 32-bit mix of
// g (distinct strings, like Criteo's hashed values) and a planted weight
// drawn once from N(0, weight_stddev^2 / 26), so that the planted logit
// bias + sum of weights has a standard deviation of about weight_stddev.
// Slots 20..25 are missing (empty, no weight) in 10% of the rows. The 13
// integer columns are log-normal noise with a per-row common factor and a
// per-column missing rate; they carry no signal.
#include "model/datagen.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "model/metrics.hpp"

namespace strata::model {
namespace {

constexpr uint32_t integer_columns = 13, categorical_slots = 26;
constexpr uint32_t first_sparse_slot = 20;  // slots 20.. are sometimes missing
constexpr double missing_rate_sparse = 0.10;
constexpr uint64_t auc_rows_max = 20'000'000;  // AUC over at most this many rows

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A counter-based stream: deterministic in (seed, stream id).
class rng {
 public:
  explicit rng(uint64_t seed) : state_(splitmix64(seed)) {}
  uint64_t next() { return splitmix64(state_++); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Approximately standard normal (Irwin-Hall of 4), for noise.
  double rough_normal() {
    const uint64_t r = next();
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += static_cast<double>((r >> (16 * i)) & 0xffff) * 0x1.0p-16;
    return (sum - 2.0) * std::sqrt(3.0);
  }
  // Exact standard normal (Box-Muller), for the planted weights.
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

// Walker's alias table over ranks 0..n-1 with weight (rank + 1)^-exponent.
// A draw is two steps, so that a caller can prefetch between them: column()
// picks a uniform entry (a likely cache miss for big tables), resolve()
// flips its biased coin.
class zipf_alias {
 public:
  zipf_alias(uint32_t n, double exponent) : entries_(n) {
    std::vector<double> p(n);
    double total = 0;
    for (uint32_t r = 0; r < n; ++r) total += p[r] = std::pow(r + 1.0, -exponent);
    std::vector<uint32_t> small, large;
    for (uint32_t r = 0; r < n; ++r) {
      p[r] *= n / total;
      (p[r] < 1.0 ? small : large).push_back(r);
    }
    while (!small.empty() && !large.empty()) {
      const uint32_t s = small.back(), l = large.back();
      small.pop_back();
      entries_[s] = {static_cast<float>(p[s]), l};
      p[l] -= 1.0 - p[s];
      if (p[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    for (uint32_t r : small) entries_[r] = {1.0f, r};
    for (uint32_t r : large) entries_[r] = {1.0f, r};
  }
  uint32_t column(uint64_t random) const {
    return static_cast<uint32_t>(((random >> 32) * entries_.size()) >> 32);
  }
  void prefetch(uint32_t column) const { __builtin_prefetch(&entries_[column]); }
  uint32_t resolve(uint32_t column, uint64_t random) const {
    const float coin = static_cast<float>(random & 0xffffff) * 0x1.0p-24f;
    const entry& e = entries_[column];
    return coin < e.prob ? column : e.alias;
  }

 private:
  struct entry {
    float prob;
    uint32_t alias;
  };
  std::vector<entry> entries_;
};

// murmur3's fmix32 after a seeded xor: a bijection on uint32.
uint32_t mix32(uint32_t x, uint32_t seed) {
  x ^= seed;
  x ^= x >> 16;
  x *= 0x85ebca6bU;
  x ^= x >> 13;
  x *= 0xc2b2ae35U;
  x ^= x >> 16;
  return x;
}

// Buffered output that names the path in every error.
class output_file {
 public:
  ~output_file() {
    if (file_ != nullptr) std::fclose(file_);
  }
  status open(const std::filesystem::path& path) {
    path_ = path.string();
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) return os_error("cannot create");
    buffer_.reserve(capacity + 1024);
    return {};
  }
  std::string& buffer() { return buffer_; }
  status maybe_flush() { return buffer_.size() >= capacity ? flush() : status{}; }
  status flush() {
    if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
      return os_error("cannot write");
    buffer_.clear();
    return {};
  }
  status close() {
    STRATA_TRY(flush());
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) return os_error("cannot write");
    return {};
  }

 private:
  static constexpr size_t capacity = 256 << 10;  // stays in L2
  error os_error(const char* what) const {
    const int e = errno;
    return error(e == ENOSPC ? errc::disk_full : errc::io_error,
                 std::string(what) + " " + path_ + ": " + std::strerror(e));
  }
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string buffer_;
};

std::filesystem::path planted_path(const std::filesystem::path& data) {
  std::filesystem::path p = data;
  p += ".planted";
  return p;
}

}  // namespace

expected<planted_quality> generate(const datagen_config& config,
                                   const std::function<void(uint64_t)>& progress) {
  if (config.distinct_keys < categorical_slots || config.distinct_keys > (uint64_t{1} << 32))
    return error(errc::invalid_argument, "datagen: distinct_keys must be in [26, 2^32], got " +
                                             std::to_string(config.distinct_keys));
  if (!(config.zipf > 0) || !(config.weight_stddev >= 0))
    return error(errc::invalid_argument, "datagen: zipf must be > 0 and weight_stddev >= 0");

  // The planted model: per-slot value tables and weights.
  std::vector<zipf_alias> slots;
  std::vector<uint64_t> slot_offset(categorical_slots + 1, 0);
  for (uint32_t s = 0; s < categorical_slots; ++s) {
    const uint64_t n = config.distinct_keys / categorical_slots +
                       (s < config.distinct_keys % categorical_slots ? 1 : 0);
    slot_offset[s + 1] = slot_offset[s] + n;
    slots.emplace_back(static_cast<uint32_t>(n), config.zipf);
  }
  std::vector<float> weights(config.distinct_keys);
  rng weight_rng(config.seed ^ 0x5745494748545321ULL);
  const double weight_sd = config.weight_stddev / std::sqrt(double{categorical_slots});
  for (float& w : weights) w = static_cast<float>(weight_rng.normal() * weight_sd);
  const uint32_t hex_seed = static_cast<uint32_t>(splitmix64(config.seed ^ 0x484558ULL));

  output_file out;
  STRATA_TRY(out.open(config.output));
  const uint64_t auc_rows = std::min(config.rows, auc_rows_max);
  std::vector<float> predictions, labels;
  predictions.reserve(auc_rows);
  labels.reserve(auc_rows);
  double loss_sum = 0;
  char number[32];

  for (uint64_t row = 0; row < config.rows; ++row) {
    rng r(config.seed * 0x9e3779b97f4a7c15ULL + row);
    // Categorical values first: they decide the label. Three passes so
    // that the table lookups of all 26 slots are in flight together.
    uint64_t random[categorical_slots];
    uint32_t column[categorical_slots];
    uint64_t index[categorical_slots];
    for (uint32_t s = 0; s < categorical_slots; ++s) {
      random[s] = r.next();
      column[s] = slots[s].column(splitmix64(random[s]));
      slots[s].prefetch(column[s]);
    }
    for (uint32_t s = 0; s < categorical_slots; ++s) {
      if (s >= first_sparse_slot &&
          static_cast<double>(random[s] & 0xffff) * 0x1.0p-16 < missing_rate_sparse) {
        index[s] = UINT64_MAX;
        continue;
      }
      index[s] = slot_offset[s] + slots[s].resolve(column[s], random[s] >> 16);
      __builtin_prefetch(&weights[index[s]]);
    }
    double logit = config.bias;
    for (uint32_t s = 0; s < categorical_slots; ++s)
      if (index[s] != UINT64_MAX) logit += weights[index[s]];
    const double p = 1.0 / (1.0 + std::exp(-logit));
    const bool label = r.uniform() < p;
    const double pc = std::clamp(p, 1e-7, 1 - 1e-7);
    loss_sum -= label ? std::log(pc) : std::log(1 - pc);
    if (row < auc_rows) {
      predictions.push_back(static_cast<float>(p));
      labels.push_back(label ? 1.0f : 0.0f);
    }

    std::string& buf = out.buffer();
    buf += label ? '1' : '0';
    const double row_factor = r.rough_normal();
    for (uint32_t c = 0; c < integer_columns; ++c) {
      buf += '\t';
      const double missing = 0.02 + 0.03 * c;
      if (r.uniform() < missing) continue;
      const double z = 0.6 * row_factor + 0.8 * r.rough_normal();
      const int64_t v = static_cast<int64_t>(std::floor(std::exp(0.3 * c + 1.5 * z))) - 1;
      auto [end, ec] = std::to_chars(number, number + sizeof number, v);
      buf.append(number, end);
    }
    for (uint32_t s = 0; s < categorical_slots; ++s) {
      buf += '\t';
      if (index[s] == UINT64_MAX) continue;
      const uint32_t hex = mix32(static_cast<uint32_t>(index[s]), hex_seed);
      // The 8 digits in one register (byte-wise stores into a char array
      // followed by an 8-byte copy stall on store forwarding).
      static constexpr char digits[] = "0123456789abcdef";
      uint64_t text = 0;
      for (int i = 0; i < 8; ++i)
        text |= uint64_t{static_cast<uint8_t>(digits[(hex >> (28 - 4 * i)) & 0xf])} << (8 * i);
      buf.append(reinterpret_cast<const char*>(&text), 8);
    }
    buf += '\n';
    STRATA_TRY(out.maybe_flush());
    if (progress && (row + 1) % (1 << 16) == 0) progress(row + 1);
  }
  STRATA_TRY(out.close());
  if (progress) progress(config.rows);

  planted_quality quality;
  quality.auc = auc(predictions, labels);
  quality.logloss = config.rows == 0 ? 0 : loss_sum / static_cast<double>(config.rows);

  output_file planted;
  STRATA_TRY(planted.open(planted_path(config.output)));
  char text[128];
  const int n =
      std::snprintf(text, sizeof text, "auc %.9g\nlogloss %.9g\n", quality.auc, quality.logloss);
  planted.buffer().append(text, static_cast<size_t>(n));
  STRATA_TRY(planted.close());
  return quality;
}

expected<planted_quality> read_planted(const std::filesystem::path& data) {
  const std::filesystem::path path = planted_path(data);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int e = errno;
    return error(e == ENOENT ? errc::not_found : errc::io_error,
                 "cannot open " + path.string() + ": " + std::strerror(e));
  }
  planted_quality q;
  const int fields = std::fscanf(f, "auc %lf logloss %lf", &q.auc, &q.logloss);
  std::fclose(f);
  if (fields != 2) return error(errc::corrupt_data, "not 'auc X\\nlogloss Y' in " + path.string());
  return q;
}

}  // namespace strata::model
