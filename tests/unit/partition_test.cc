#include "fl/simulation/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

using Parts = std::vector<std::vector<int64_t>>;
using ::testing::HasSubstr;

// The status's code is INVALID_ARGUMENT and its message contains `text`.
void ExpectInvalid(const absl::Status& status, const std::string& text) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(text));
}

// The distinct labels of one party.
std::set<int32_t> ClassesOf(const std::vector<int64_t>& part, const std::vector<int32_t>& labels) {
  std::set<int32_t> classes;
  for (int64_t i : part) classes.insert(labels[static_cast<size_t>(i)]);
  return classes;
}

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

TEST(PartitionShardsTest, EachClientHoldsItsShardsOfSortedLabels) {
  // 100 clients x 2 shards of 30 over 10 classes of 600: every shard holds one class.
  const std::vector<int32_t> labels = BalancedLabels(10, 600);
  absl::StatusOr<Parts> parts = PartitionShards(labels, 100, 2, /*seed=*/0);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 100u);
  ExpectExactCover(*parts, 6000);
  int clients_with_two_classes = 0;
  for (const auto& part : *parts) {
    EXPECT_EQ(part.size(), 60u);
    const std::set<int32_t> classes = ClassesOf(part, labels);
    EXPECT_LE(classes.size(), 2u);
    clients_with_two_classes += classes.size() == 2 ? 1 : 0;
    // Each shard is a run of the label-sorted indices: one class, ascending indices.
    for (size_t s = 0; s < 2; ++s) {
      const std::vector<int64_t> shard(part.begin() + 30 * s, part.begin() + 30 * (s + 1));
      EXPECT_EQ(ClassesOf(shard, labels).size(), 1u);
      EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end()));
    }
  }
  EXPECT_GT(clients_with_two_classes, 50);  // random shards, mostly of different classes
}

TEST(PartitionShardsTest, UnevenSizesKeepEveryIndex) {
  const std::vector<int32_t> labels = BalancedLabels(3, 337);  // 1011 examples, 21 shards
  absl::StatusOr<Parts> parts = PartitionShards(labels, 7, 3, /*seed=*/5);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ExpectExactCover(*parts, 1011);
  for (const auto& part : *parts) {
    EXPECT_GE(part.size(), 3u * 48);  // shards of 48 or 49
    EXPECT_LE(part.size(), 3u * 49);
  }
}

TEST(PartitionShardsTest, SeedDecidesThePartition) {
  const std::vector<int32_t> labels = BalancedLabels(10, 100);
  const absl::StatusOr<Parts> a = PartitionShards(labels, 10, 2, /*seed=*/1);
  const absl::StatusOr<Parts> b = PartitionShards(labels, 10, 2, /*seed=*/1);
  const absl::StatusOr<Parts> c = PartitionShards(labels, 10, 2, /*seed=*/2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(PartitionShardsTest, RefusesBadArguments) {
  const std::vector<int32_t> labels = BalancedLabels(10, 10);  // 100 examples
  ExpectInvalid(PartitionShards(labels, 0, 2, 0).status(), "num_clients must be >= 1, not 0");
  ExpectInvalid(PartitionShards(labels, 10, 0, 0).status(),
                "shards_per_client must be >= 1, not 0");
  ExpectInvalid(PartitionShards(labels, 51, 2, 0).status(),
                "cannot cut 100 examples into 102 shards (num_clients 51 x shards_per_client 2)");
  EXPECT_TRUE(PartitionShards(labels, 50, 2, 0).ok());
}

TEST(PartitionLabelKTest, EachPartyHoldsExactlyKClassesAndEveryIndexOnce) {
  const std::vector<int32_t> labels = BalancedLabels(10, 600);
  for (int32_t k : {1, 2, 3, 10}) {
    SCOPED_TRACE(testing::Message() << "k " << k);
    absl::StatusOr<Parts> parts = PartitionLabelK(labels, 10, 10, k, /*seed=*/0);
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), 10u);
    ExpectExactCover(*parts, 6000);  // 10 parties: party i holds class i, so every class is held
    for (size_t i = 0; i < parts->size(); ++i) {
      const std::set<int32_t> classes = ClassesOf((*parts)[i], labels);
      EXPECT_EQ(classes.size(), static_cast<size_t>(k));
      EXPECT_TRUE(classes.count(static_cast<int32_t>(i % 10))) << "party " << i;
    }
  }
}

TEST(PartitionLabelKTest, SplitsEachClassEvenlyAmongItsHolders) {
  const std::vector<int32_t> labels = BalancedLabels(10, 600);
  absl::StatusOr<Parts> parts = PartitionLabelK(labels, 10, 20, 2, /*seed=*/7);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ExpectExactCover(*parts, 6000);
  // For each class, the counts of the parties holding it differ by at most one.
  for (int32_t c = 0; c < 10; ++c) {
    std::vector<int64_t> counts;
    for (const auto& part : *parts) {
      const auto n = std::count_if(part.begin(), part.end(),
                                   [&](int64_t i) { return labels[static_cast<size_t>(i)] == c; });
      if (n > 0) counts.push_back(n);
    }
    ASSERT_FALSE(counts.empty());
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    EXPECT_LE(*hi - *lo, 1) << "class " << c;
  }
}

TEST(PartitionLabelKTest, LeavesOutClassesNobodyHolds) {
  // 2 parties with k = 1 hold classes 0 and 1 only: the other 8 classes are left out.
  const std::vector<int32_t> labels = BalancedLabels(10, 50);
  absl::StatusOr<Parts> parts = PartitionLabelK(labels, 10, 2, 1, /*seed=*/0);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(ClassesOf((*parts)[0], labels), std::set<int32_t>{0});
  EXPECT_EQ(ClassesOf((*parts)[1], labels), std::set<int32_t>{1});
  EXPECT_EQ((*parts)[0].size() + (*parts)[1].size(), 100u);
  absl::StatusOr<PartitionSummary> summary = SummarizePartition(*parts, labels, 10);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->num_unassigned, 400);
}

TEST(PartitionLabelKTest, SeedDecidesThePartition) {
  const std::vector<int32_t> labels = BalancedLabels(10, 100);
  const absl::StatusOr<Parts> a = PartitionLabelK(labels, 10, 10, 2, /*seed=*/1);
  const absl::StatusOr<Parts> b = PartitionLabelK(labels, 10, 10, 2, /*seed=*/1);
  const absl::StatusOr<Parts> c = PartitionLabelK(labels, 10, 10, 2, /*seed=*/2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(PartitionLabelKTest, RefusesBadArguments) {
  const std::vector<int32_t> labels = BalancedLabels(10, 10);
  ExpectInvalid(PartitionLabelK(labels, 10, 0, 2, 0).status(), "num_clients must be >= 1, not 0");
  ExpectInvalid(PartitionLabelK(labels, 0, 10, 2, 0).status(), "num_classes must be >= 1, not 0");
  ExpectInvalid(PartitionLabelK(labels, 10, 10, 0, 0).status(),
                "k must be in [1, num_classes = 10], not 0");
  ExpectInvalid(PartitionLabelK(labels, 10, 10, 11, 0).status(),
                "k must be in [1, num_classes = 10], not 11");
  ExpectInvalid(PartitionLabelK(labels, 9, 10, 2, 0).status(),
                "label 9 at index 9 is outside [0, 9)");
}

TEST(PartitionQuantitySkewTest, SizesSumToNAndEachIsAtLeastTen) {
  for (double beta : {0.1, 0.5, 10.0}) {
    SCOPED_TRACE(testing::Message() << "beta " << beta);
    absl::StatusOr<Parts> parts = PartitionQuantitySkew(60000, 10, beta, /*seed=*/0);
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), 10u);
    ExpectExactCover(*parts, 60000);  // so the sizes sum to N
    for (const auto& part : *parts) EXPECT_GE(part.size(), 10u);
  }
}

TEST(PartitionQuantitySkewTest, SmallBetaSkewsSizesButNotLabels) {
  const std::vector<int32_t> labels = BalancedLabels(10, 6000);
  absl::StatusOr<Parts> skewed = PartitionQuantitySkew(60000, 10, 0.5, /*seed=*/3);
  absl::StatusOr<Parts> even = PartitionQuantitySkew(60000, 10, 1000.0, /*seed=*/3);
  ASSERT_TRUE(skewed.ok() && even.ok());
  auto size_ratio = [](const Parts& parts) {
    const auto [lo, hi] =
        std::minmax_element(parts.begin(), parts.end(),
                            [](const auto& a, const auto& b) { return a.size() < b.size(); });
    return static_cast<double>(hi->size()) / static_cast<double>(lo->size());
  };
  EXPECT_GT(size_ratio(*skewed), 5.0);
  EXPECT_LT(size_ratio(*even), 1.3);
  // Every party of more than 1000 examples has about 10 % of each class.
  for (const auto& part : *skewed) {
    if (part.size() < 1000) continue;
    EXPECT_LT(MeanLargestClassShare({part}, labels, 10), 0.15);
  }
}

TEST(PartitionQuantitySkewTest, SeedDecidesThePartition) {
  const absl::StatusOr<Parts> a = PartitionQuantitySkew(1000, 10, 0.5, /*seed=*/1);
  const absl::StatusOr<Parts> b = PartitionQuantitySkew(1000, 10, 0.5, /*seed=*/1);
  const absl::StatusOr<Parts> c = PartitionQuantitySkew(1000, 10, 0.5, /*seed=*/2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(PartitionQuantitySkewTest, RefusesBadArguments) {
  ExpectInvalid(PartitionQuantitySkew(1000, 0, 0.5, 0).status(), "num_clients must be >= 1, not 0");
  ExpectInvalid(PartitionQuantitySkew(1000, 10, 0.0, 0).status(),
                "beta must be positive and finite, not 0");
  ExpectInvalid(PartitionQuantitySkew(1000, 10, -1.0, 0).status(),
                "beta must be positive and finite, not -1");
  ExpectInvalid(PartitionQuantitySkew(1000, 10, INFINITY, 0).status(),
                "beta must be positive and finite, not inf");
  ExpectInvalid(PartitionQuantitySkew(99, 10, 0.5, 0).status(),
                "num_examples 99 is fewer than 10 per client for num_clients 10");
  // Exactly 10 each is possible only by a perfectly even draw: hopeless for a small beta.
  ExpectInvalid(PartitionQuantitySkew(100, 10, 0.01, 0).status(), "no Dirichlet(beta = 0.01) draw");
}

TEST(PartitionByColumnTest, OnePartyPerValueInSortedOrder) {
  const std::vector<std::string> keys = {"st-mary", "city", "st-mary", "general", "city", "city"};
  absl::StatusOr<Parts> parts = PartitionByColumn(keys);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(*parts, (Parts{{1, 4, 5}, {3}, {0, 2}}));  // city, general, st-mary
}

TEST(PartitionByColumnTest, RefusesNoRows) {
  ExpectInvalid(PartitionByColumn({}).status(), "keys must not be empty");
}

TEST(PartitionSampledTest, EachPartyDrawsDistinctIndicesAndPartiesMayShare) {
  // More parties than examples: what "sampled" is for.
  const Parts parts = *PartitionSampled(50, 200, 20, 7);
  ASSERT_EQ(parts.size(), 200u);
  int64_t total = 0;
  for (const std::vector<int64_t>& part : parts) {
    ASSERT_EQ(part.size(), 20u);
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    EXPECT_EQ(std::adjacent_find(part.begin(), part.end()), part.end()) << "an index twice";
    EXPECT_GE(part.front(), 0);
    EXPECT_LT(part.back(), 50);
    total += static_cast<int64_t>(part.size());
  }
  EXPECT_EQ(total, 4000);
  // Uniform: every index is drawn, about 4000 / 50 = 80 times.
  std::vector<int> draws(50);
  for (const std::vector<int64_t>& part : parts) {
    for (int64_t i : part) ++draws[static_cast<size_t>(i)];
  }
  EXPECT_GT(*std::min_element(draws.begin(), draws.end()), 40);
  EXPECT_LT(*std::max_element(draws.begin(), draws.end()), 120);
  // The summary counts the shared draws as duplicated.
  const std::vector<int32_t> labels(50, 0);
  EXPECT_EQ(SummarizePartition(parts, labels, 1)->num_duplicated, 4000 - 50);
}

TEST(PartitionSampledTest, SeedDecidesThePartitionAndBadArgumentsAreRefused) {
  EXPECT_EQ(*PartitionSampled(1000, 30, 10, 1), *PartitionSampled(1000, 30, 10, 1));
  EXPECT_NE(*PartitionSampled(1000, 30, 10, 1), *PartitionSampled(1000, 30, 10, 2));
  ExpectInvalid(PartitionSampled(10, 3, 11, 0).status(), "examples_per_party 11 is not in [1, 10]");
  ExpectInvalid(PartitionSampled(10, 3, 0, 0).status(), "examples_per_party 0 is not in [1, 10]");
  ExpectInvalid(PartitionSampled(10, 0, 1, 0).status(), "num_clients must be >= 1");
  PartitionSpec spec;
  spec.name = "sampled";
  spec.examples_per_party = 5;
  spec.seed = 3;
  EXPECT_EQ(*MakePartition(spec, BalancedLabels(2, 10), 2, 4), *PartitionSampled(20, 4, 5, 3));
}

TEST(PartitionSummaryTest, CountsExamplesAndClassesPerParty) {
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 0};
  absl::StatusOr<PartitionSummary> summary =
      SummarizePartition(Parts{{0, 3, 6}, {1, 2}, {4, 4}}, labels, 3);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->num_classes, 3);
  EXPECT_EQ(summary->num_examples, 7);
  EXPECT_EQ(summary->num_unassigned, 1);  // index 5
  EXPECT_EQ(summary->num_duplicated, 1);  // index 4, twice
  ASSERT_EQ(summary->parties.size(), 3u);
  EXPECT_EQ(summary->parties[0].num_examples, 3);
  EXPECT_EQ(summary->parties[0].class_counts, (std::vector<int64_t>{3, 0, 0}));
  EXPECT_EQ(summary->parties[1].class_counts, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(summary->parties[2].class_counts, (std::vector<int64_t>{0, 2, 0}));
}

TEST(PartitionSummaryTest, RefusesIndicesAndLabelsOutOfRange) {
  const std::vector<int32_t> labels = {0, 1, 2};
  ExpectInvalid(SummarizePartition(Parts{{0, 3}}, labels, 3).status(),
                "index 3 of party 0 is outside [0, 3)");
  ExpectInvalid(SummarizePartition(Parts{{-1}}, labels, 3).status(),
                "index -1 of party 0 is outside [0, 3)");
  ExpectInvalid(SummarizePartition(Parts{{2}}, labels, 2).status(),
                "label 2 at index 2 is outside [0, 2)");
  ExpectInvalid(SummarizePartition(Parts{}, labels, 0).status(), "num_classes must be >= 1, not 0");
}

TEST(PartitionSummaryTest, FormatsSizesClassesAndHistogram) {
  // Party sizes 10, 20, 30, 100; classes per party 1, 2, 1, 2.
  std::vector<int32_t> labels;
  Parts parts(4);
  auto add = [&](size_t party, int32_t label, int n) {
    for (int i = 0; i < n; ++i) {
      parts[party].push_back(static_cast<int64_t>(labels.size()));
      labels.push_back(label);
    }
  };
  add(0, 0, 10);
  add(1, 0, 10);
  add(1, 1, 10);
  add(2, 2, 30);
  add(3, 0, 50);
  add(3, 2, 50);
  absl::StatusOr<PartitionSummary> summary = SummarizePartition(parts, labels, 3);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(FormatPartitionSummary(*summary),
            "4 parties, 160 examples\n"
            "examples per party: min 10, median 25, max 100\n"
            "distinct classes per party: mean 1.50 of 3\n"
            "party sizes:\n"
            "   10-19  ######################################## 1\n"
            "   20-29  ######################################## 1\n"
            "   30-39  ######################################## 1\n"
            "   40-49   0\n"
            "   50-59   0\n"
            "   60-69   0\n"
            "   70-79   0\n"
            "   80-89   0\n"
            "   90-99   0\n"
            "  100-100 ######################################## 1\n");
}

TEST(PartitionSummaryTest, FormatsEqualPartiesAndNoParties) {
  const std::vector<int32_t> labels = BalancedLabels(2, 10);
  absl::StatusOr<Parts> parts = PartitionIid(20, 4, 0);
  ASSERT_TRUE(parts.ok());
  absl::StatusOr<PartitionSummary> summary = SummarizePartition(*parts, labels, 2);
  ASSERT_TRUE(summary.ok());
  const std::string text = FormatPartitionSummary(*summary);
  EXPECT_THAT(text, HasSubstr("4 parties, 20 examples\n"));
  EXPECT_THAT(text, HasSubstr("min 5, median 5, max 5\n"));
  EXPECT_THAT(text, HasSubstr("  5-5 ######################################## 4\n"));

  absl::StatusOr<PartitionSummary> empty = SummarizePartition(Parts{}, labels, 2);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(FormatPartitionSummary(*empty), "0 parties, 20 examples, 20 unassigned\n");
}

TEST(MakePartitionTest, RunsThePartitionerNamed) {
  const std::vector<int32_t> labels = BalancedLabels(10, 100);
  PartitionSpec spec;
  spec.seed = 4;
  spec.beta = 0.5;
  spec.k = 2;
  spec.shards_per_client = 2;
  auto run = [&](const std::string& name) {
    spec.name = name;
    return MakePartition(spec, labels, 10, 10);
  };
  EXPECT_EQ(*run("iid"), *PartitionIid(1000, 10, 4));
  EXPECT_EQ(*run("dirichlet"), *PartitionDirichlet(labels, 10, 10, 0.5, 4));
  EXPECT_EQ(*run("label_k"), *PartitionLabelK(labels, 10, 10, 2, 4));
  EXPECT_EQ(*run("pathological"), *PartitionLabelK(labels, 10, 10, 2, 4));
  EXPECT_EQ(*run("shards"), *PartitionShards(labels, 10, 2, 4));
  EXPECT_EQ(*run("quantity_skew"), *PartitionQuantitySkew(1000, 10, 0.5, 4));
}

TEST(MakePartitionTest, ColumnNeedsAKeyPerRowAndItsNumberOfParties) {
  const std::vector<int32_t> labels = {0, 1, 0, 1};
  const std::vector<std::string> column = {"b", "a", "b", "c"};
  PartitionSpec spec;
  spec.name = "column";
  EXPECT_EQ(*MakePartition(spec, labels, 2, 0, column), (Parts{{1}, {0, 2}, {3}}));
  EXPECT_EQ(*MakePartition(spec, labels, 2, 3, column), (Parts{{1}, {0, 2}, {3}}));
  ExpectInvalid(MakePartition(spec, labels, 2, 4, column).status(),
                "num_clients 4 must be 0 or the column's 3 distinct values");
  ExpectInvalid(MakePartition(spec, labels, 2, 0, {"a"}).status(),
                "column has 1 values but the dataset has 4 rows");
}

TEST(MakePartitionTest, RefusesAnUnknownNameListingTheValidOnes) {
  PartitionSpec spec;
  spec.name = "dirichlet_label";
  ExpectInvalid(MakePartition(spec, BalancedLabels(2, 50), 2, 2).status(),
                "unknown partitioner name \"dirichlet_label\"; valid names: iid, dirichlet, "
                "label_k, pathological, shards, quantity_skew, sampled, column");
}

TEST(MakePartitionTest, PassesOnTheRefusalOfThePartitioner) {
  PartitionSpec spec;
  spec.name = "label_k";
  spec.k = 0;
  ExpectInvalid(MakePartition(spec, BalancedLabels(10, 10), 10, 10).status(),
                "k must be in [1, num_classes = 10], not 0");
}

}  // namespace
}  // namespace fl::simulation
