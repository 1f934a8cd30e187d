#include "tiers/cpu_cache.hpp"
