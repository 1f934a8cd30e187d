// `caches.backend: gpu`: the composition root's choice of cache backend.
// With gpu, each cache tier gets a gpu::staged_cache (rows in HBM, the
// actor's host buffers staged through pinned memory); a binary built
// without CUDA, or a machine without a usable device, is refused before
// anything starts, with the reason. With cpu, nothing changes (cpu_cache).
#pragma once

#include "common/error.hpp"
#include "deploy/manifest.hpp"

namespace strata::cli {

// Sets the cache tiers' backend factory for m.cache_backend; errors name
// the manifest field.
status apply_cache_backend(deploy::manifest& m);

// The GPU backend's factory (staging sets sized for `batch` keys), or why
// it is unavailable here, prefixed with `field` (the manifest field that
// asked for it).
expected<actors::cache_backend_factory> gpu_cache_factory(const std::string& field, size_t batch);

}  // namespace strata::cli
