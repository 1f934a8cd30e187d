#include "model/features.hpp"
