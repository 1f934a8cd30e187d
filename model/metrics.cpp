#include "model/metrics.hpp"
