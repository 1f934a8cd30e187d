// What `strata status` prints by default: a short human summary of the
// admin API's /status document (deploy/admin_api.cpp) instead of its JSON,
// which lists every partition id of every shard (`strata status --json`
// prints the document). One line per node and per shard; cache tiers,
// rows, training progress and the last checkpoint in a line each.
#pragma once

#include <string>

#include "common/error.hpp"

namespace strata::deploy {

// The summary of a /status document (JSON text). Fields a document lacks
// (an older node) are left out; a document that is not a JSON object is
// an error.
expected<std::string> status_summary(const std::string& status_json);

// The message of an admin API error reply ({"error": "..."}), or the body
// as it came when it is not one.
std::string admin_error_text(const std::string& body);

}  // namespace strata::deploy
