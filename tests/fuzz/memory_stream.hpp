// A SyncReadStream over bytes in memory, for the HTTP fuzz entries: Beast's
// http::read reads requests from it exactly as from a server's socket,
// in small pieces (the parser sees requests split at odd places); at the
// end it reports eof, as a peer that closed its side.
//
// Does not own the bytes. One thread.
#pragma once

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <cstddef>
#include <span>

namespace strata::testing {

class memory_stream {
 public:
  // Each read_some returns at most `piece` bytes.
  memory_stream(std::span<const std::byte> bytes, size_t piece) : bytes_(bytes), piece_(piece) {}

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    ec = {};
    if (bytes_.empty()) {
      ec = boost::asio::error::eof;
      return 0;
    }
    const size_t n = boost::asio::buffer_copy(
        buffers, boost::asio::buffer(bytes_.data(), std::min(bytes_.size(), piece_)));
    bytes_ = bytes_.subspan(n);
    return n;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::span<const std::byte> bytes_;
  size_t piece_;
};

}  // namespace strata::testing
