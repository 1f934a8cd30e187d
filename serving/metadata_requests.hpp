// What a user needs before the first lookup: which tables a server holds
// (tables -> table_list: name and dim of each) and a few keys stored in
// one (list_keys -> key_list, at most wire::max_list_keys). Keys are XXH3
// hashes of feature values (docs/model.md), so without these a user of a
// served checkpoint cannot name one real key.
//
// The binary server (serving/binary_server.cpp) hands these frames to
// answer_metadata_request(); `strata keys --checkpoint` reads the same
// keys offline with checkpoint_keys(). Replies are small and bounded: the
// table list has one entry per served table, the key list at most
// max_list_keys keys (8 KB).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "client/frame_socket.hpp"
#include "common/error.hpp"
#include "serving/service.hpp"
#include "tiers/lmdb_tier.hpp"

namespace strata::serving {

// Appends up to `limit` live keys of `tier` (whose cluster has `partitions`
// partitions) to `out`, in storage order (partition, then key): one cursor
// range scan per partition, stopping at the first partition that fills it.
status first_keys(lmdb_tier& tier, uint32_t partitions, uint32_t limit,
                  std::vector<uint64_t>& out);

// Up to `limit` keys of `table` in checkpoint `dir` (a ckpt-... directory,
// or a checkpoint root: its latest complete checkpoint), shard copy by
// shard copy, opened read-only. Errors name the directory and, for a table
// the checkpoint does not hold, the table it does.
expected<std::vector<uint64_t>> checkpoint_keys(const std::filesystem::path& dir,
                                                const std::string& table, uint32_t limit);

// Answers a tables or list_keys frame from `service` on `socket` (an
// error frame for a bad request, an unknown table or an endpoint that
// cannot list). Returns false if the connection broke while sending.
bool answer_metadata_request(lookup_service& service, wire::frame_socket& socket,
                             const wire::frame& request);

}  // namespace strata::serving
