#include "actors/cache_tier_actor.hpp"
