#include "tiers/optimizer.hpp"
