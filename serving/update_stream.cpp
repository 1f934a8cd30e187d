#include "serving/update_stream.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace strata::serving {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
// The roles' names in the proofs: an answer of one side is never valid
// for the other (a fake peer cannot reflect a challenge back).
constexpr const char* publisher_role = "update publisher";
constexpr const char* subscriber_role = "update subscriber";
// A batch on the wire holds at most this many rows (a resend of millions
// of rows goes in many frames, far below max_payload_bytes).
constexpr size_t max_batch_rows = 65536;
constexpr size_t max_batch_bytes = size_t{32} << 20;
// The handshake frames are small: nothing bigger is read before the peer
// proved the secret.
constexpr uint32_t max_handshake_payload = (1u << 16) + 64;

size_t batch_rows_for(uint32_t dim) {
  return std::clamp<size_t>(max_batch_bytes / (size_t{4} * dim + 16), 1, max_batch_rows);
}

std::vector<std::byte> error_payload(errc code, const std::string& message) {
  std::vector<std::byte> payload;
  wire::encode(payload, wire::error_reply{uint16_t(code), message});
  return payload;
}
}  // namespace

uint64_t default_retained_rows(uint32_t dim) {
  // Per row: the weights, the map node and its vector (~96 bytes), two
  // log entries (16 bytes each).
  const uint64_t per_row = uint64_t{4} * dim + 128;
  return std::max<uint64_t>(1024, (uint64_t{256} << 20) / per_row);
}

// --- publisher ------------------------------------------------------------------

struct update_publisher::impl {
  publisher_config config;
  uint64_t cap = 0;  // max retained rows
  mutable std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  uint64_t seq = 0;
  uint64_t floor = 0;  // the highest sequence number of a row dropped from the window
  uint64_t evicted = 0, resends = 0, gaps_refused = 0, subscribed = 0;
  // The resend source (config.resend, or set_resend's) and the resends
  // running from it (set_resend waits for them).
  std::shared_ptr<const resend_source> resend_fn;
  uint64_t resends_running = 0;
  std::atomic<uint64_t> auth_failures{0};
  struct retained_row {
    uint64_t seq = 0;
    uint64_t version = 0;
    std::vector<float> weights;
  };
  std::unordered_map<uint64_t, retained_row> retained;
  // (seq, key) in publication order: a sender walks it from its position;
  // an entry whose key was republished later is skipped. The window drops
  // rows from its front.
  std::deque<std::pair<uint64_t, uint64_t>> log;

  std::unique_ptr<connection_registry> connections;
  uint16_t port = 0;
  struct local_subscriber {
    std::function<void(const wire::update_batch&)> deliver;
    std::thread thread;
  };
  std::list<local_subscriber> locals;

  // Collects at most batch_rows_for(dim) rows published after `after`;
  // advances `after` past what it walked. False when nothing is new.
  bool collect(uint64_t& after, wire::update_batch& batch) {
    batch.keys.clear();
    batch.versions.clear();
    batch.weights.clear();
    if (log.empty() || log.back().first <= after) return false;
    const size_t limit = batch_rows_for(config.dim);
    auto it = std::upper_bound(log.begin(), log.end(), std::make_pair(after, ~uint64_t{0}));
    for (; it != log.end() && batch.keys.size() < limit; ++it) {
      const auto& row = retained.at(it->second);
      after = it->first;
      if (row.seq != it->first) continue;  // superseded by a later entry
      batch.keys.push_back(it->second);
      batch.versions.push_back(row.version);
      batch.weights.insert(batch.weights.end(), row.weights.begin(), row.weights.end());
    }
    batch.seq = after;
    return true;
  }

  // Drops the oldest rows beyond the cap (REQUIRES: mutex held).
  void trim_window() {
    while (retained.size() > cap && !log.empty()) {
      const auto [s, key] = log.front();
      log.pop_front();
      auto it = retained.find(key);
      if (it == retained.end() || it->second.seq != s) continue;  // superseded entry
      retained.erase(it);
      floor = s;
      ++evicted;
    }
    // Keep the log proportional to the retained rows: drop superseded
    // entries (senders hold sequence numbers, not log positions).
    if (log.size() > 2 * retained.size() + 1024)
      std::erase_if(log, [&](const auto& e) { return retained.at(e.second).seq != e.first; });
  }

  // A subscriber older than the window: every row from the resend source,
  // in batches that keep the subscriber's position (`after`: a broken
  // resend starts over), then `after` moves to where the window was when
  // the resend began. False: the subscriber is gone or was refused.
  // REQUIRES: lock held; released while sending.
  struct sink {
    std::function<bool(const wire::update_batch&)> send;  // false: the subscriber is gone
    std::function<void(const std::string&)> refuse;       // null: in-process
  };
  bool resend_all(std::unique_lock<std::mutex>& lock, uint64_t& after, const sink& to) {
    const bool local = !to.refuse;
    const uint64_t before = after;
    if (!resend_fn) {
      ++gaps_refused;
      const std::string what =
          "update publisher of table '" + config.table + "': rows after sequence number " +
          std::to_string(before) + " are no longer retained (the window holds rows after " +
          std::to_string(floor) + ", updates.max_retained_rows = " + std::to_string(cap) +
          ") and this publisher has no resend source: the subscriber must reload";
      if (local) {
        // An in-process subscriber cannot reload: it goes on with what is
        // retained, and the gap is on stderr and in the counters.
        std::fprintf(stderr, "%s\n", what.c_str());
        after = floor;
        return true;
      }
      lock.unlock();
      to.refuse(what);
      lock.lock();
      return false;
    }
    ++resends;
    ++resends_running;
    const auto source = resend_fn;
    const uint64_t resume = seq;
    std::fprintf(stderr,
                 "update publisher of table '%s': resending every row to a subscriber at "
                 "sequence number %llu (the window holds rows after %llu)\n",
                 config.table.c_str(), static_cast<unsigned long long>(before),
                 static_cast<unsigned long long>(floor));
    lock.unlock();
    wire::update_batch batch;
    batch.table = config.table;
    batch.stream = config.stream;
    batch.dim = config.dim;
    batch.seq = before;
    const size_t limit = batch_rows_for(config.dim);
    const uint32_t dim = config.dim;
    bool alive = true;
    auto emit = [&](std::span<const uint64_t> keys, std::span<const float> weights,
                    std::span<const uint64_t> versions) {
      for (size_t at = 0; alive && at < keys.size(); at += limit) {
        const size_t n = std::min(limit, keys.size() - at);
        batch.keys.assign(keys.begin() + at, keys.begin() + at + n);
        batch.versions.assign(versions.begin() + at, versions.begin() + at + n);
        batch.weights.assign(weights.begin() + at * dim, weights.begin() + (at + n) * dim);
        alive = to.send(batch);
      }
      return alive;
    };
    auto ok = (*source)(emit);
    if (!ok)
      std::fprintf(stderr, "update publisher of table '%s': resend failed: %s\n",
                   config.table.c_str(), ok.err().message().c_str());
    // Done: the subscriber's position moves to where the window stood when
    // the resend began (a connection broken after this resumes there, not
    // with another full resend).
    if (ok && alive && !local) {
      batch.keys.clear();
      batch.versions.clear();
      batch.weights.clear();
      batch.seq = resume;
      alive = to.send(batch);
    }
    lock.lock();
    --resends_running;
    changed.notify_all();
    if (!ok || !alive) return false;
    after = resume;
    return true;
  }

  // One sender per subscriber: sends what is new every interval, or as
  // soon as max_rows new rows wait; an empty batch every keepalive.
  void send_loop(uint64_t after, const sink& to) {
    const bool local = !to.refuse;
    wire::update_batch batch;
    batch.table = config.table;
    batch.stream = config.stream;
    batch.dim = config.dim;
    std::unique_lock lock(mutex);
    auto last_sent = std::chrono::steady_clock::now();
    bool more = false;  // a batch was full: send on without waiting
    for (;;) {
      if (!more)
        changed.wait_for(lock, config.interval,
                         [&] { return stopping || seq - after >= config.max_rows; });
      // On stop, one last send: rows published before stop() are not lost.
      const bool last = stopping;
      if (after < floor) {
        if (!resend_all(lock, after, to)) return;
        last_sent = std::chrono::steady_clock::now();
      }
      more = false;
      bool sending = collect(after, batch);
      if (!sending && std::chrono::steady_clock::now() - last_sent >= config.keepalive && !local) {
        batch.seq = after;  // nothing new: the position as it is
        sending = true;
      }
      if (sending) {
        more = seq > after;
        lock.unlock();
        const bool sent = to.send(batch);
        last_sent = std::chrono::steady_clock::now();
        lock.lock();
        if (!sent) return;  // subscriber gone
      }
      if (last && !more) return;
    }
  }

  // The subscribe handshake (docs/serving.md, "Online updates"), then the
  // stream; runs on the connection's thread (connection_registry).
  void serve(tcp::socket& peer, const std::string& name, connection_registry::handle& h) {
    auto socket = wire::frame_socket::borrow(peer, name);
    socket.set_budget(&connections->buffers());  // the handshake frames are charged too
    h.in_request();
    auto first = socket.receive(max_handshake_payload);
    if (!first) return;
    if (first->header.type != wire::frame_type::subscribe) {
      (void)socket.send(
          wire::frame_type::error, 0,
          error_payload(errc::invalid_argument, "update publisher: expected a subscribe frame"));
      return;
    }
    auto req = wire::decode_subscribe(first->payload);
    if (!req) {
      (void)socket.send(wire::frame_type::error, 0,
                        error_payload(errc::invalid_argument, req.err().message()));
      return;
    }
    auto own = auth::fresh_nonce();
    if (!own) return;
    wire::challenge_frame challenge;
    challenge.nonce = *own;
    challenge.proof =
        auth::prove(config.secret, updates_auth_context, publisher_role, req->nonce, *own);
    std::vector<std::byte> payload;
    wire::encode(payload, challenge);
    if (!socket.send(wire::frame_type::challenge, 0, payload)) return;
    auto answer = socket.receive(max_handshake_payload);
    if (!answer) return;
    auto proof = answer->header.type == wire::frame_type::proof
                     ? wire::decode_proof(answer->payload)
                     : expected<wire::proof_frame>(error(errc::invalid_argument, "no proof"));
    if (!proof || !auth::same_mac(proof->proof, auth::prove(config.secret, updates_auth_context,
                                                            subscriber_role, *own, req->nonce))) {
      ++auth_failures;
      (void)socket.send(
          wire::frame_type::error, 0,
          error_payload(errc::invalid_argument, "update publisher: the subscriber " + name +
                                                    " did not prove the cluster secret"));
      return;
    }
    if (req->table != config.table) {
      (void)socket.send(wire::frame_type::error, 0,
                        error_payload(errc::not_found, "publisher of table '" + config.table +
                                                           "' has no table '" + req->table + "'"));
      return;
    }
    h.no_deadline();  // a stream: the keepalive and SO_SNDTIMEO bound it
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      ++subscribed;
    }
    std::vector<std::byte> out;
    sink to;
    to.send = [&](const wire::update_batch& batch) {
      out.clear();
      wire::encode(out, batch);
      return socket.send(wire::frame_type::updates, 0, out).has_value();
    };
    to.refuse = [&](const std::string& what) {
      (void)socket.send(wire::frame_type::error, 0, error_payload(errc::unavailable, what));
    };
    // Another stream's sequence numbers mean nothing here: from 0.
    send_loop(req->stream == config.stream ? req->after_seq : 0, to);
    std::lock_guard lock(mutex);
    --subscribed;
    changed.notify_all();  // stop() waits for the last sends
  }
};

update_publisher::update_publisher(publisher_config config) : impl_(std::make_unique<impl>()) {
  impl_->config = std::move(config);
  impl_->cap = impl_->config.max_retained_rows != 0 ? impl_->config.max_retained_rows
                                                    : default_retained_rows(impl_->config.dim);
  if (impl_->config.resend)
    impl_->resend_fn = std::make_shared<const resend_source>(impl_->config.resend);
}
update_publisher::~update_publisher() { stop(); }

status update_publisher::start() {
  auto& p = *impl_;
  if (p.config.secret.empty())
    return error(errc::invalid_argument,
                 "update publisher of table '" + p.config.table +
                     "': no cluster secret (the manifest's cluster_secret): subscribers "
                     "could not tell it from any other process");
  p.connections = std::make_unique<connection_registry>("update publisher", p.config.connections);
  STRATA_TRY(p.connections->start(p.config.bind_address, p.config.port,
                                  [&p](tcp::socket& s, const std::string& name,
                                       connection_registry::handle& h) { p.serve(s, name, h); }));
  p.port = p.connections->port();
  return {};
}

uint16_t update_publisher::port() const { return impl_->port; }

uint64_t update_publisher::last_seq() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seq;
}

publisher_stats update_publisher::stats() const {
  auto& p = *impl_;
  publisher_stats out;
  {
    std::lock_guard lock(p.mutex);
    out.last_seq = p.seq;
    out.retained_rows = p.retained.size();
    out.max_retained_rows = p.cap;
    out.floor = p.floor;
    out.evicted_rows = p.evicted;
    out.log_entries = p.log.size();
    out.resends = p.resends;
    out.gaps_refused = p.gaps_refused;
    out.subscribed = p.subscribed;
  }
  out.auth_failures = p.auth_failures;
  if (p.connections) out.connections = p.connections->stats();
  return out;
}

void update_publisher::stop() {
  auto& p = *impl_;
  {
    std::unique_lock lock(p.mutex);
    if (p.stopping) return;
    p.stopping = true;
    p.changed.notify_all();
    // Subscribed connections get a last send (send_loop), bounded by the
    // socket's send timeout; the rest are closed by the registry.
    p.changed.wait_for(lock, std::chrono::seconds(30), [&] { return p.subscribed == 0; });
  }
  if (p.connections) p.connections->stop();
  for (auto& l : p.locals)
    if (l.thread.joinable()) l.thread.join();
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
    p.trim_window();
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

void update_publisher::set_resend(resend_source source) {
  auto& p = *impl_;
  std::unique_lock lock(p.mutex);
  p.resend_fn = source ? std::make_shared<const resend_source>(std::move(source)) : nullptr;
  p.changed.wait(lock, [&] { return p.resends_running == 0; });
}

void update_publisher::add_local_subscriber(
    std::function<void(const wire::update_batch&)> deliver) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.locals.push_back({std::move(deliver), {}});
  auto& l = p.locals.back();
  l.thread = std::thread([&p, &l] {
    impl::sink to;
    to.send = [&l](const wire::update_batch& b) {
      l.deliver(b);
      return true;
    };
    p.send_loop(0, to);
  });
}

// --- subscriber -----------------------------------------------------------------

struct update_subscriber::impl {
  subscriber_config config;
  serving_service& service;
  std::atomic<uint64_t> stream{0}, seq{0}, batches{0}, reconnects{0}, auth_failures{0}, refusals{0};
  std::atomic<bool> stale{false};
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::string last_error;  // guarded by mutex
  std::shared_ptr<wire::frame_socket> socket;
  std::thread thread;

  impl(subscriber_config c, serving_service& s) : config(std::move(c)), service(s) {}

  // Logged once per distinct message (a publisher that keeps refusing
  // does not fill the log every retry).
  void note(const std::string& what) {
    std::lock_guard lock(mutex);
    if (what == last_error) return;
    last_error = what;
    std::fprintf(stderr, "update subscriber (%s, table '%s'): %s\n",
                 config.publisher.to_string().c_str(), config.table.c_str(), what.c_str());
  }

  // Subscribe and the mutual proof; false (noted) when the publisher did
  // not prove the secret or refused.
  bool handshake(wire::frame_socket& s) {
    auto own = auth::fresh_nonce();
    if (!own) return false;
    std::vector<std::byte> payload;
    wire::encode(payload, wire::subscribe_request{config.table, stream.load(), seq.load(), *own});
    if (!s.send(wire::frame_type::subscribe, 0, payload)) return false;
    auto frame = s.receive(max_handshake_payload);
    if (!frame) return false;
    if (frame->header.type == wire::frame_type::error) {
      auto e = wire::decode_error(frame->payload);
      ++refusals;
      note("refused: " + (e ? e->message : e.err().message()));
      return false;
    }
    auto challenge =
        frame->header.type == wire::frame_type::challenge
            ? wire::decode_challenge(frame->payload)
            : expected<wire::challenge_frame>(error(errc::invalid_argument, "no challenge frame"));
    if (!challenge ||
        !auth::same_mac(challenge->proof, auth::prove(config.secret, updates_auth_context,
                                                      publisher_role, *own, challenge->nonce))) {
      ++auth_failures;
      stale = true;
      note("the publisher did not prove the cluster secret: its rows are refused");
      return false;
    }
    wire::proof_frame answer;
    answer.proof =
        auth::prove(config.secret, updates_auth_context, subscriber_role, challenge->nonce, *own);
    payload.clear();
    wire::encode(payload, answer);
    return s.send(wire::frame_type::proof, 0, payload).has_value();
  }

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
      auto s = wire::frame_socket::connect(config.publisher, config.timeout);
      if (!s) continue;
      {
        std::lock_guard lock(mutex);
        if (stopping) return;
        socket = std::make_shared<wire::frame_socket>(std::move(*s));
      }
      if (!handshake(*socket)) continue;
      for (;;) {
        auto frame = socket->receive();
        if (!frame) break;
        if (frame->header.type == wire::frame_type::error) {
          auto e = wire::decode_error(frame->payload);
          ++refusals;
          stale = true;
          note("refused: " + (e ? e->message : e.err().message()));
          break;
        }
        if (frame->header.type != wire::frame_type::updates) break;
        auto batch = wire::decode_updates(frame->payload);
        if (!batch || batch->table != config.table) break;
        if (!service.apply_updates(batch->table, batch->keys, batch->weights, batch->versions))
          break;
        stream = batch->stream;
        seq = batch->seq;
        stale = false;
        ++batches;
      }
    }
  }
};

update_subscriber::update_subscriber(subscriber_config config, serving_service& service)
    : impl_(std::make_unique<impl>(std::move(config), service)) {}
update_subscriber::~update_subscriber() { stop(); }
status update_subscriber::start() {
  if (impl_->config.secret.empty())
    return error(errc::invalid_argument,
                 "update subscriber of " + impl_->config.publisher.to_string() +
                     ": no cluster secret (the manifest's cluster_secret): it could not tell "
                     "the publisher from any other process");
  impl_->thread = std::thread([this] { impl_->run(); });
  return {};
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
uint64_t update_subscriber::auth_failures() const { return impl_->auth_failures; }
uint64_t update_subscriber::refusals() const { return impl_->refusals; }
bool update_subscriber::stale() const { return impl_->stale; }
std::string update_subscriber::last_error() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->last_error;
}

}  // namespace strata::serving
