#include "tiers/lmdb_tier.hpp"
