#include "actors/shard_actor.hpp"
