// Online updates from training to serving (docs/serving.md, "Online updates").
//
// update_publisher runs on a training node. Shards hand it the rows they
// updated (actors::row_update_sink: a copy under a mutex, never blocking a
// shard); it keeps the newest row of every updated key with a sequence
// number (one counter per publisher) and streams them to its subscribers
// every `interval`, or sooner once `max_rows` new rows are waiting. A
// subscriber connects to its port and sends subscribe(table, stream,
// after_seq); the publisher then sends every retained row with a sequence
// number above after_seq — all of them when `stream` is not its own (a new
// publisher, e.g. a restarted training cluster) — and afterwards the new
// ones as they come. Rows are sent weights only (serving layout) with their
// versions; a key updated twice between two sends is sent once, newest.
// In-process subscribers (a one-process cluster) register a callback with
// add_local_subscriber() and get the same batches on the sender thread.
//
// update_subscriber runs on a serving node: it connects to a publisher,
// subscribes, applies each batch through serving_service::apply_updates
// (which keeps versions from ever going backwards), remembers the stream
// and the last sequence number it applied, and on a broken connection
// reconnects (every `retry`) and resumes after that sequence number.
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
#include "serving/service.hpp"

namespace strata::serving {

struct publisher_config {
  std::string table = "default";
  uint32_t dim = 0;
  uint64_t stream = 1;  // this publisher's id (random per run; never 0)
  std::chrono::milliseconds interval{200};
  uint32_t max_rows = 4096;  // send early once this many new rows wait
  std::string bind_address = "127.0.0.1";
  uint16_t port = 0;  // 0: a free port (port())
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
  uint64_t last_seq() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

struct subscriber_config {
  wire::endpoint publisher;
  std::string table = "default";
  std::chrono::milliseconds retry{100};
};

class update_subscriber {
 public:
  update_subscriber(subscriber_config config, serving_service& service);
  ~update_subscriber();
  void start();
  void stop();
  uint64_t stream() const;
  uint64_t last_seq() const;
  uint64_t batches_applied() const;
  uint64_t reconnects() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::serving
