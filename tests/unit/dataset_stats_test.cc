// The feature schema's hash, per-feature sums and statistics, and standardization.
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/client/dataset.h"
#include "fl/common/crypto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Rows (1, 10, 100), (2, 10, -100), (3, 10, 0): column 0 has mean 2 and population variance 2/3,
// column 1 is constant, column 2 has mean 0 and variance 20000/3.
Dataset ThreeRows() {
  Dataset d;
  d.num_features = 3;
  d.num_classes = 2;
  d.features = {1, 10, 100, 2, 10, -100, 3, 10, 0};
  d.labels = {0, 1, 0};
  d.feature_names = {"age", "site", "dose"};
  return d;
}

std::string BigEndian64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  return s;
}

TEST(FeatureSchemaTest, HashIsOverNamesAndTheirOrder) {
  const std::string ab = FeatureSchemaSha256({"age", "bmi"});
  EXPECT_EQ(ab.size(), 64u);
  EXPECT_EQ(ab, FeatureSchemaSha256(std::vector<std::string>{"age", "bmi"}));
  EXPECT_NE(ab, FeatureSchemaSha256({"bmi", "age"}));
  EXPECT_NE(ab, FeatureSchemaSha256({"age"}));
  // Length prefixes: names that concatenate alike hash differently.
  EXPECT_NE(FeatureSchemaSha256({"ab", "c"}), FeatureSchemaSha256({"a", "bc"}));
  EXPECT_NE(FeatureSchemaSha256({""}), FeatureSchemaSha256(std::vector<std::string>{}));
  // The documented encoding: count, then each name's length and bytes, all big-endian.
  EXPECT_EQ(ab, Sha256Hex(BigEndian64(2) + BigEndian64(3) + "age" + BigEndian64(3) + "bmi"));
  EXPECT_EQ(FeatureSchemaSha256(std::vector<std::string>{}), Sha256Hex(BigEndian64(0)));

  Dataset d = ThreeRows();
  EXPECT_EQ(FeatureSchemaSha256(d), FeatureSchemaSha256({"age", "site", "dose"}));
}

TEST(FeatureStatsTest, SumsMeanAndPopulationStddev) {
  const FeatureSums sums = ComputeFeatureSums(ThreeRows());
  EXPECT_EQ(sums.count, 3);
  EXPECT_THAT(sums.sum, ElementsAre(6, 30, 0));
  EXPECT_THAT(sums.sum_sq, ElementsAre(14, 300, 20000));
  absl::StatusOr<ColumnStats> stats = StatsFromSums(sums);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->mean,
              ElementsAre(DoubleNear(2, 1e-12), DoubleNear(10, 1e-12), DoubleNear(0, 1e-12)));
  EXPECT_THAT(stats->stddev, ElementsAre(DoubleNear(std::sqrt(2.0 / 3), 1e-12), DoubleNear(0, 1e-6),
                                         DoubleNear(std::sqrt(20000.0 / 3), 1e-9)));
  absl::StatusOr<ColumnStats> direct = DescribeColumns(ThreeRows());
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct->mean, stats->mean);

  EXPECT_EQ(StatsFromSums(FeatureSums{}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DescribeColumns(Dataset{}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FeatureStatsTest, SitesSumsAddUpToTheUnionsStatistics) {
  const Dataset all = ThreeRows();
  FeatureSums total;  // empty: takes the first site's feature count
  ASSERT_TRUE(total.Add(ComputeFeatureSums(all.Subset({0}))).ok());
  ASSERT_TRUE(total.Add(ComputeFeatureSums(all.Subset({1, 2}))).ok());
  ASSERT_TRUE(total.Add(FeatureSums{}).ok());  // an empty site changes nothing
  const FeatureSums whole = ComputeFeatureSums(all);
  EXPECT_EQ(total.count, whole.count);
  EXPECT_EQ(total.sum, whole.sum);
  EXPECT_EQ(total.sum_sq, whole.sum_sq);

  FeatureSums other;
  other.count = 1;
  other.sum = {1};
  other.sum_sq = {1};
  absl::Status s = total.Add(other);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("1 features to sums of 3 features"));
  EXPECT_EQ(total.count, 3);  // unchanged
  other.sum_sq.clear();
  EXPECT_EQ(total.Add(other).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FeatureStatsTest, StandardizeScalesAndCentersConstantColumnsOnly) {
  Dataset d = ThreeRows();
  absl::StatusOr<ColumnStats> stats = DescribeColumns(d);
  ASSERT_TRUE(stats.ok());
  stats->stddev[1] = 0;  // exactly constant
  ASSERT_TRUE(Standardize(d, stats->mean, stats->stddev).ok());
  absl::StatusOr<ColumnStats> after = DescribeColumns(d);
  ASSERT_TRUE(after.ok());
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(after->mean[j], 0, 1e-6) << j;
  EXPECT_NEAR(after->stddev[0], 1, 1e-6);
  EXPECT_NEAR(after->stddev[2], 1, 1e-6);
  EXPECT_THAT(std::vector<float>({d.row(0)[1], d.row(1)[1], d.row(2)[1]}), ElementsAre(0, 0, 0));
  EXPECT_NEAR(d.row(0)[0], -1 / std::sqrt(2.0 / 3), 1e-6);

  const std::vector<float> before = d.features;
  EXPECT_EQ(Standardize(d, {0, 0}, {1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Standardize(d, {0, 0, 0}, {1, -1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Standardize(d, {0, NAN, 0}, {1, 1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.features, before);
}

TEST(FeatureStatsTest, UnscaledFeaturesAreNamed) {
  Dataset d = ThreeRows();
  absl::StatusOr<ColumnStats> stats = DescribeColumns(d);
  ASSERT_TRUE(stats.ok());
  // age: mean 2, stddev 0.8; site: mean 10 (not above 10); dose: stddev 81.6.
  EXPECT_THAT(UnscaledFeatures(d, *stats), ElementsAre("dose"));
  EXPECT_THAT(UnscaledFeatures(d, *stats, 5), ElementsAre("site", "dose"));
  d.feature_names.clear();
  EXPECT_THAT(UnscaledFeatures(d, *stats), ElementsAre("feature 2"));
  ASSERT_TRUE(Standardize(d, stats->mean, stats->stddev).ok());
  absl::StatusOr<ColumnStats> after = DescribeColumns(d);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(UnscaledFeatures(d, *after).empty());
}

}  // namespace
}  // namespace fl::client
