#include "tiers/dram_tier.hpp"
