#include "model/reader.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "model/features.hpp"
#include "tests/tiers/test_util.hpp"

namespace strata::model {
namespace {

const std::filesystem::path samples = STRATA_SAMPLE_DATA;

std::vector<example> read_all(const reader_config& config) {
  auto r = reader::open(config);
  EXPECT_TRUE(r) << r.err().to_string();
  std::vector<example> out;
  if (!r) return out;
  for (;;) {
    auto e = (*r)->next();
    EXPECT_TRUE(e) << e.err().to_string();
    if (!e || !e->has_value()) break;
    out.push_back(std::move(**e));
  }
  return out;
}

size_t distinct_keys(const std::vector<example>& examples, uint32_t first_slot, uint32_t end_slot) {
  std::set<uint64_t> keys;
  for (const auto& e : examples)
    for (const auto& f : e.features)
      if (f.slot >= first_slot && f.slot < end_slot) keys.insert(f.key);
  return keys.size();
}

reader_config criteo_config() {
  reader_config c;
  c.format = data_format::criteo_tsv;
  c.path = samples / "paddlerec_criteo_raw_sample_train.txt";
  return c;
}

csv_columns criteo_csv_columns() {
  csv_columns columns;
  for (int i = 1; i <= 13; ++i) columns.integer.push_back("I" + std::to_string(i));
  for (int i = 1; i <= 26; ++i) columns.categorical.push_back("C" + std::to_string(i));
  return columns;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

TEST(CriteoTsv, RealSample) {
  auto r = reader::open(criteo_config());
  ASSERT_TRUE(r) << r.err().to_string();
  std::vector<example> examples;
  for (;;) {
    auto e = (*r)->next();
    ASSERT_TRUE(e) << e.err().to_string();
    if (!e->has_value()) break;
    examples.push_back(std::move(**e));
  }
  EXPECT_EQ(examples.size(), 100u);  // the last line has no newline
  EXPECT_TRUE((*r)->bad_lines().empty());
  EXPECT_EQ((*r)->lines_read(), 100u);
  size_t positives = 0;
  for (const auto& e : examples) positives += e.label == 1;
  EXPECT_EQ(positives, 29u);
  EXPECT_EQ(distinct_keys(examples, 13, 39), 1256u);  // key_counts.txt, excl-empty
  for (const auto& e : examples)
    for (const auto& f : e.features) EXPECT_EQ(f.value, 1.0f);
}

TEST(CriteoTsv, FirstRowFeatures) {
  // "0 \t\t0\t5\t4\t13275\t14\t35\t4\t41\t\t4\t0\t4\t05db9164\t...": I1 and I10
  // empty, C22 empty.
  auto examples = read_all(criteo_config());
  ASSERT_FALSE(examples.empty());
  const example& e = examples[0];
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.features.size(), 11u + 25u);
  EXPECT_EQ(e.features[0].slot, 1u);
  EXPECT_EQ(e.features[0].key, integer_key(1, 0));
  EXPECT_EQ(e.features[3].slot, 4u);
  EXPECT_EQ(e.features[3].key, integer_key(4, 13275));
  EXPECT_EQ(e.features[11].slot, 13u);
  EXPECT_EQ(e.features[11].key, categorical_key(13, "05db9164"));
  EXPECT_EQ(e.features.back().slot, 38u);
  EXPECT_EQ(e.features.back().key, categorical_key(38, "731c3655"));
}

TEST(Csv, DeepCtrCriteoSample) {
  reader_config c;
  c.format = data_format::csv;
  c.path = samples / "deepctr_criteo_sample.txt";
  c.columns = criteo_csv_columns();
  auto examples = read_all(c);
  EXPECT_EQ(examples.size(), 200u);
  EXPECT_EQ(distinct_keys(examples, 13, 39), 2266u);
  size_t positives = 0;
  for (const auto& e : examples) positives += e.label == 1;
  EXPECT_EQ(positives, 49u);
  // Row 1: I2 = 3, I3 = "260.0" (floored float), C1 = 05db9164.
  ASSERT_FALSE(examples.empty());
  EXPECT_EQ(examples[0].features[0].slot, 1u);
  EXPECT_EQ(examples[0].features[0].key, integer_key(1, 3));
  EXPECT_EQ(examples[0].features[1].key, integer_key(2, 260));
}

TEST(Csv, CriteoRowsGiveTheSameKeysInBothFormats) {
  // A Criteo row in TSV and in CSV (integer columns, then categoricals)
  // yields identical features.
  strata::testing::temp_dir dir;
  const std::string tsv_line =
      "1\t5\t\t-2\t0\t7\t\t\t\t\t\t\t\t9\t68fd1e64\t\t" +
      std::string("a\tb\tc\td\te\tf\tg\th\ti\tj\tk\tl\tm\tn\to\tp\tq\tr\ts\t") + "t\tu\tv\tw\tx";
  std::string csv_line = tsv_line;
  std::replace(csv_line.begin(), csv_line.end(), '\t', ',');
  std::string header = "label";
  for (int i = 1; i <= 13; ++i) header += ",I" + std::to_string(i);
  for (int i = 1; i <= 26; ++i) header += ",C" + std::to_string(i);
  write_file(dir.path() / "a.tsv", tsv_line + "\n");
  write_file(dir.path() / "a.csv", header + "\n" + csv_line + "\n");
  reader_config t = criteo_config();
  t.path = dir.path() / "a.tsv";
  reader_config c;
  c.format = data_format::csv;
  c.path = dir.path() / "a.csv";
  c.columns = criteo_csv_columns();
  auto from_tsv = read_all(t), from_csv = read_all(c);
  ASSERT_EQ(from_tsv.size(), 1u);
  ASSERT_EQ(from_csv.size(), 1u);
  ASSERT_EQ(from_tsv[0].features.size(), 5u + 25u);
  ASSERT_EQ(from_csv[0].features.size(), from_tsv[0].features.size());
  for (size_t i = 0; i < from_tsv[0].features.size(); ++i) {
    EXPECT_EQ(from_tsv[0].features[i].slot, from_csv[0].features[i].slot);
    EXPECT_EQ(from_tsv[0].features[i].key, from_csv[0].features[i].key);
  }
  EXPECT_EQ(from_tsv[0].features[1].key, integer_key(2, -2));
}

TEST(Csv, AvazuSample) {
  reader_config c;
  c.format = data_format::csv;
  c.path = samples / "deepctr_avazu_sample.txt";
  c.columns.label = "click";
  c.columns.categorical = {"hour",         "C1",
                           "banner_pos",   "site_id",
                           "site_domain",  "site_category",
                           "app_id",       "app_domain",
                           "app_category", "device_id",
                           "device_ip",    "device_model",
                           "device_type",  "device_conn_type",
                           "C14",          "C15",
                           "C16",          "C17",
                           "C18",          "C19",
                           "C20",          "C21"};
  auto examples = read_all(c);
  EXPECT_EQ(examples.size(), 100u);
  EXPECT_EQ(distinct_keys(examples, 0, 22), 385u);  // key_counts.txt
  size_t positives = 0;
  for (const auto& e : examples) {
    positives += e.label == 1;
    EXPECT_EQ(e.features.size(), 22u);
  }
  EXPECT_EQ(positives, 20u);
}

TEST(Csv, MissingColumnIsAnErrorNamingIt) {
  reader_config c;
  c.format = data_format::csv;
  c.path = samples / "deepctr_avazu_sample.txt";
  c.columns.label = "click";
  c.columns.categorical = {"C1", "no_such_column"};
  auto r = reader::open(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code(), errc::invalid_argument);
  EXPECT_NE(r.err().message().find("no_such_column"), std::string::npos);
}

TEST(Libffm, XlearnSamples) {
  for (auto [name, keys] : {std::pair{"xlearn_criteo_small_train.ffm", 539u},
                            std::pair{"xlearn_criteo_small_test.ffm", 581u}}) {
    SCOPED_TRACE(name);
    reader_config c;
    c.format = data_format::libffm;
    c.path = samples / name;
    auto examples = read_all(c);
    EXPECT_EQ(examples.size(), 200u);
    EXPECT_EQ(distinct_keys(examples, 0, 1000), keys);
    ASSERT_FALSE(examples.empty());
  }
  reader_config c;
  c.format = data_format::libffm;
  c.path = samples / "xlearn_criteo_small_train.ffm";
  auto examples = read_all(c);
  // "1 0:0:0.3651 2:1163:0.3651 ... 17:2434:0.50000 16:7755:0.50000"
  ASSERT_FALSE(examples.empty());
  const example& e = examples[0];
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_EQ(e.features[0].slot, 0u);
  EXPECT_EQ(e.features[0].key, ffm_key(0, 0));
  EXPECT_FLOAT_EQ(e.features[0].value, 0.3651f);
  EXPECT_EQ(e.features[1].key, ffm_key(2, 1163));
  EXPECT_EQ(e.features.back().slot, 16u);
  EXPECT_FLOAT_EQ(e.features.back().value, 0.5f);
}

TEST(Reader, MissingFileIsNotFound) {
  reader_config c = criteo_config();
  c.path = samples / "no_such_file.txt";
  auto r = reader::open(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code(), errc::not_found);
  EXPECT_NE(r.err().message().find("no_such_file.txt"), std::string::npos);
}

TEST(Reader, BadLinesAreSkippedAndReported) {
  strata::testing::temp_dir dir;
  std::string text = slurp(samples / "paddlerec_criteo_raw_sample_train.txt");
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 100u);
  lines[36] = lines[36].substr(0, lines[36].rfind('\t'));          // line 37: a column short
  lines[49][0] = '7';                                              // line 50: bad label
  lines[79] = "1\tx" + lines[79].substr(lines[79].find('\t', 2));  // line 80: bad integer
  std::string corrupt;
  for (const auto& l : lines) corrupt += l + "\n";
  const auto path = dir.path() / "corrupt.tsv";
  write_file(path, corrupt);

  reader_config c = criteo_config();
  c.path = path;
  auto r = reader::open(c);
  ASSERT_TRUE(r);
  size_t count = 0;
  for (;;) {
    auto e = (*r)->next();
    ASSERT_TRUE(e) << e.err().to_string();
    if (!e->has_value()) break;
    ++count;
  }
  EXPECT_EQ(count, 97u);
  const auto& bad = (*r)->bad_lines();
  ASSERT_EQ(bad.size(), 3u);
  EXPECT_EQ(bad[0].line, 37u);
  EXPECT_EQ(bad[0].file, path.string());
  EXPECT_NE(bad[0].reason.find("column count"), std::string::npos);
  EXPECT_EQ(bad[1].line, 50u);
  EXPECT_NE(bad[1].reason.find("label"), std::string::npos);
  EXPECT_EQ(bad[2].line, 80u);
  EXPECT_NE(bad[2].reason.find("integer"), std::string::npos);

  // Allowing two bad lines, the third is an error naming file and line.
  c.max_bad_lines = 2;
  auto strict = reader::open(c);
  ASSERT_TRUE(strict);
  auto batch = (*strict)->next_batch(1000);
  ASSERT_FALSE(batch);
  EXPECT_EQ(batch.err().code(), errc::corrupt_data);
  EXPECT_NE(batch.err().message().find(path.string() + ":80"), std::string::npos)
      << batch.err().message();
  // The error sticks.
  EXPECT_FALSE((*strict)->next());
}

TEST(Reader, ShardsSplitTheFileWithoutOverlap) {
  auto all = read_all(criteo_config());
  ASSERT_EQ(all.size(), 100u);
  std::vector<example> merged(100);
  size_t total = 0;
  for (uint32_t shard = 0; shard < 3; ++shard) {
    reader_config c = criteo_config();
    c.shard_index = shard;
    c.shard_count = 3;
    auto part = read_all(c);
    EXPECT_EQ(part.size(), shard == 0 ? 34u : 33u);
    for (size_t i = 0; i < part.size(); ++i) merged[i * 3 + shard] = part[i];
    total += part.size();
  }
  EXPECT_EQ(total, 100u);
  for (size_t i = 0; i < 100; ++i) {
    ASSERT_EQ(merged[i].features.size(), all[i].features.size());
    EXPECT_EQ(merged[i].features[0].key, all[i].features[0].key);
  }

  reader_config bad = criteo_config();
  bad.shard_index = 3;
  bad.shard_count = 3;
  EXPECT_FALSE(reader::open(bad));
}

TEST(Reader, SkipAndLimitWindows) {
  auto all = read_all(criteo_config());
  reader_config train = criteo_config();
  train.limit = 80;
  reader_config heldout = criteo_config();
  heldout.skip = 80;
  auto a = read_all(train), b = read_all(heldout);
  ASSERT_EQ(a.size(), 80u);
  ASSERT_EQ(b.size(), 20u);
  EXPECT_EQ(b[0].features.back().key, all[80].features.back().key);
  // Windows apply per shard.
  reader_config shard = criteo_config();
  shard.shard_index = 1;
  shard.shard_count = 2;
  shard.skip = 10;
  shard.limit = 5;
  auto s = read_all(shard);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].features.back().key, all[21].features.back().key);
}

TEST(Reader, NextBatch) {
  auto r = reader::open(criteo_config());
  ASSERT_TRUE(r);
  std::vector<size_t> sizes;
  for (;;) {
    auto b = (*r)->next_batch(32);
    ASSERT_TRUE(b);
    if (b->examples.empty()) break;
    sizes.push_back(b->examples.size());
    size_t features = 0;
    for (const auto& e : b->examples) features += e.features.size();
    EXPECT_EQ(b->keys().size(), features);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{32, 32, 32, 4}));
}

TEST(Reader, CrlfAndBlankLines) {
  strata::testing::temp_dir dir;
  std::string text = slurp(samples / "xlearn_criteo_small_train.ffm");
  std::string crlf;
  for (char ch : text) {
    if (ch == '\n')
      crlf += "\r\n";
    else
      crlf += ch;
  }
  crlf += "\r\n\r\n";
  write_file(dir.path() / "crlf.ffm", crlf);
  reader_config c;
  c.format = data_format::libffm;
  c.path = dir.path() / "crlf.ffm";
  auto examples = read_all(c);
  EXPECT_EQ(examples.size(), 200u);
  EXPECT_EQ(distinct_keys(examples, 0, 1000), 539u);
}

TEST(Reader, LongLinesAcrossChunks) {
  // Lines longer than the reader's 1 MiB chunk still parse.
  strata::testing::temp_dir dir;
  std::string line = "1";
  for (int i = 0; i < 200000; ++i)
    line += " " + std::to_string(i % 39) + ":" + std::to_string(i) + ":1";
  write_file(dir.path() / "long.ffm", line + "\n" + line + "\n0 1:2:0.5");
  reader_config c;
  c.format = data_format::libffm;
  c.path = dir.path() / "long.ffm";
  auto examples = read_all(c);
  ASSERT_EQ(examples.size(), 3u);
  EXPECT_EQ(examples[0].features.size(), 200000u);
  EXPECT_EQ(examples[1].features.size(), 200000u);
  EXPECT_EQ(examples[2].features.size(), 1u);
}

TEST(Reader, LineWithoutNewlineCostsBoundedMemory) {
  // 10 MB with no newline between two good lines: the long line is one bad
  // line (named by its number), the reader moves on, and its buffer never
  // holds more than a capped line and a chunk.
  strata::testing::temp_dir dir;
  const std::string good = "0 1:2:0.5\n";
  write_file(dir.path() / "endless.ffm", good + std::string(10'000'000, 'x') + "\n" + good);
  reader_config c;
  c.format = data_format::libffm;
  c.path = dir.path() / "endless.ffm";
  auto r = reader::open(c);
  ASSERT_TRUE(r) << r.err().to_string();
  size_t count = 0;
  for (;;) {
    auto e = (*r)->next();
    ASSERT_TRUE(e) << e.err().to_string();
    if (!e->has_value()) break;
    ++count;
    EXPECT_LE((*r)->buffer_bytes(), max_line_bytes + (size_t{2} << 20));
  }
  EXPECT_EQ(count, 2u);
  EXPECT_LE((*r)->buffer_bytes(), max_line_bytes + (size_t{2} << 20));
  ASSERT_EQ((*r)->bad_lines().size(), 1u);
  EXPECT_EQ((*r)->bad_lines()[0].line, 2u);
  EXPECT_NE((*r)->bad_lines()[0].reason.find("longer than"), std::string::npos);

  // The same line last in the file, with no newline at all.
  write_file(dir.path() / "tail.ffm", good + std::string(10'000'000, 'x'));
  c.path = dir.path() / "tail.ffm";
  auto t = reader::open(c);
  ASSERT_TRUE(t);
  auto batch = (*t)->next_batch(10);
  ASSERT_TRUE(batch) << batch.err().to_string();
  EXPECT_EQ(batch->examples.size(), 1u);
  EXPECT_EQ((*t)->bad_lines().size(), 1u);
  EXPECT_LE((*t)->buffer_bytes(), max_line_bytes + (size_t{2} << 20));
}

TEST(Reader, DeviceFileIsRefusedByName) {
  // /dev/zero has no lines and no end: opening it as data is an error
  // naming the path and its kind, not an endless read.
  reader_config c = criteo_config();
  c.path = "/dev/zero";
  auto r = reader::open(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code(), errc::invalid_argument);
  EXPECT_NE(r.err().message().find("/dev/zero is a character device, not a regular file"),
            std::string::npos)
      << r.err().message();
  // A symlink to it is the device too; a directory is refused as well.
  strata::testing::temp_dir dir;
  std::filesystem::create_symlink("/dev/zero", dir.path() / "data.tsv");
  c.path = dir.path() / "data.tsv";
  auto linked = reader::open(c);
  ASSERT_FALSE(linked);
  EXPECT_NE(linked.err().message().find("character device"), std::string::npos);
  c.path = dir.path();
  auto directory = reader::open(c);
  ASSERT_FALSE(directory);
  EXPECT_NE(directory.err().message().find("is a directory"), std::string::npos);
}

TEST(Reader, BadLinesAreCountedInTheWindowTheyLieIn) {
  // Lines 3 and 9 are bad; a training window of the first 5 examples and a
  // held-out window after it: each counts only its own bad line.
  strata::testing::temp_dir dir;
  std::string text;
  for (int i = 1; i <= 12; ++i)
    text += (i == 3 || i == 9) ? "2 1:1:1\n" : "1 1:" + std::to_string(i) + ":1\n";
  write_file(dir.path() / "d.ffm", text);
  reader_config train;
  train.format = data_format::libffm;
  train.path = dir.path() / "d.ffm";
  train.limit = 5;
  reader_config heldout = train;
  heldout.limit = 0;
  heldout.skip = 5;
  auto t = reader::open(train);
  auto h = reader::open(heldout);
  ASSERT_TRUE(t && h);
  ASSERT_TRUE((*t)->next_batch(100));
  auto held = (*h)->next_batch(100);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->examples.size(), 5u);
  ASSERT_EQ((*t)->bad_lines().size(), 1u);
  EXPECT_EQ((*t)->bad_lines()[0].line, 3u);
  ASSERT_EQ((*h)->bad_lines().size(), 1u);
  EXPECT_EQ((*h)->bad_lines()[0].line, 9u);
}

}  // namespace
}  // namespace strata::model
