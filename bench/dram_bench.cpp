#include "bench/report.hpp"
