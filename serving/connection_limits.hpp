// Connection handling shared by the thread-per-connection TCP servers (the
// serving binary and HTTP servers, the training gateway, the admin API, the
// update publisher), so that no client can exhaust a server:
//
// - accept backs off when the process is out of descriptors or buffers
//   (EMFILE, ENFILE, ENOBUFS, ENOMEM: 10 ms doubling to 250 ms, reset by the
//   next success) instead of spinning on the error; the pending connection
//   waits in the listen backlog and is accepted once descriptors free up;
// - at most `max_connections` are open: one more is closed at once (after
//   `refuse(fd)` wrote a short answer, e.g. HTTP 503) and counted;
// - deadlines: a connection waiting for its next request is closed after
//   `idle_timeout`; once a request has started (handle::in_request()) it
//   must be read, answered and sent within `request_timeout`. A watchdog
//   thread shuts such sockets down, so a slowloris client (one byte every
//   few seconds) cannot hold a connection forever, nor a client that never
//   reads its reply; SO_SNDTIMEO bounds each blocked write as well;
// - ended connections are reaped without joining a thread while holding
//   the registry's mutex (they are moved out under it, joined outside);
//   stop() shuts every connection down and joins every thread;
// - `buffers()`, a byte budget shared by all connections, bounds the memory
//   requests and replies hold at once (receive buffers follow the bytes
//   that arrive and are charged as they grow, see client/frame_socket.hpp).
//
// Counters (stats()) are read by tests and /health: open connections,
// accepted, refused over the cap, accept errors and back-offs, timeouts,
// buffered bytes and requests refused for buffer space.
//
// Thread-safe. The serve function runs on its connection's own thread.
#pragma once

#include <utility>  // before asio: its awaitable.hpp uses std::exchange

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client/frame_socket.hpp"
#include "common/error.hpp"

namespace strata::serving {

struct connection_settings {
  size_t max_connections = 1024;
  std::chrono::milliseconds idle_timeout{60000};     // waiting for the next request
  std::chrono::milliseconds request_timeout{30000};  // one request: read, answer, send
  uint64_t max_buffered_bytes = uint64_t{1} << 30;   // requests + replies in memory, all connections
};

struct connection_stats {
  uint64_t open = 0;              // connections now open
  uint64_t accepted = 0;          // ever
  uint64_t refused_over_cap = 0;  // closed at once: max_connections were open
  uint64_t accept_errors = 0;     // accept failed (any error)
  uint64_t accept_backoffs = 0;   // of those, out of descriptors/buffers: backed off
  uint64_t timeouts = 0;          // closed by idle_timeout or request_timeout
  uint64_t buffered_bytes = 0;    // now held by requests and replies
  uint64_t buffer_refusals = 0;   // requests refused: max_buffered_bytes held
};

class connection_registry {
 public:
  // Given to the serve function: it says where its connection is, which
  // deadline applies.
  class handle {
   public:
    // Waiting for the next request: idle_timeout from now.
    void wait_for_request();
    // A request started: request_timeout from now.
    void in_request();
    // No deadline (a subscriber's stream, say); stop() still closes it.
    void no_deadline();

   private:
    friend class connection_registry;
    handle(connection_registry& r, std::atomic<int64_t>& deadline) : r_(r), deadline_(deadline) {}
    connection_registry& r_;
    std::atomic<int64_t>& deadline_;
  };

  // Serves one connection until it ends; must not close the socket (the
  // registry does, after it returns). Starts with wait_for_request().
  using serve_fn = std::function<void(boost::asio::ip::tcp::socket&, const std::string& peer,
                                      handle&)>;
  // Writes a refusal to a connection over the cap (non-blocking: the fd is
  // closed right after); may be empty.
  using refuse_fn = std::function<void(int fd)>;

  // `what` names the server in errors ("serving binary port").
  connection_registry(std::string what, connection_settings settings);
  ~connection_registry();
  connection_registry(const connection_registry&) = delete;
  connection_registry& operator=(const connection_registry&) = delete;

  // Binds and listens (port 0: a free one, see port()), then accepts on
  // its own thread.
  status start(const std::string& bind_address, uint16_t port, serve_fn serve,
               refuse_fn refuse = {});
  uint16_t port() const { return port_; }
  // Closes the listener and every connection, joins every thread. Idempotent.
  void stop();

  connection_stats stats() const;
  const connection_settings& settings() const { return settings_; }
  // The byte budget of requests and replies (frame_socket::set_budget).
  wire::byte_budget& buffers() { return buffers_; }

 private:
  struct connection {
    int fd = -1;  // -1 once its serve function returned (the registry closes it then)
    std::atomic<int64_t> deadline{0};  // steady-clock ns; 0: none
    std::thread thread;
    bool done = false;
  };
  void accept_loop();
  void watchdog_loop();
  // Moves ended connections out (REQUIRES: mutex_ held); the caller joins
  // them after unlocking.
  std::list<connection> take_finished();

  std::string what_;
  connection_settings settings_;
  wire::byte_budget buffers_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  uint16_t port_ = 0;
  serve_fn serve_;
  refuse_fn refuse_;
  std::thread accept_thread_, watchdog_thread_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // stop() wakes the watchdog and a backing-off accept
  std::list<connection> connections_;
  bool stopping_ = false;
  std::atomic<uint64_t> open_{0}, accepted_{0}, refused_{0}, accept_errors_{0}, backoffs_{0},
      timeouts_{0};
};

}  // namespace strata::serving
