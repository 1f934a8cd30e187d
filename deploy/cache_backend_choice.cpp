#include "deploy/cache_backend_choice.hpp"

#include <memory>
#include <string>

#if STRATA_WITH_GPU_BENCH
#include "gpu/device_memory.hpp"
#include "gpu/staged_cache.hpp"
#endif

namespace strata::cli {

expected<actors::cache_backend_factory> gpu_cache_factory(const std::string& field, size_t batch) {
#if STRATA_WITH_GPU_BENCH
  if (const std::string why = gpu::unavailable_reason(); !why.empty())
    return error(errc::unavailable, field + ", but no CUDA device is usable here: " + why);
  return actors::cache_backend_factory(
      [batch](const row_layout& layout,
              const cache_geometry& geometry) -> expected<std::unique_ptr<cache_backend>> {
        auto made = gpu::staged_cache::create(layout, geometry, batch);
        if (!made) return made.err();
        return std::unique_ptr<cache_backend>(std::move(*made));
      });
#else
  (void)batch;
  return error(
      errc::unavailable,
      field + ", but this strata was built without CUDA (nvcc was not found at build time)");
#endif
}

status apply_cache_backend(deploy::manifest& m) {
  if (m.cache_backend == deploy::cache_backend_choice::cpu) return {};
  // Staging sets sized for a worker's batch (they grow if a call is larger).
  const size_t batch = m.cluster.workers.empty() ? 4096 : m.cluster.workers.front().batch_size;
  auto factory = gpu_cache_factory(m.file.string() + ": caches.backend: gpu", batch);
  if (!factory) return factory.err();
  for (auto& cache : m.cluster.caches) cache.make_backend = *factory;
  return {};
}

}  // namespace strata::cli
