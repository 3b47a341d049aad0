#include "fl/client/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

std::string TempPath(const std::string& name) {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  return testing::TempDir() + "/dataset_test_" + info->name() + "_" + name;
}

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  return path;
}

std::string WriteGzFile(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, contents.data(), static_cast<unsigned>(contents.size())),
            static_cast<int>(contents.size()));
  gzclose(f);
  return path;
}

void AppendBigEndian(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
}

// An IDX image file of `n` images of 2x3 pixels announced, holding `pixels`.
std::string IdxImages(uint32_t n, const std::vector<uint8_t>& pixels, uint32_t magic = 0x803) {
  std::string s;
  AppendBigEndian(s, magic);
  AppendBigEndian(s, n);
  AppendBigEndian(s, 2);
  AppendBigEndian(s, 3);
  s.append(pixels.begin(), pixels.end());
  return s;
}

std::string IdxLabels(const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::string s;
  AppendBigEndian(s, magic);
  AppendBigEndian(s, static_cast<uint32_t>(labels.size()));
  s.append(labels.begin(), labels.end());
  return s;
}

const std::vector<uint8_t> kTwoImages = {0, 51, 102, 153, 204, 255, 255, 0, 0, 0, 0, 51};

TEST(DatasetTest, SubsetKeepsOrderAndShape) {
  Dataset d;
  d.num_features = 2;
  d.num_classes = 5;
  d.features = {0, 1, 10, 11, 20, 21};
  d.labels = {0, 1, 2};
  const Dataset s = d.Subset({2, 0});
  EXPECT_EQ(s.num_features, 2);
  EXPECT_EQ(s.num_classes, 5);
  EXPECT_THAT(s.features, ElementsAre(20, 21, 0, 1));
  EXPECT_THAT(s.labels, ElementsAre(2, 0));
  EXPECT_TRUE(s.feature_names.empty());

  d.feature_names = {"age", "bmi"};
  d.dropped_rows = 4;
  const Dataset named = d.Subset({1});
  EXPECT_THAT(named.feature_names, ElementsAre("age", "bmi"));
  EXPECT_EQ(named.dropped_rows, 0);  // a count of the file loaded, not of the subset
}

TEST(DatasetTest, LoadIdxReadsPlainAndGzipFiles) {
  const std::string images = IdxImages(2, kTwoImages);
  const std::string labels = IdxLabels({3, 1});
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    const std::string ip = gz ? WriteGzFile("img.gz", images) : WriteFile("img", images);
    const std::string lp = gz ? WriteGzFile("lbl.gz", labels) : WriteFile("lbl", labels);
    absl::StatusOr<Dataset> d = LoadIdx(ip, lp);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->num_features, 6);
    EXPECT_EQ(d->num_classes, 4);
    EXPECT_THAT(d->labels, ElementsAre(3, 1));
    ASSERT_EQ(d->features.size(), 12u);
    EXPECT_FLOAT_EQ(d->features[0], 0.0f);
    EXPECT_FLOAT_EQ(d->features[1], 0.2f);
    EXPECT_FLOAT_EQ(d->features[5], 1.0f);
    EXPECT_FLOAT_EQ(d->row(1)[0], 1.0f);
  }
}

TEST(DatasetTest, LoadIdxRefusesWrongMagicNamingTheFile) {
  const std::string lp = WriteFile("lbl", IdxLabels({3, 1}));
  const std::string bad_images = WriteFile("img", IdxImages(2, kTwoImages, /*magic=*/0x801));
  absl::StatusOr<Dataset> d = LoadIdx(bad_images, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), AllOf(HasSubstr(bad_images), HasSubstr("magic")));

  const std::string ip = WriteFile("img_ok", IdxImages(2, kTwoImages));
  const std::string bad_labels = WriteFile("lbl_bad", IdxLabels({3, 1}, /*magic=*/0x803));
  d = LoadIdx(ip, bad_labels);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), AllOf(HasSubstr(bad_labels), HasSubstr("magic")));
}

TEST(DatasetTest, LoadIdxRefusesTruncatedFilesNamingTheFile) {
  const std::string lp = WriteFile("lbl", IdxLabels({3, 1, 2}));
  // Three images announced, two present.
  const std::string ip = WriteGzFile("img.gz", IdxImages(3, kTwoImages));
  absl::StatusOr<Dataset> d = LoadIdx(ip, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), AllOf(HasSubstr(ip), HasSubstr("truncated")));

  // A header cut short.
  const std::string short_header = WriteFile("short", std::string("\0\0\x08", 3));
  d = LoadIdx(short_header, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), AllOf(HasSubstr(short_header), HasSubstr("truncated")));
}

TEST(DatasetTest, LoadIdxRefusesCountMismatchAndMissingFile) {
  const std::string ip = WriteFile("img", IdxImages(2, kTwoImages));
  const std::string lp = WriteFile("lbl", IdxLabels({3, 1, 2}));
  absl::StatusOr<Dataset> d = LoadIdx(ip, lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), AllOf(HasSubstr(ip), HasSubstr(lp)));

  d = LoadIdx(TempPath("does_not_exist"), lp);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("does_not_exist"));
}

TEST(DatasetTest, LoadIdxReadsFashionMnist) {
  const std::string dir = kFashionMnistDir;
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed in " << dir;
  }
  absl::StatusOr<Dataset> train =
      LoadIdx(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples(), 60000);
  EXPECT_EQ(train->num_features, 784);
  EXPECT_EQ(train->num_classes, 10);
  EXPECT_EQ(train->features.size(), 60000u * 784u);
  const auto [min_label, max_label] =
      std::minmax_element(train->labels.begin(), train->labels.end());
  EXPECT_EQ(*min_label, 0);
  EXPECT_EQ(*max_label, 9);
  const auto [min_px, max_px] = std::minmax_element(train->features.begin(), train->features.end());
  EXPECT_EQ(*min_px, 0.0f);
  EXPECT_EQ(*max_px, 1.0f);
  // Fashion-MNIST is balanced: 6000 of each class.
  EXPECT_EQ(std::count(train->labels.begin(), train->labels.end(), 7), 6000);

  absl::StatusOr<Dataset> test =
      LoadIdx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples(), 10000);
  EXPECT_EQ(test->num_features, 784);
  EXPECT_EQ(test->num_classes, 10);
}

TEST(DatasetTest, LoadCsvReadsFeaturesAroundTheLabelColumn) {
  const std::string path = WriteFile("data.csv",
                                     "age,label, \"height\"\r\n"
                                     "1.5,0,2\r\n"
                                     "-3e2, 2 ,+4\r\n"
                                     "0,1.0,-0.25\n"
                                     "\n");
  absl::StatusOr<Dataset> d = LoadCsv(path, "label");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_features, 2);
  EXPECT_EQ(d->num_classes, 3);
  EXPECT_THAT(d->labels, ElementsAre(0, 2, 1));
  EXPECT_THAT(d->features, ElementsAre(1.5f, 2.0f, -300.0f, 4.0f, 0.0f, -0.25f));
  EXPECT_THAT(d->feature_names, ElementsAre("age", "height"));
  EXPECT_EQ(d->dropped_rows, 0);
  EXPECT_EQ(d->imputed_values, 0);
}

// Loads `contents` as data.csv with label column "label" and expects INVALID_ARGUMENT whose
// message holds every one of `parts`.
void ExpectCsvRefused(const std::string& contents, const std::vector<std::string>& parts) {
  const std::string path = WriteFile("data.csv", contents);
  absl::StatusOr<Dataset> d = LoadCsv(path, "label");
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << d.status();
  EXPECT_THAT(d.status().message(), HasSubstr(path));
  for (const std::string& part : parts) EXPECT_THAT(d.status().message(), HasSubstr(part));
}

TEST(DatasetTest, LoadCsvRefusesMissingLabelColumn) {
  ExpectCsvRefused("age,height,class\n1,2,0\n", {"row 1", "'label'"});
}

TEST(DatasetTest, LoadCsvRefusesNonNumericValue) {
  ExpectCsvRefused("age,height,label\n1,2,0\n3,4,1\nabc,5,0\n",
                   {"data.csv: row 4, column 'age': not a number: 'abc'"});
  ExpectCsvRefused("age,height,label\n1,2x,0\n", {"row 2, column 'height'", "'2x'"});
}

TEST(DatasetTest, LoadCsvRefusesNanInfinityAndEmptyFields) {
  ExpectCsvRefused("age,height,label\n1,2,0\n1,nan,0\n",
                   {"row 3, column 'height'", "missing value 'nan' is refused"});
  ExpectCsvRefused("age,height,label\n1,-nan,0\n", {"row 2, column 'height'", "NaN"});
  ExpectCsvRefused("age,height,label\n-inf,2,0\n", {"row 2, column 'age'", "infinity"});
  ExpectCsvRefused("age,height,label\n1,,0\n", {"row 2, column 'height'", "empty"});
  ExpectCsvRefused("age,height,label\n1,1e999,0\n", {"row 2, column 'height'", "range"});
}

TEST(DatasetTest, LoadCsvRefusesWrongFieldCount) {
  ExpectCsvRefused("age,height,label\n1,2,0\n3,4,1\n5,1\n", {"row 4", "expected 3", "found 2"});
  ExpectCsvRefused("age,height,label\n1,2,0,7\n", {"row 2", "expected 3", "found 4"});
}

TEST(DatasetTest, LoadCsvRefusesBadLabels) {
  ExpectCsvRefused("age,label\n1,-1\n", {"row 2, column 'label'", "non-negative integer"});
  ExpectCsvRefused("age,label\n1,0\n2,1.5\n", {"row 3, column 'label'", "'1.5'"});
}

TEST(DatasetTest, LoadCsvRefusesFilesWithoutData) {
  ExpectCsvRefused("", {"header"});
  ExpectCsvRefused("age,label\n", {"no data rows"});
  ExpectCsvRefused("label\n1\n", {"no feature columns"});
}

TEST(DatasetTest, LoadCsvMissingFileIsNotFound) {
  absl::StatusOr<Dataset> d = LoadCsv(TempPath("missing.csv"), "label");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("missing.csv"));
}

}  // namespace
}  // namespace fl::client
