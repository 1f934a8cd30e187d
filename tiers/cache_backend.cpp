// cache_backend's default query_weights(): query() into records of its
// own, then each hit's version and weights copied to their places.
#include "tiers/cache_backend.hpp"

#include <string>

namespace strata {

status check_query_weights(const cache_backend& cache, size_t keys, memory_kind keys_kind,
                           const memory_span<std::byte>& versions,
                           const memory_span<std::byte>& weights,
                           const memory_span<uint32_t>& miss_indices) {
  auto bad = [](std::string what) {
    return error(errc::invalid_argument, "cache query_weights: " + std::move(what));
  };
  if (keys_kind != memory_kind::host || versions.kind() != memory_kind::host ||
      weights.kind() != memory_kind::host || miss_indices.kind() != memory_kind::host)
    return bad("buffers must be host memory");
  const size_t weight_bytes = size_t{4} * cache.layout().dim;
  if (versions.size() < keys * 8)
    return bad("versions hold " + std::to_string(versions.size()) + " bytes, below 8 per key (" +
               std::to_string(keys) + " keys)");
  if (weights.size() < keys * weight_bytes)
    return bad("weights hold " + std::to_string(weights.size()) + " bytes, below " +
               std::to_string(weight_bytes) + " per key (" + std::to_string(keys) + " keys)");
  if (miss_indices.size() < keys) return bad("miss_indices capacity below keys.size()");
  return {};
}

void cache_backend::query_weights(memory_span<const uint64_t> keys, memory_span<std::byte> versions,
                                  memory_span<std::byte> weights,
                                  memory_span<uint32_t> miss_indices, cache_counts& counts,
                                  cache_completion done) {
  counts = {};
  if (auto ok =
          check_query_weights(*this, keys.size(), keys.kind(), versions, weights, miss_indices);
      !ok) {
    if (done) done(std::move(ok));
    return;
  }
  const size_t n = keys.size();
  const size_t rb = layout().record_bytes();
  const uint32_t dim = layout().dim;
  // The backend's own scratch (calls do not overlap), alive until the
  // completion has run, which may be on another thread: no allocation per
  // call once it has grown.
  split_records_.resize(n * rb);
  query(keys, host_span(std::span<std::byte>(split_records_)), miss_indices, counts,
        [this, n, rb, dim, versions, weights, miss_indices, &counts,
         done = std::move(done)](status st) {
          if (st) {
            size_t m = 0;
            for (size_t i = 0; i < n; ++i) {
              if (m < counts.misses && miss_indices.data()[m] == i) {
                ++m;
                continue;
              }
              copy_version_and_weights(split_records_.data() + i * rb, dim, i, versions.data(),
                                       weights.data());
            }
          }
          if (done) done(std::move(st));
        });
}

}  // namespace strata
