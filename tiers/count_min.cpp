#include "tiers/count_min.hpp"
