#include "model/ctr_model.hpp"
