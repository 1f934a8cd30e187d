#include "serving/binary_server.hpp"

#include <boost/asio.hpp>
#include <list>
#include <mutex>
#include <thread>

#include "client/frame_socket.hpp"
#include "serving/listener.hpp"

namespace strata::serving {

namespace asio = boost::asio;
using asio::ip::tcp;

struct binary_server::impl {
  lookup_service& service;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::thread accept_thread;
  std::mutex mutex;
  struct connection {
    std::shared_ptr<wire::frame_socket> socket;  // null once the connection ended
    std::thread thread;
    bool done = false;
  };

  // Joins and forgets ended connections (REQUIRES: mutex held), so a
  // long-running node does not accumulate threads.
  void reap_finished() {
    for (auto it = connections.begin(); it != connections.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();  // it has finished its work; only its exit is left
      it = connections.erase(it);
    }
  }
  std::list<connection> connections;
  bool stopping = false;

  explicit impl(lookup_service& s) : service(s) {}

  static void send_error(wire::frame_socket& socket, uint64_t request, const error& e) {
    std::vector<std::byte> payload;
    wire::encode(payload, wire::error_reply{static_cast<uint16_t>(e.code()), e.message()});
    (void)socket.send(wire::frame_type::error, request, payload);
  }

  void serve(std::shared_ptr<wire::frame_socket> socket) {
    lookup_result rows;
    std::vector<std::byte> out;
    wire::frame received;  // reused: no allocation per request
    auto* frame = &received;
    for (;;) {
      if (auto ok = socket->receive_into(received); !ok) {
        // A broken header or checksum: say why, then drop the stream.
        if (ok.err().code() != errc::unavailable) send_error(*socket, 0, ok.err());
        return;
      }
      const uint64_t id = frame->header.request;
      // ack(n): how many keys the request carried.
      auto send_ack = [&](size_t n) {
        out.clear();
        wire::writer(out).u32(static_cast<uint32_t>(n));
        return static_cast<bool>(socket->send(wire::frame_type::ack, id, out));
      };
      switch (frame->header.type) {
        case wire::frame_type::lookup: {
          auto req = wire::decode_key_request(frame->payload);
          if (!req) {
            send_error(*socket, id, req.err());
            break;
          }
          auto ok = service.lookup(req->table, req->keys, rows);
          if (!ok) {
            send_error(*socket, id, ok.err());
            break;
          }
          // dim, n, then the versions and weights straight from the result.
          out.clear();
          wire::writer w(out);
          w.u32(rows.dim);
          w.u32(static_cast<uint32_t>(rows.versions.size()));
          if (!socket->send_parts(wire::frame_type::rows, id,
                                  {std::span<const std::byte>(out),
                                   std::as_bytes(std::span<const uint64_t>(rows.versions)),
                                   std::as_bytes(std::span<const float>(rows.weights))}))
            return;
          service.finish_request();
          break;
        }
        case wire::frame_type::prefetch: {
          auto req = wire::decode_key_request(frame->payload);
          status ok = req ? service.prefetch(req->table, req->keys) : status(req.err());
          if (!ok) {
            send_error(*socket, id, ok.err());
            break;
          }
          if (!send_ack(req->keys.size())) return;
          break;
        }
        case wire::frame_type::updates: {
          auto batch = wire::decode_updates(frame->payload);
          status ok = batch ? service.apply_updates(batch->table, batch->keys, batch->weights,
                                                    batch->versions)
                            : status(batch.err());
          if (!ok) {
            send_error(*socket, id, ok.err());
            break;
          }
          if (!send_ack(batch->keys.size())) return;
          break;
        }
        case wire::frame_type::push: {
          auto req = wire::decode_push(frame->payload);
          status ok = req ? service.push(req->table, req->dim, req->keys, req->grads, req->id)
                          : status(req.err());
          if (!ok) {
            send_error(*socket, id, ok.err());
            break;
          }
          if (!send_ack(req->keys.size())) return;
          break;
        }
        default:
          send_error(*socket, id,
                     error(errc::invalid_argument, "frame type " +
                                                       std::to_string(int(frame->header.type)) +
                                                       " is not a request a serving node answers"));
      }
    }
  }

  void accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket peer(io);
      acceptor.accept(peer, ec);
      std::lock_guard lock(mutex);
      if (stopping) return;
      if (ec) continue;
      std::string name;
      auto remote = peer.remote_endpoint(ec);
      name = ec ? "client" : remote.address().to_string() + ":" + std::to_string(remote.port());
      auto socket = std::make_shared<wire::frame_socket>(
          wire::frame_socket::adopt(peer.release(), std::move(name)));
      reap_finished();
      connections.push_back({socket, {}, false});
      auto* entry = &connections.back();  // std::list: stable
      entry->thread = std::thread([this, entry, socket]() mutable {
        serve(socket);
        std::lock_guard lock(mutex);
        entry->socket.reset();  // the descriptor closes with the last reference, below
        entry->done = true;
        socket.reset();
      });
    }
  }
};

binary_server::binary_server(lookup_service& service) : impl_(std::make_unique<impl>(service)) {}
binary_server::~binary_server() { stop(); }

status binary_server::start(const std::string& bind_address, uint16_t port) {
  STRATA_TRY(open_listener(impl_->acceptor, bind_address, port, "serving binary port"));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
  return {};
}

uint16_t binary_server::port() const { return impl_->port; }

void binary_server::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
    for (auto& c : impl_->connections)
      if (c.socket) c.socket->close();
  }
  if (impl_->accept_thread.joinable()) {
    // Unblock accept(): shutting a listening socket down wakes it on Linux.
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    impl_->accept_thread.join();
  }
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  for (auto& c : impl_->connections)
    if (c.thread.joinable()) c.thread.join();
}

}  // namespace strata::serving
