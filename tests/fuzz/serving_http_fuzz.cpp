// `strata serve`'s HTTP API (serving/http_api.hpp) on raw bytes: the
// bytes are one connection's worth of requests, read with Beast's parser
// under the server's limits, each answered by the server's own handler
// (or its parse-error answer) as http_server's connection loop does,
// keep-alive included. The service is real: one small table in an LMDB
// store in a temporary directory ($TMPDIR), with a few rows applied.
#include <stdlib.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "serving/http_api.hpp"
#include "tests/fuzz/fuzz_entries.hpp"
#include "tests/fuzz/memory_stream.hpp"
#include "tiers/cpu_cache.hpp"

namespace {

using namespace strata;
using namespace strata::serving;
namespace http = boost::beast::http;

constexpr size_t max_body_bytes = size_t{16} << 20;  // the manifest's default
constexpr uint32_t dim = 4;

struct fixture {
  std::filesystem::path dir;
  serving_service service{service_limits{}};

  fixture() {
    std::string pattern = (std::filesystem::temp_directory_path() / "strata-http-fuzz-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) return;
    dir = pattern;
    serving_store_config config;
    config.table = "ads";
    config.dim = dim;
    config.lmdb_path = dir / "lmdb";
    config.partitions = 64;
    config.dram_bytes = size_t{1} << 20;
    const row_layout layout{dim, optimizer_kind::sgd, false};
    auto store =
        serving_store::open(config, std::make_unique<cpu_cache>(layout, cache_geometry{8, 1}));
    if (!store) return;
    const std::vector<uint64_t> keys{1, 2, 3};
    const std::vector<float> weights(keys.size() * dim, 0.5f);
    const std::vector<uint64_t> versions{7, 7, 7};
    (void)(*store)->apply_updates(keys, weights, versions);
    service.add_table(std::move(*store));
  }
  ~fixture() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace

int strata_fuzz_serving_http(const uint8_t* data, size_t size) {
  static fixture f;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  // The first byte picks how the bytes arrive: whole, or in small pieces.
  strata::testing::memory_stream stream(bytes, size > 0 && data[0] % 2 ? 7 : 4096);
  boost::beast::flat_buffer buffer;
  for (;;) {
    http_request_parser parser;
    limit_request_parser(parser, max_body_bytes);
    boost::beast::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::end_of_stream || ec == boost::asio::error::eof) break;
    if (ec) {
      (void)http_parse_error_response(ec, max_body_bytes);
      break;
    }
    const auto res = handle_http_request(f.service, parser.get());
    f.service.finish_request();
    if (!res.keep_alive()) break;
  }
  return 0;
}
