#include "actors/ssd_flush_actor.hpp"
