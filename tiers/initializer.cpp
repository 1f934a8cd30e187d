#include "tiers/initializer.hpp"
