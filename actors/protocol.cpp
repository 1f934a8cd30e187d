#include "actors/protocol.hpp"
