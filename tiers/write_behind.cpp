#include "tiers/write_behind.hpp"
