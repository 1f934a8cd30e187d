#include "model/example.hpp"
