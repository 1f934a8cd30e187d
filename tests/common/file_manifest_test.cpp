#include "common/file_manifest.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/tiers/test_util.hpp"

namespace strata {
namespace {

using testing::temp_dir;

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

struct checkpoint_dir {
  temp_dir dir;
  checkpoint_dir() {
    write(dir.path() / "dense.bin", std::string(5000, 'd'));
    write(dir.path() / "shard-0" / "data.mdb", std::string(20000, 's'));
    write(dir.path() / "shard-1" / "data.mdb", "small");
  }
};

TEST(FileManifest, WrittenListVerifies) {
  checkpoint_dir c;
  auto written = write_file_manifest(c.dir.path());
  ASSERT_TRUE(written) << written.err().to_string();
  ASSERT_EQ(written->size(), 3u);
  EXPECT_EQ((*written)[1].path, "shard-0/data.mdb");
  EXPECT_EQ((*written)[1].bytes, 20000u);
  EXPECT_FALSE(std::filesystem::exists(c.dir.path() / "FILES.tmp"));
  auto verified = verify_file_manifest(c.dir.path());
  ASSERT_TRUE(verified) << verified.err().to_string();
  EXPECT_EQ(verified->size(), 3u);
}

TEST(FileManifest, MissingListMeansIncomplete) {
  checkpoint_dir c;
  auto v = verify_file_manifest(c.dir.path());
  ASSERT_FALSE(v);
  EXPECT_EQ(v.err().code(), errc::not_found);
  EXPECT_NE(v.err().message().find("incomplete"), std::string::npos);
}

TEST(FileManifest, EachKindOfDamageIsNamed) {
  {
    checkpoint_dir c;
    ASSERT_TRUE(write_file_manifest(c.dir.path()));
    std::filesystem::remove(c.dir.path() / "dense.bin");
    auto v = verify_file_manifest(c.dir.path());
    ASSERT_FALSE(v);
    EXPECT_NE(v.err().message().find("dense.bin"), std::string::npos) << v.err().message();
  }
  {
    checkpoint_dir c;
    ASSERT_TRUE(write_file_manifest(c.dir.path()));
    std::filesystem::resize_file(c.dir.path() / "shard-0" / "data.mdb", 12000);  // truncated
    auto v = verify_file_manifest(c.dir.path());
    ASSERT_FALSE(v);
    EXPECT_EQ(v.err().code(), errc::corrupt_data);
    EXPECT_NE(v.err().message().find("shard-0/data.mdb"), std::string::npos);
    EXPECT_NE(v.err().message().find("12000 bytes"), std::string::npos);
  }
  {
    checkpoint_dir c;
    ASSERT_TRUE(write_file_manifest(c.dir.path()));
    {
      std::fstream f(c.dir.path() / "shard-0" / "data.mdb",
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(777);
      f.put('X');  // one flipped byte, same size
    }
    auto v = verify_file_manifest(c.dir.path());
    ASSERT_FALSE(v);
    EXPECT_NE(v.err().message().find("checksum mismatch"), std::string::npos);
  }
  {
    checkpoint_dir c;
    ASSERT_TRUE(write_file_manifest(c.dir.path()));
    const auto list = c.dir.path() / "FILES";
    std::filesystem::resize_file(list, std::filesystem::file_size(list) - 6);  // drop "end 3\n"
    auto v = verify_file_manifest(c.dir.path());
    ASSERT_FALSE(v);
    EXPECT_NE(v.err().message().find("truncated"), std::string::npos) << v.err().message();
  }
  {
    checkpoint_dir c;
    write(c.dir.path() / "FILES", "strata-files 1\nzz 12 dense.bin\nend 1\n");
    auto v = verify_file_manifest(c.dir.path());
    ASSERT_FALSE(v);
    EXPECT_NE(v.err().message().find("FILES':2: malformed"), std::string::npos)
        << v.err().message();
  }
}

}  // namespace
}  // namespace strata
