#include "fl/simulation/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

using Parts = std::vector<std::vector<int64_t>>;

// Every index in [0, n) appears in exactly one part, once.
void ExpectExactCover(const Parts& parts, int64_t n) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (const auto& part : parts) {
    for (int64_t i : part) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ++seen[static_cast<size_t>(i)];
    }
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "index " << i;
}

// Labels like Fashion-MNIST's: `per_class` examples of each of `num_classes`, interleaved.
std::vector<int32_t> BalancedLabels(int32_t num_classes, int64_t per_class) {
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < num_classes * per_class; ++i) {
    labels.push_back(static_cast<int32_t>(i % num_classes));
  }
  return labels;
}

// Mean over parties of the share of the party's most common class.
double MeanLargestClassShare(const Parts& parts, const std::vector<int32_t>& labels,
                             int32_t num_classes) {
  double total = 0;
  for (const auto& part : parts) {
    std::vector<int64_t> counts(static_cast<size_t>(num_classes), 0);
    for (int64_t i : part) ++counts[static_cast<size_t>(labels[static_cast<size_t>(i)])];
    total += static_cast<double>(*std::max_element(counts.begin(), counts.end())) /
             static_cast<double>(part.size());
  }
  return total / static_cast<double>(parts.size());
}

TEST(PartitionIidTest, CoversEveryIndexOnceWithBalancedSizes) {
  for (auto [n, k] : {std::pair<int64_t, int32_t>{60000, 10}, {1003, 7}, {5, 5}, {9, 1}}) {
    SCOPED_TRACE(testing::Message() << n << " examples, " << k << " clients");
    absl::StatusOr<Parts> parts = PartitionIid(n, k, /*seed=*/0);
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), static_cast<size_t>(k));
    ExpectExactCover(*parts, n);
    const auto [smallest, largest] =
        std::minmax_element(parts->begin(), parts->end(),
                            [](const auto& a, const auto& b) { return a.size() < b.size(); });
    EXPECT_LE(largest->size() - smallest->size(), 1u);
  }
}

TEST(PartitionIidTest, SeedDecidesThePartition) {
  const absl::StatusOr<Parts> a = PartitionIid(1000, 10, /*seed=*/1);
  const absl::StatusOr<Parts> b = PartitionIid(1000, 10, /*seed=*/1);
  const absl::StatusOr<Parts> c = PartitionIid(1000, 10, /*seed=*/2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  // Random, not a plain split of 0..999 into runs.
  EXPECT_FALSE(std::is_sorted((*a)[0].begin(), (*a)[0].end()));
}

TEST(PartitionIidTest, RefusesBadArguments) {
  EXPECT_EQ(PartitionIid(10, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionIid(10, -3, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionIid(10, 11, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionIid(0, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PartitionDirichletTest, CoversEveryIndexOnceAndEveryPartyHoldsTen) {
  const std::vector<int32_t> labels = BalancedLabels(10, 6000);
  for (double beta : {0.1, 0.5, 100.0}) {
    SCOPED_TRACE(testing::Message() << "beta " << beta);
    absl::StatusOr<Parts> parts = PartitionDirichlet(labels, 10, 10, beta, /*seed=*/0);
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), 10u);
    ExpectExactCover(*parts, static_cast<int64_t>(labels.size()));
    for (const auto& part : *parts) EXPECT_GE(part.size(), 10u);
  }
}

TEST(PartitionDirichletTest, SmallBetaSkewsLabels) {
  const std::vector<int32_t> labels = BalancedLabels(10, 6000);
  absl::StatusOr<Parts> skewed = PartitionDirichlet(labels, 10, 10, 0.1, /*seed=*/3);
  absl::StatusOr<Parts> even = PartitionDirichlet(labels, 10, 10, 1000.0, /*seed=*/3);
  absl::StatusOr<Parts> iid = PartitionIid(static_cast<int64_t>(labels.size()), 10, 3);
  ASSERT_TRUE(skewed.ok() && even.ok() && iid.ok());
  // IID parties hold about 10 % of each class; Dir(0.1) parties are dominated by a few classes.
  EXPECT_LT(MeanLargestClassShare(*iid, labels, 10), 0.12);
  EXPECT_LT(MeanLargestClassShare(*even, labels, 10), 0.15);
  EXPECT_GT(MeanLargestClassShare(*skewed, labels, 10), 0.4);
}

TEST(PartitionDirichletTest, SeedDecidesThePartition) {
  const std::vector<int32_t> labels = BalancedLabels(10, 500);
  const absl::StatusOr<Parts> a = PartitionDirichlet(labels, 10, 5, 0.5, /*seed=*/1);
  const absl::StatusOr<Parts> b = PartitionDirichlet(labels, 10, 5, 0.5, /*seed=*/1);
  const absl::StatusOr<Parts> c = PartitionDirichlet(labels, 10, 5, 0.5, /*seed=*/2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(PartitionDirichletTest, RefusesBadArguments) {
  const std::vector<int32_t> labels = BalancedLabels(10, 100);  // 1000 examples
  auto code = [&](const std::vector<int32_t>& l, int32_t classes, int32_t clients, double beta) {
    return PartitionDirichlet(l, classes, clients, beta, 0).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(labels, 10, 0, 0.5), kInvalid);
  EXPECT_EQ(code(labels, 0, 10, 0.5), kInvalid);
  EXPECT_EQ(code(labels, 10, 10, 0.0), kInvalid);
  EXPECT_EQ(code(labels, 10, 10, -1.0), kInvalid);
  EXPECT_EQ(code(labels, 10, 10, NAN), kInvalid);
  EXPECT_EQ(code(labels, 10, 101, 0.5), kInvalid);  // fewer than 10 examples per client
  EXPECT_EQ(code(labels, 9, 10, 0.5), kInvalid);    // label 9 is out of range
  std::vector<int32_t> negative = labels;
  negative[5] = -1;
  EXPECT_EQ(code(negative, 10, 10, 0.5), kInvalid);
  EXPECT_EQ(code(labels, 10, 20, 0.5), absl::StatusCode::kOk);
}

}  // namespace
}  // namespace fl::simulation
