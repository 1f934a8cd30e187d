#include "model/datagen.hpp"
