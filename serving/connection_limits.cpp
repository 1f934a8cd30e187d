#include "serving/connection_limits.hpp"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>

#include "serving/listener.hpp"

namespace strata::serving {

namespace asio = boost::asio;
using asio::ip::tcp;
using clock = std::chrono::steady_clock;

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch())
      .count();
}
int64_t after(std::chrono::milliseconds d) {
  return now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}
bool out_of_resources(const boost::system::error_code& ec) {
  const int v = ec.value();
  return ec.category() == boost::system::system_category() &&
         (v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM);
}
}  // namespace

void connection_registry::handle::wait_for_request() {
  deadline_ = after(r_.settings_.idle_timeout);
}
void connection_registry::handle::in_request() { deadline_ = after(r_.settings_.request_timeout); }
void connection_registry::handle::no_deadline() { deadline_ = 0; }

connection_registry::connection_registry(std::string what, connection_settings settings)
    : what_(std::move(what)), settings_(settings), buffers_(settings.max_buffered_bytes) {}

connection_registry::~connection_registry() { stop(); }

status connection_registry::start(const std::string& bind_address, uint16_t port,
                                  serve_fn serve, refuse_fn refuse) {
  STRATA_TRY(open_listener(acceptor_, bind_address, port, what_));
  port_ = acceptor_.local_endpoint().port();
  serve_ = std::move(serve);
  refuse_ = std::move(refuse);
  accept_thread_ = std::thread([this] { accept_loop(); });
  watchdog_thread_ = std::thread([this] { watchdog_loop(); });
  return {};
}

std::list<connection_registry::connection> connection_registry::take_finished() {
  std::list<connection> out;
  for (auto it = connections_.begin(); it != connections_.end();) {
    auto next = std::next(it);
    if (it->done) out.splice(out.end(), connections_, it);
    it = next;
  }
  return out;
}

void connection_registry::accept_loop() {
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    boost::system::error_code ec;
    tcp::socket peer(io_);
    acceptor_.accept(peer, ec);
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    if (ec) {
      ++accept_errors_;
      // Out of descriptors or buffers: accept fails at once until some
      // close, so retrying at once spins a core. Wait (stop() wakes us).
      if (out_of_resources(ec)) {
        ++backoffs_;
        wake_.wait_for(lock, backoff, [&] { return stopping_; });
        backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
      }
      continue;
    }
    backoff = std::chrono::milliseconds(10);
    ++accepted_;
    if (open_ >= settings_.max_connections) {
      ++refused_;
      lock.unlock();
      if (refuse_) refuse_(peer.native_handle());
      peer.close(ec);
      continue;
    }
    std::string name;
    auto remote = peer.remote_endpoint(ec);
    name = ec ? "client" : remote.address().to_string() + ":" + std::to_string(remote.port());
    // Bounds each blocked write too (a client that never reads its reply).
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(settings_.request_timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((settings_.request_timeout.count() % 1000) * 1000);
    ::setsockopt(peer.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ++open_;
    connections_.emplace_back();
    auto* entry = &connections_.back();  // std::list: stable
    entry->fd = peer.native_handle();
    entry->deadline = after(settings_.idle_timeout);
    entry->thread = std::thread(
        [this, entry, name = std::move(name), s = std::make_shared<tcp::socket>(std::move(peer))] {
          handle h(*this, entry->deadline);
          try {
            serve_(*s, name, h);
          } catch (const std::exception&) {
            // A connection's failure ends that connection only.
          }
          {
            // Forget the descriptor before closing it: the watchdog and
            // stop() must never shut down whatever reuses its number.
            std::lock_guard lock(mutex_);
            entry->fd = -1;
            entry->done = true;
            --open_;
          }
          boost::system::error_code ec;
          s->close(ec);
        });
  }
}

void connection_registry::watchdog_loop() {
  const auto tick = std::clamp(
      std::min(settings_.idle_timeout, settings_.request_timeout) / 4,
      std::chrono::milliseconds(10), std::chrono::milliseconds(250));
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, tick, [&] { return stopping_; });
    if (stopping_) break;
    const int64_t now = now_ns();
    for (auto& c : connections_) {
      const int64_t d = c.deadline.load();
      if (c.fd >= 0 && d != 0 && now > d) {
        // Wakes the connection's blocked read or write, which then fails.
        ::shutdown(c.fd, SHUT_RDWR);
        c.deadline = 0;
        ++timeouts_;
      }
    }
    auto finished = take_finished();
    lock.unlock();
    for (auto& c : finished) c.thread.join();  // outside the lock: they may still be exiting
    lock.lock();
  }
}

void connection_registry::stop() {
  std::list<connection> all;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& c : connections_)
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
  }
  wake_.notify_all();
  if (accept_thread_.joinable()) {
    // Unblock accept(): shutting a listening socket down wakes it on Linux.
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    accept_thread_.join();
  }
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
  boost::system::error_code ec;
  acceptor_.close(ec);
  {
    std::lock_guard lock(mutex_);
    all.splice(all.end(), connections_);
  }
  for (auto& c : all)
    if (c.thread.joinable()) c.thread.join();
}

connection_stats connection_registry::stats() const {
  connection_stats s;
  s.open = open_;
  s.accepted = accepted_;
  s.refused_over_cap = refused_;
  s.accept_errors = accept_errors_;
  s.accept_backoffs = backoffs_;
  s.timeouts = timeouts_;
  s.buffered_bytes = buffers_.used();
  s.buffer_refusals = buffers_.refusals();
  return s;
}

}  // namespace strata::serving
