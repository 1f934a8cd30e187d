// Online updates from training to serving (docs/serving.md, "Online updates").
//
// update_publisher runs on a training node. Shards hand it the rows they
// updated (actors::row_update_sink: a copy under a mutex, never blocking a
// shard); it keeps the newest row of each recently updated key with a
// sequence number (one counter per publisher), at most `max_retained_rows`
// of them (the oldest go first; `floor` is the highest sequence number
// dropped), and streams them to its subscribers every `interval`, or
// sooner once `max_rows` new rows are waiting.
//
// A subscriber connects to its port and sends subscribe(table, stream,
// after_seq, nonce); both sides then prove the cluster secret (mutual
// challenge-response, auth::prove with context "strata-updates-v1"): the
// publisher streams rows only to a subscriber that proved it, and a
// subscriber applies rows only from a publisher that proved it. The
// publisher then sends every retained row with a sequence number above
// after_seq (from 0 when `stream` is not its own: a new publisher, e.g. a
// restarted training cluster) and afterwards the new ones as they come.
// A subscriber whose position is older than the window (after_seq <
// floor: it was away long, or too slow) cannot be served from it: the
// publisher resends every row from `resend` (the shards' rows, streamed by
// the publisher's owner) and continues after the sequence number it had
// when the resend began; without a `resend` source it answers an error
// (unavailable, naming the gap) that the subscriber records as stale().
// On a training node the source is its shards (serving/shard_resend.hpp).
// Rows are sent weights only (serving layout) with their versions; a key
// updated twice between two sends is sent once, newest. In-process
// subscribers (a one-process cluster) register a callback with
// add_local_subscriber() and get the same batches on the sender thread.
//
// update_subscriber runs on a serving node: it connects to a publisher,
// subscribes, applies each batch through serving_service::apply_updates
// (which keeps versions from ever going backwards), remembers the stream
// and the last sequence number it applied, and on a broken connection
// reconnects (every `retry`) and resumes after that sequence number.
//
// Connections to the publisher's port go through a connection_registry
// (serving/connection_limits.hpp): a cap, accept back-off on EMFILE, a
// deadline for the handshake, ended connections reaped as they end.
//
// Both are thread-safe; stop() joins their threads (the publisher first
// sends every subscriber what it has not sent yet).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/config.hpp"
#include "client/frame_socket.hpp"
#include "common/auth.hpp"
#include "serving/connection_limits.hpp"
#include "serving/service.hpp"

namespace strata::serving {

// The one context of the subscribe handshake's proofs (auth::prove).
inline constexpr const char* updates_auth_context = "strata-updates-v1";

// Streams every row the publisher's shards hold, in chunks, to `emit`
// (weights: keys.size() x dim); emit returns false once the subscriber is
// gone (the source should stop then). Runs on a subscriber's thread.
using resend_emit =
    std::function<bool(std::span<const uint64_t> keys, std::span<const float> weights,
                       std::span<const uint64_t> versions)>;
using resend_source = std::function<status(const resend_emit& emit)>;

// The retained-row bound when none is configured: about 256 MiB of rows
// of width `dim` (weights plus the map's and the log's overhead).
uint64_t default_retained_rows(uint32_t dim);

struct publisher_config {
  std::string table = "default";
  uint32_t dim = 0;
  uint64_t stream = 1;  // this publisher's id (random per run; never 0)
  std::chrono::milliseconds interval{200};
  uint32_t max_rows = 4096;  // send early once this many new rows wait
  // At most this many rows retained (0: default_retained_rows(dim)).
  uint64_t max_retained_rows = 0;
  // An empty batch after this long without rows: the subscriber's receive
  // timeout tells a dead publisher from a quiet one.
  std::chrono::milliseconds keepalive{5000};
  // Where a subscriber older than the window gets every row (null: it is
  // refused with an error naming the gap).
  resend_source resend;
  // The cluster secret both ends prove; start() refuses an empty one.
  auth::secret secret;
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;  // 0: a free port (port())
  // The port's connection handling: subscribers are few, so the cap is
  // small; the handshake must complete within request_timeout.
  connection_settings connections{64, std::chrono::milliseconds{10000},
                                  std::chrono::milliseconds{10000}, uint64_t{64} << 20};
};

struct publisher_stats {
  uint64_t last_seq = 0;
  uint64_t retained_rows = 0;
  uint64_t max_retained_rows = 0;
  uint64_t floor = 0;            // rows up to this sequence number may be gone
  uint64_t evicted_rows = 0;     // dropped from the window (ever)
  uint64_t log_entries = 0;      // the publication log (<= 2 x retained + 1024)
  uint64_t resends = 0;          // full resends to subscribers older than the window
  uint64_t gaps_refused = 0;     // such subscribers refused: no resend source
  uint64_t auth_failures = 0;    // subscribers that did not prove the secret
  uint64_t subscribed = 0;       // connections now past the handshake
  connection_stats connections;  // the port's (open, refused, accept errors, timeouts)
};

class update_publisher final : public actors::row_update_sink {
 public:
  explicit update_publisher(publisher_config config);
  ~update_publisher() override;
  status start();
  uint16_t port() const;
  void stop();

  // row_update_sink: copies the rows' weights and versions.
  void rows_updated(const row_layout& layout, std::span<const uint64_t> keys,
                    const_rows_span rows) override;
  // The same from plain arrays (weights: keys.size() x dim).
  void publish(std::span<const uint64_t> keys, std::span<const float> weights,
               std::span<const uint64_t> versions);
  void add_local_subscriber(std::function<void(const wire::update_batch&)> deliver);
  // Replaces the resend source (null: none), e.g. once the shards it asks
  // exist, and none again before they stop; waits for resends running
  // from the old one.
  void set_resend(resend_source source);
  uint64_t last_seq() const;
  publisher_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

struct subscriber_config {
  wire::endpoint publisher;
  std::string table = "default";
  std::chrono::milliseconds retry{100};
  // The cluster secret: rows are applied only from a publisher that proves
  // it. Empty: start() refuses.
  auth::secret secret;
  // Every receive, the handshake's included; the publisher sends an empty
  // batch every `keepalive` (below this) when there is nothing new.
  std::chrono::milliseconds timeout{30000};
};

class update_subscriber {
 public:
  update_subscriber(subscriber_config config, serving_service& service);
  ~update_subscriber();
  status start();
  void stop();
  uint64_t stream() const;
  uint64_t last_seq() const;
  uint64_t batches_applied() const;
  uint64_t reconnects() const;
  // Publishers that did not prove the secret (their rows were refused).
  uint64_t auth_failures() const;
  // Refusals from the publisher (a gap it cannot resend, an unknown table,
  // a secret it did not accept); stale() while the last answer was one.
  uint64_t refusals() const;
  bool stale() const;
  std::string last_error() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serving
