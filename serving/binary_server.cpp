#include "serving/binary_server.hpp"

#include <boost/asio.hpp>
#include <atomic>

#include "client/frame_socket.hpp"
#include "serving/connection_limits.hpp"
#include "serving/metadata_requests.hpp"

namespace strata::serving {

namespace asio = boost::asio;
using asio::ip::tcp;

// Reply memory a connection keeps between requests (see serve()).
constexpr uint64_t kept_reply_bytes = 512 * 1024;

struct binary_server::impl {
  lookup_service& service;
  connection_registry connections;
  std::atomic<uint64_t> updates_refused{0};

  impl(lookup_service& s, connection_settings settings)
      : service(s), connections("serving binary port", settings) {}

  static void send_error(wire::frame_socket& socket, uint64_t request, const error& e) {
    std::vector<std::byte> payload;
    wire::encode(payload, wire::error_reply{static_cast<uint16_t>(e.code()), e.message()});
    (void)socket.send(wire::frame_type::error, request, payload);
  }

  void serve(tcp::socket& peer, const std::string& name, connection_registry::handle& deadline) {
    auto socket = wire::frame_socket::borrow(peer, name);
    socket.set_budget(&connections.buffers());
    lookup_result rows;
    uint64_t rows_charged = 0;  // bytes of `rows` charged to the budget
    std::vector<std::byte> out;
    wire::frame received;  // reused: no allocation per request
    auto* frame = &received;
    for (;;) {
      // idle_timeout until the next request's first byte, then
      // request_timeout for all of it: a request dripped a byte at a time
      // cannot hold the connection.
      deadline.wait_for_request();
      boost::system::error_code waited;
      peer.wait(tcp::socket::wait_read, waited);
      deadline.in_request();
      if (auto ok = socket.receive_into(received); !ok) {
        // A broken header or checksum, or no room: say why, then drop the
        // stream (it cannot be resynchronized).
        if (ok.err().code() != errc::unavailable) send_error(socket, 0, ok.err());
        break;
      }
      const uint64_t id = frame->header.request;
      // ack(n): how many keys the request carried.
      auto send_ack = [&](size_t n) {
        out.clear();
        wire::writer(out).u32(static_cast<uint32_t>(n));
        return static_cast<bool>(socket.send(wire::frame_type::ack, id, out));
      };
      bool keep = true;
      switch (frame->header.type) {
        case wire::frame_type::lookup: {
          auto req = wire::decode_key_request(frame->payload);
          if (!req) {
            send_error(socket, id, req.err());
            break;
          }
          // The reply's memory is bounded before it is allocated.
          auto reply = service.reply_bytes(req->table, req->keys.size());
          if (!reply) {
            send_error(socket, id, reply.err());
            break;
          }
          *reply += lookup_result::counts_bytes;  // an encoded reply holds dim and n too
          if (*reply > rows_charged) {
            if (!connections.buffers().try_take(*reply - rows_charged)) {
              send_error(socket, id,
                         error(errc::unavailable,
                               "a " + std::to_string(*reply) +
                                   "-byte reply does not fit the server's buffers (" +
                                   std::to_string(connections.buffers().used()) + " of " +
                                   std::to_string(connections.buffers().cap()) +
                                   " bytes in use); retry later"));
              break;
            }
            rows_charged = *reply;
          }
          // A serving node's store writes the rows payload itself (dim, n,
          // versions, weights): it is sent as it lies.
          rows.encoded = true;
          auto ok = service.lookup(req->table, req->keys, rows);
          if (!ok) {
            send_error(socket, id, ok.err());
            break;
          }
          if (rows.has_payload()) {
            keep = static_cast<bool>(socket.send(wire::frame_type::rows, id, rows.payload));
            if (keep) service.finish_request();
            break;
          }
          // dim, n, then the versions and weights straight from the result.
          out.clear();
          wire::writer w(out);
          w.u32(rows.dim);
          w.u32(static_cast<uint32_t>(rows.versions.size()));
          keep = static_cast<bool>(
              socket.send_parts(wire::frame_type::rows, id,
                                {std::span<const std::byte>(out),
                                 std::as_bytes(std::span<const uint64_t>(rows.versions)),
                                 std::as_bytes(std::span<const float>(rows.weights))}));
          if (keep) service.finish_request();
          break;
        }
        case wire::frame_type::prefetch: {
          auto req = wire::decode_key_request(frame->payload);
          status ok = req ? service.prefetch(req->table, req->keys) : status(req.err());
          if (!ok) {
            send_error(socket, id, ok.err());
            break;
          }
          keep = send_ack(req->keys.size());
          break;
        }
        case wire::frame_type::updates:
          // Rows come only from the configured publishers, over the
          // subscriber's own connection (serving/update_stream.hpp): a
          // client of the lookup port could otherwise write any row with
          // version 2^64-1, which training could never correct.
          ++updates_refused;
          send_error(socket, id,
                     error(errc::invalid_argument,
                           "updates are accepted only from the configured publishers "
                           "(serving.subscribe), not on the lookup port"));
          break;
        case wire::frame_type::push: {
          auto req = wire::decode_push(frame->payload);
          status ok = req ? service.push(req->table, req->dim, req->keys, req->grads, req->id)
                          : status(req.err());
          if (!ok) {
            send_error(socket, id, ok.err());
            break;
          }
          keep = send_ack(req->keys.size());
          break;
        }
        case wire::frame_type::tables:
        case wire::frame_type::list_keys:
          keep = answer_metadata_request(service, socket, *frame);
          break;
        default:
          send_error(socket, id,
                     error(errc::invalid_argument, "frame type " +
                                                       std::to_string(int(frame->header.type)) +
                                                       " is not a request a serving node answers"));
      }
      // A large request or reply gives its memory back once answered. A
      // reply buffer up to 512 KiB (a lookup of ~1900 rows of dim 64) is
      // kept, still charged: freeing and zero-filling a batch-1024 reply on
      // every request cost each lookup an allocation, a memset and page
      // faults. 1024 connections keep at most half the default budget.
      socket.trim(received);
      if (rows_charged > kept_reply_bytes) {
        rows = lookup_result{};
        connections.buffers().give(rows_charged);
        rows_charged = 0;
      }
      if (!keep) break;
    }
    connections.buffers().give(rows_charged);
  }
};

binary_server::binary_server(lookup_service& service, connection_settings settings)
    : impl_(std::make_unique<impl>(service, settings)) {}
binary_server::~binary_server() { stop(); }

status binary_server::start(const std::string& bind_address, uint16_t port) {
  // A serving node lists this server's counters in /health.
  if (auto* node = dynamic_cast<serving_service*>(&impl_->service))
    node->set_server_stats("binary", [i = impl_.get()] { return i->connections.stats(); });
  return impl_->connections.start(
      bind_address, port,
      [this](tcp::socket& s, const std::string& name, connection_registry::handle& h) {
        impl_->serve(s, name, h);
      });
}

uint16_t binary_server::port() const { return impl_->connections.port(); }

void binary_server::stop() {
  impl_->connections.stop();
  if (auto* node = dynamic_cast<serving_service*>(&impl_->service))
    node->set_server_stats("binary", nullptr);
}

connection_stats binary_server::stats() const { return impl_->connections.stats(); }

uint64_t binary_server::updates_refused() const { return impl_->updates_refused; }

}  // namespace strata::serving
