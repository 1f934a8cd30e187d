#include "serving/update_stream.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "serving/listener.hpp"

namespace strata::serving {

namespace asio = boost::asio;
using asio::ip::tcp;

// --- publisher ------------------------------------------------------------------

struct update_publisher::impl {
  publisher_config config;
  mutable std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  uint64_t seq = 0;
  struct retained_row {
    uint64_t seq = 0;
    uint64_t version = 0;
    std::vector<float> weights;
  };
  std::unordered_map<uint64_t, retained_row> retained;
  // (seq, key) in publication order: a sender walks it from its position;
  // an entry whose key was republished later is skipped.
  std::vector<std::pair<uint64_t, uint64_t>> log;

  asio::io_context io;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::thread accept_thread;
  struct subscriber {
    std::shared_ptr<wire::frame_socket> socket;  // null: local
    std::function<void(const wire::update_batch&)> deliver;
    std::thread thread;
    bool subscribed = false;  // past the subscribe request (guarded by mutex)
  };
  std::list<subscriber> subscribers;

  // Collects the rows published after `after` (log position `pos`);
  // returns false when there is nothing new.
  bool collect(uint64_t& after, wire::update_batch& batch) {
    batch.keys.clear();
    batch.versions.clear();
    batch.weights.clear();
    auto it = std::upper_bound(log.begin(), log.end(), std::make_pair(after, ~uint64_t{0}));
    for (; it != log.end(); ++it) {
      const auto& row = retained.at(it->second);
      if (row.seq != it->first) continue;  // superseded by a later entry
      batch.keys.push_back(it->second);
      batch.versions.push_back(row.version);
      batch.weights.insert(batch.weights.end(), row.weights.begin(), row.weights.end());
    }
    if (log.empty() || log.back().first <= after) return false;
    after = log.back().first;
    batch.seq = after;
    return !batch.keys.empty();
  }

  // One sender per subscriber: sends what is new every interval, or as
  // soon as max_rows new rows wait.
  void send_loop(subscriber& sub, uint64_t after) {
    wire::update_batch batch;
    batch.table = config.table;
    batch.stream = config.stream;
    batch.dim = config.dim;
    std::vector<std::byte> payload;
    std::unique_lock lock(mutex);
    sub.subscribed = true;
    for (;;) {
      changed.wait_for(lock, config.interval,
                       [&] { return stopping || seq - after >= config.max_rows; });
      // On stop, one last send: rows published before stop() are not lost.
      const bool last = stopping;
      if (collect(after, batch)) {
        lock.unlock();
        bool sent = true;
        if (sub.socket) {
          payload.clear();
          wire::encode(payload, batch);
          sent = sub.socket->send(wire::frame_type::updates, 0, payload).has_value();
        } else {
          sub.deliver(batch);
        }
        lock.lock();
        if (!sent) return;  // subscriber gone
      }
      if (last) return;
    }
  }

  void accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket peer(io);
      acceptor.accept(peer, ec);
      {
        std::lock_guard lock(mutex);
        if (stopping) return;
      }
      if (ec) continue;
      auto socket = std::make_shared<wire::frame_socket>(
          wire::frame_socket::adopt(peer.release(), "subscriber"));
      // The subscribe request comes first; a bad one closes the connection.
      std::lock_guard lock(mutex);
      subscribers.push_back({socket, {}, {}});
      auto& sub = subscribers.back();
      sub.thread = std::thread([this, &sub] {
        auto first = sub.socket->receive(1 << 16);
        if (!first || first->header.type != wire::frame_type::subscribe) return;
        auto req = wire::decode_subscribe(first->payload);
        if (!req || req->table != config.table) {
          std::vector<std::byte> payload;
          wire::encode(payload,
                       wire::error_reply{uint16_t(errc::not_found),
                                         "publisher of table '" + config.table +
                                             "' has no table '" + (req ? req->table : "?") + "'"});
          (void)sub.socket->send(wire::frame_type::error, 0, payload);
          return;
        }
        // Another stream's sequence numbers mean nothing here: resend all.
        send_loop(sub, req->stream == config.stream ? req->after_seq : 0);
      });
    }
  }
};

update_publisher::update_publisher(publisher_config config) : impl_(std::make_unique<impl>()) {
  impl_->config = std::move(config);
}
update_publisher::~update_publisher() { stop(); }

status update_publisher::start() {
  auto& p = *impl_;
  STRATA_TRY(open_listener(p.acceptor, p.config.bind_address, p.config.port, "update publisher"));
  p.port = p.acceptor.local_endpoint().port();
  p.accept_thread = std::thread([this] { impl_->accept_loop(); });
  return {};
}

uint16_t update_publisher::port() const { return impl_->port; }

uint64_t update_publisher::last_seq() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seq;
}

void update_publisher::stop() {
  auto& p = *impl_;
  {
    std::lock_guard lock(p.mutex);
    if (p.stopping) return;
    p.stopping = true;
    // Connections still waiting for their subscribe request are closed now;
    // subscribed ones get a last send first (send_loop) and close below.
    for (auto& s : p.subscribers)
      if (s.socket && !s.subscribed) s.socket->close();
  }
  p.changed.notify_all();
  if (p.accept_thread.joinable()) {
    ::shutdown(p.acceptor.native_handle(), SHUT_RDWR);
    p.accept_thread.join();
  }
  boost::system::error_code ec;
  p.acceptor.close(ec);
  for (auto& s : p.subscribers) {
    if (s.thread.joinable()) s.thread.join();
    if (s.socket) s.socket->close();
  }
}

void update_publisher::publish(std::span<const uint64_t> keys, std::span<const float> weights,
                               std::span<const uint64_t> versions) {
  auto& p = *impl_;
  const uint32_t dim = p.config.dim;
  STRATA_ASSERT(weights.size() == keys.size() * dim && versions.size() == keys.size(),
                "publish: weights must be keys x dim, one version per key");
  {
    std::lock_guard lock(p.mutex);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto& row = p.retained[keys[i]];
      if (row.seq != 0 && versions[i] < row.version) continue;  // never retain an older row
      row.seq = ++p.seq;
      row.version = versions[i];
      row.weights.assign(weights.begin() + i * dim, weights.begin() + (i + 1) * dim);
      p.log.emplace_back(row.seq, keys[i]);
    }
    // Keep the log proportional to the retained rows: drop superseded
    // entries (senders hold sequence numbers, not log positions).
    if (p.log.size() > 2 * p.retained.size() + 1024) {
      std::erase_if(p.log, [&](const auto& e) { return p.retained.at(e.second).seq != e.first; });
    }
  }
  p.changed.notify_all();
}

void update_publisher::rows_updated(const row_layout& layout, std::span<const uint64_t> keys,
                                    const_rows_span rows) {
  const uint32_t dim = impl_->config.dim;
  STRATA_ASSERT(layout.dim == dim, "update publisher: the shard's dim differs from the table's");
  std::vector<float> weights(keys.size() * dim);
  std::vector<uint64_t> versions(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    versions[i] = meta_of(rows[i]).version;
    std::memcpy(weights.data() + i * dim, weights_of(rows[i]), size_t{4} * dim);
  }
  publish(keys, weights, versions);
}

void update_publisher::add_local_subscriber(
    std::function<void(const wire::update_batch&)> deliver) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.subscribers.push_back({nullptr, std::move(deliver), {}});
  auto& sub = p.subscribers.back();
  sub.thread = std::thread([this, &sub] { impl_->send_loop(sub, 0); });
}

// --- subscriber -----------------------------------------------------------------

struct update_subscriber::impl {
  subscriber_config config;
  serving_service& service;
  std::atomic<uint64_t> stream{0}, seq{0}, batches{0}, reconnects{0};
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::shared_ptr<wire::frame_socket> socket;
  std::thread thread;

  impl(subscriber_config c, serving_service& s) : config(std::move(c)), service(s) {}

  void run() {
    for (uint64_t attempt = 0;; ++attempt) {
      {
        std::unique_lock lock(mutex);
        if (attempt > 0) {
          ++reconnects;
          wake.wait_for(lock, config.retry, [&] { return stopping; });
        }
        if (stopping) return;
      }
      auto s = wire::frame_socket::connect(config.publisher);
      if (!s) continue;
      {
        std::lock_guard lock(mutex);
        if (stopping) return;
        socket = std::make_shared<wire::frame_socket>(std::move(*s));
      }
      std::vector<std::byte> payload;
      wire::encode(payload, wire::subscribe_request{config.table, stream.load(), seq.load()});
      if (!socket->send(wire::frame_type::subscribe, 0, payload)) continue;
      for (;;) {
        auto frame = socket->receive();
        if (!frame || frame->header.type != wire::frame_type::updates) break;
        auto batch = wire::decode_updates(frame->payload);
        if (!batch || batch->table != config.table) break;
        if (!service.apply_updates(batch->table, batch->keys, batch->weights, batch->versions))
          break;
        stream = batch->stream;
        seq = batch->seq;
        ++batches;
      }
    }
  }
};

update_subscriber::update_subscriber(subscriber_config config, serving_service& service)
    : impl_(std::make_unique<impl>(std::move(config), service)) {}
update_subscriber::~update_subscriber() { stop(); }
void update_subscriber::start() {
  impl_->thread = std::thread([this] { impl_->run(); });
}
void update_subscriber::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
    if (impl_->socket) impl_->socket->close();
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}
uint64_t update_subscriber::stream() const { return impl_->stream; }
uint64_t update_subscriber::last_seq() const { return impl_->seq; }
uint64_t update_subscriber::batches_applied() const { return impl_->batches; }
uint64_t update_subscriber::reconnects() const { return impl_->reconnects; }

}  // namespace strata::serving
