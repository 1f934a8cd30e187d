#include "actors/partition_map.hpp"
