#include "tests/tiers/test_util.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <random>
#include <unordered_set>

namespace strata::testing {

temp_dir::temp_dir() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("strata-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
           std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

table_config make_table(uint32_t dim, optimizer_kind optimizer) {
  table_config t;
  t.name = "test";
  t.layout = row_layout{dim, optimizer, true};
  t.optimizer.kind = optimizer;
  t.initializer.kind = initializer_kind::normal;
  t.initializer.seed = 7;
  return t;
}

table_config exact_sum_table(uint32_t dim) {
  table_config t;
  t.name = "exact";
  t.layout = row_layout{dim, optimizer_kind::sgd, true};
  t.optimizer.kind = optimizer_kind::sgd;
  t.optimizer.learning_rate = 1.0f;
  t.initializer.kind = initializer_kind::zeros;
  return t;
}

std::vector<std::byte> make_records(const row_layout& layout, const std::vector<uint64_t>& keys,
                                    uint32_t salt) {
  std::vector<std::byte> out(keys.size() * layout.record_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::byte* rec = out.data() + i * layout.record_bytes();
    meta_of(rec) = row_meta{salt + 1u, 0, 0};
    float* v = weights_of(rec);
    for (uint32_t j = 0; j < layout.value_words(); ++j)
      v[j] = static_cast<float>((keys[i] % 1000) * 10 + j) + static_cast<float>(salt) * 0.5f;
  }
  return out;
}

uint16_t free_port() {
  // Below the kernel's ephemeral range (32768-60999 by default): a port
  // handed out by bind(0) is in that range, and an outgoing connection of
  // a test running beside this one may take it before the process the
  // port is for binds it. A port is only probed here, not held, so a
  // process remembers what it handed out and never hands a port out twice
  // (a manifest of five nodes once got one port for two of them: a probe
  // cannot see a port that its own caller has not bound yet). Another
  // test process's free_port can still collide; the random start makes
  // that unlikely.
  static std::mutex mutex;
  static std::unordered_set<uint16_t> handed_out;
  static uint32_t calls = 0;
  std::lock_guard lock(mutex);
  std::mt19937 rng(static_cast<uint32_t>(::getpid()) * 2654435761u + calls++);
  constexpr uint16_t low = 20000, span = 12000;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<uint16_t>(low + rng() % span);
    if (handed_out.contains(port)) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free) {
      handed_out.insert(port);
      return port;
    }
  }
  return 0;  // the caller's bind then fails, naming the port
}

}  // namespace strata::testing
