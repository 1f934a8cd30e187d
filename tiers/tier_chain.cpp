#include "tiers/tier_chain.hpp"
