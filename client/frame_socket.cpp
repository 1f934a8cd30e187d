#include "client/frame_socket.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstring>
#include <optional>

#include "common/crc32c.hpp"

namespace strata::wire {

namespace asio = boost::asio;
using asio::ip::tcp;

struct frame_socket::impl {
  // Own context and socket, or none when borrowing someone else's socket
  // (a socket of its own would register a reactor: 3 more descriptors).
  std::optional<asio::io_context> io;
  std::optional<tcp::socket> own;
  tcp::socket* s = nullptr;
  std::string peer;
  bool borrowed = false;           // the socket belongs to someone else
  byte_budget* budget = nullptr;   // charged for the payload buffer
  uint64_t charged = 0;            // bytes of the payload buffer charged to `budget`
};

frame_socket::frame_socket() : impl_(std::make_unique<impl>()) {
  impl_->io.emplace();
  impl_->own.emplace(*impl_->io);
  impl_->s = &*impl_->own;
}
frame_socket::~frame_socket() {
  if (!impl_) return;
  if (impl_->budget) impl_->budget->give(impl_->charged);
  boost::system::error_code ec;
  if (!impl_->borrowed)
    impl_->s->close(ec);
  else if (impl_->own && impl_->own->is_open())
    (void)impl_->own->release(ec);  // a borrowed descriptor: its owner closes it
}
frame_socket::frame_socket(frame_socket&&) noexcept = default;
frame_socket& frame_socket::operator=(frame_socket&&) noexcept = default;

expected<endpoint> parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return error(errc::invalid_argument, "\"" + text + "\": expected host:port");
  endpoint out;
  out.host = text.substr(0, colon);
  try {
    const unsigned long port = std::stoul(text.substr(colon + 1));
    if (port == 0 || port > 65535) throw std::out_of_range("port");
    out.port = static_cast<uint16_t>(port);
  } catch (const std::exception&) {
    return error(errc::invalid_argument, "\"" + text + "\": the port must be 1..65535");
  }
  return out;
}

namespace {
// Reads exactly `n` bytes with recv() on the blocking descriptor, so that
// SO_RCVTIMEO bounds each wait: asio's synchronous read retries a timed
// out recv with an unbounded poll, and the timeout never fired.
boost::system::error_code read_exact(tcp::socket& socket, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::recv(socket.native_handle(), p + done, n - done, 0);
    if (got > 0) {
      done += size_t(got);
    } else if (got == 0) {
      return asio::error::eof;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // A descriptor in non-blocking mode (asio may have set it) waits for
      // data as asio did; a blocking one timed out (SO_RCVTIMEO).
      if (!(::fcntl(socket.native_handle(), F_GETFL) & O_NONBLOCK))
        return asio::error::timed_out;
      pollfd p{socket.native_handle(), POLLIN, 0};
      (void)::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return boost::system::error_code(errno, boost::system::system_category());
    }
  }
  return {};
}

void set_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}
}  // namespace

expected<frame_socket> frame_socket::connect(const endpoint& peer,
                                             std::chrono::milliseconds timeout) {
  frame_socket s;
  s.impl_->peer = peer.to_string();
  boost::system::error_code ec;
  tcp::resolver resolver(*s.impl_->io);
  auto results = resolver.resolve(peer.host, std::to_string(peer.port), ec);
  if (!ec) asio::connect(*s.impl_->s, results, ec);
  if (ec) return error(errc::unavailable, s.impl_->peer + ": " + ec.message());
  s.impl_->s->set_option(tcp::no_delay(true), ec);
  if (timeout.count() > 0) set_timeout(s.impl_->s->native_handle(), timeout);
  return s;
}

frame_socket frame_socket::adopt(int fd, std::string peer_name) {
  frame_socket s;
  s.impl_->peer = std::move(peer_name);
  boost::system::error_code ec;
  s.impl_->s->assign(tcp::v4(), fd, ec);
  s.impl_->s->set_option(tcp::no_delay(true), ec);
  return s;
}

frame_socket frame_socket::borrow(boost::asio::ip::tcp::socket& socket, std::string peer_name) {
  frame_socket s(nullptr);
  s.impl_->s = &socket;
  s.impl_->borrowed = true;
  s.impl_->peer = std::move(peer_name);
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  return s;
}

frame_socket frame_socket::borrow(int fd, std::string peer_name) {
  frame_socket s = adopt(fd, std::move(peer_name));
  s.impl_->borrowed = true;
  return s;
}

frame_socket::frame_socket(std::nullptr_t) : impl_(std::make_unique<impl>()) {}

void frame_socket::set_budget(byte_budget* budget) {
  if (impl_->budget) impl_->budget->give(impl_->charged);
  impl_->charged = 0;
  impl_->budget = budget;
}

void frame_socket::trim(frame& f, size_t keep) {
  if (f.payload.capacity() <= keep) return;
  std::vector<std::byte>().swap(f.payload);
  if (impl_->budget) impl_->budget->give(impl_->charged);
  impl_->charged = 0;
}

bool frame_socket::is_open() const { return impl_ && impl_->s->is_open(); }
const std::string& frame_socket::peer() const { return impl_->peer; }

status frame_socket::send_raw(std::span<const std::byte> frames) {
  boost::system::error_code ec;
  asio::write(*impl_->s, asio::buffer(frames.data(), frames.size()), ec);
  if (ec) return error(errc::unavailable, impl_->peer + ": send failed: " + ec.message());
  return {};
}

status frame_socket::send(frame_type type, uint64_t request, std::span<const std::byte> payload) {
  return send_parts(type, request, {payload});
}

status frame_socket::send_parts(frame_type type, uint64_t request,
                                std::initializer_list<std::span<const std::byte>> parts) {
  // Header and payload parts in one gathered write (sendmsg): no copy of
  // the payload, and no allocation per frame (the header and the list of
  // pieces live on the stack; a reply is sent on every lookup).
  constexpr size_t max_pieces = 8;
  if (parts.size() + 1 > max_pieces)
    return error(errc::invalid_argument, impl_->peer + ": a frame of " +
                                             std::to_string(parts.size()) + " parts (at most " +
                                             std::to_string(max_pieces - 1) + ")");
  std::array<std::byte, header_bytes> header;
  uint32_t length = 0, crc = 0;
  std::array<asio::const_buffer, max_pieces> pieces;
  size_t count = 0;
  pieces[count++] = asio::buffer(header.data(), header.size());
  for (auto part : parts) {
    length += static_cast<uint32_t>(part.size());
    crc = crc32c_extend(crc, part.data(), part.size());
    pieces[count++] = asio::buffer(part.data(), part.size());
  }
  // The layout append_frame writes (client/wire.hpp): magic, version,
  // type, length, CRC32C of the payload, request id; little-endian.
  const uint32_t magic_field = magic;
  const uint16_t version_field = wire_version, type_field = static_cast<uint16_t>(type);
  std::memcpy(header.data(), &magic_field, 4);
  std::memcpy(header.data() + 4, &version_field, 2);
  std::memcpy(header.data() + 6, &type_field, 2);
  std::memcpy(header.data() + 8, &length, 4);
  std::memcpy(header.data() + 12, &crc, 4);
  std::memcpy(header.data() + 16, &request, 8);
  boost::system::error_code ec;
  asio::write(*impl_->s, std::span<const asio::const_buffer>(pieces.data(), count), ec);
  if (ec) return error(errc::unavailable, impl_->peer + ": send failed: " + ec.message());
  return {};
}

expected<frame> frame_socket::receive(uint32_t max_payload) {
  frame out;
  auto ok = receive_into(out, max_payload);
  if (!ok) return ok.err();
  return out;
}

status frame_socket::receive_into(frame& out, uint32_t max_payload) {
  std::array<std::byte, header_bytes> head;
  boost::system::error_code ec;
  ec = read_exact(*impl_->s, head.data(), head.size());
  if (ec) return error(errc::unavailable, impl_->peer + ": receive failed: " + ec.message());
  auto header = parse_header(std::span<const std::byte, header_bytes>(head), max_payload);
  if (!header) return error(header.err().code(), impl_->peer + ": " + header.err().message());
  out.header = *header;
  STRATA_TRY(read_payload(header->length, out.payload));
  auto ok = check_payload(out.header, out.payload);
  if (!ok) return error(ok.err().code(), impl_->peer + ": " + ok.err().message());
  return {};
}

status frame_socket::read_payload(uint32_t length, std::vector<std::byte>& payload) {
  // The buffer grows with the bytes that arrived (doubling from 64 KiB), not
  // with what the header claims: a 24-byte header announcing 256 MiB costs
  // nothing until the bytes come.
  payload.clear();
  size_t have = 0;
  while (have < length) {
    const size_t step = std::min<size_t>(length - have, std::max<size_t>(have, 64 * 1024));
    if (have + step > payload.capacity()) {
      if (impl_->budget) {
        // Charged before it is allocated; over the cap the frame is
        // refused (the stream cannot be resynchronized: the caller drops it).
        const uint64_t more = have + step - std::min<uint64_t>(impl_->charged, have + step);
        if (more > 0 && !impl_->budget->try_take(more))
          return error(errc::capacity_exceeded,
                       impl_->peer + ": a " + std::to_string(length) +
                           "-byte frame does not fit the server's receive buffers (" +
                           std::to_string(impl_->budget->used()) + " of " +
                           std::to_string(impl_->budget->cap()) + " bytes in use); retry later");
        impl_->charged += more;
      }
      payload.reserve(have + step);
    }
    payload.resize(have + step);
    boost::system::error_code ec;
    ec = read_exact(*impl_->s, payload.data() + have, step);
    if (ec) return error(errc::unavailable, impl_->peer + ": receive failed: " + ec.message());
    have += step;
  }
  return {};
}

namespace {
// Reads `count` elements into `v`. Memory it already holds is used at
// once; beyond that it grows with the bytes that arrive (64 KiB, then
// doubling), not with what the header claims.
template <class T>
boost::system::error_code read_growing(tcp::socket& socket, std::vector<T>& v, size_t count) {
  boost::system::error_code ec;
  size_t have = 0;
  if (v.capacity() >= count) {
    v.resize(count);
    have = count;
    ec = read_exact(socket, v.data(), count * sizeof(T));
  }
  while (!ec && have < count) {
    const size_t step = std::min(count - have, std::max(have, (64 * 1024) / sizeof(T)));
    v.resize(have + step);
    ec = read_exact(socket, v.data() + have, step * sizeof(T));
    have += step;
  }
  return ec;
}
}  // namespace

status frame_socket::receive_rows_into(frame& out, rows_reply& rows, uint32_t max_payload) {
  std::array<std::byte, header_bytes> head;
  boost::system::error_code ec;
  ec = read_exact(*impl_->s, head.data(), head.size());
  if (ec) return error(errc::unavailable, impl_->peer + ": receive failed: " + ec.message());
  auto header = parse_header(std::span<const std::byte, header_bytes>(head), max_payload);
  if (!header) return error(header.err().code(), impl_->peer + ": " + header.err().message());
  out.header = *header;
  auto fail = [&](const std::string& what) {
    close();  // the stream cannot be resynchronized
    return error(errc::corrupt_data, impl_->peer + ": rows payload: " + what);
  };
  if (header->type != frame_type::rows) {
    STRATA_TRY(read_payload(header->length, out.payload));
    auto ok = check_payload(out.header, out.payload);
    if (!ok) return error(ok.err().code(), impl_->peer + ": " + ok.err().message());
    return {};
  }
  out.payload.clear();
  if (header->length < 8) return fail("truncated at byte 0 (field 'dim')");
  uint32_t counts[2];
  ec = read_exact(*impl_->s, counts, sizeof counts);
  if (ec) return error(errc::unavailable, impl_->peer + ": receive failed: " + ec.message());
  const uint64_t n = counts[1], dim = counts[0];
  // n is bounded by the frame first, so n * dim * 4 cannot wrap around to
  // a small `want` that passes (and then resize to gigabytes).
  if (n > header->length / 8)
    return fail(std::to_string(n) + " rows need more than the frame's " +
                std::to_string(header->length) + " bytes");
  const uint64_t want = 8 + n * 8 + n * dim * 4;
  if (want != header->length)
    return fail(std::to_string(n) + " rows of dim " + std::to_string(dim) + " need " +
                std::to_string(want) + " bytes, the frame has " + std::to_string(header->length));
  rows.dim = counts[0];
  ec = read_growing(*impl_->s, rows.versions, n);
  if (!ec) ec = read_growing(*impl_->s, rows.weights, n * dim);
  if (ec) return error(errc::unavailable, impl_->peer + ": receive failed: " + ec.message());
  uint32_t crc = crc32c(counts, sizeof counts);
  crc = crc32c_extend(crc, rows.versions.data(), n * 8);
  crc = crc32c_extend(crc, rows.weights.data(), n * dim * 4);
  if (crc != header->crc) return fail("CRC32C mismatch");
  return {};
}

void frame_socket::close() {
  // Only shutdown here: it is safe while another thread is blocked in a
  // read on this socket (which then fails); the descriptor is closed by
  // the destructor.
  if (impl_->s->is_open()) ::shutdown(impl_->s->native_handle(), SHUT_RDWR);
}

}  // namespace strata::wire
