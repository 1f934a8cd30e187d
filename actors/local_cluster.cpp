#include "actors/local_cluster.hpp"
