#include "model/reader.hpp"
