// Replays every corpus file of every fuzz target (tests/fuzz/corpus/<name>/:
// seeds, and inputs that once crashed) through the same entry the fuzzer
// calls. Under the normal build this proves the entries still run every
// known input to the end (no crash, no exception, bounded time); under
// `make asan` the sanitizers check them too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_entries.hpp"

namespace {

using entry_fn = int (*)(const uint8_t*, size_t);

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs every file of corpus/<target>/ (sorted, for a stable order).
void replay(const char* target, entry_fn entry) {
  const std::filesystem::path dir = std::filesystem::path(STRATA_FUZZ_CORPUS) / target;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir << " is missing";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  EXPECT_GE(files.size(), 3u) << dir << ": a corpus needs a handful of seeds";
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    const auto bytes = read_file(file);
    EXPECT_EQ(entry(bytes.data(), bytes.size()), 0);
  }
}

TEST(FuzzCorpus, Frame) { replay("frame", strata_fuzz_frame); }
TEST(FuzzCorpus, Wire) { replay("wire", strata_fuzz_wire); }
TEST(FuzzCorpus, ServingHttp) { replay("serving_http", strata_fuzz_serving_http); }
TEST(FuzzCorpus, AdminHttp) { replay("admin_http", strata_fuzz_admin_http); }
TEST(FuzzCorpus, Manifest) { replay("manifest", strata_fuzz_manifest); }
TEST(FuzzCorpus, Reader) { replay("reader", strata_fuzz_reader); }

}  // namespace
