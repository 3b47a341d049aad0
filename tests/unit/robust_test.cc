// Robust aggregation (robust.h): the column-block kernels against plain per-coordinate
// definitions, the strategies through their spill (a real one in a temporary directory, and one
// that fails), and each strategy's refusals.
#include "fl/aggregation/robust.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "aggregation/internal/robust_kernels.h"
#include "fl/aggregation/dp/central_dp.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/strategies.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace fl::aggregation {
namespace {

using ::testing::HasSubstr;

// Not a multiple of the column block, so the last block is partial.
constexpr int64_t kSize = internal::kColumnBlock * 2 + 777;

std::vector<std::vector<float>> RandomRows(int k, uint64_t seed, int64_t n = kSize) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::vector<float>> rows(static_cast<size_t>(k), std::vector<float>(n));
  for (auto& r : rows) {
    for (float& x : r) x = normal(rng);
  }
  return rows;
}

internal::Rows Spans(const std::vector<std::vector<float>>& rows) {
  internal::Rows spans;
  for (const auto& r : rows) spans.emplace_back(r);
  return spans;
}

std::vector<float> Column(const std::vector<std::vector<float>>& rows, size_t j) {
  std::vector<float> c;
  for (const auto& r : rows) c.push_back(r[j]);
  std::sort(c.begin(), c.end());
  return c;
}

TEST(RobustKernelsTest, MedianMatchesTheSortedMiddleForOddAndEvenK) {
  for (int k : {1, 4, 7}) {
    auto rows = RandomRows(k, 11 + k);
    std::vector<float> out(kSize);
    std::atomic<int64_t> released{0};  // the kernel's workers release their blocks at once
    internal::CoordinateMedian(Spans(rows), out,
                               [&](int64_t, int64_t count) { released += count; });
    EXPECT_EQ(released.load(), kSize) << "every block is handed back once";
    for (size_t j = 0; j < out.size(); ++j) {
      std::vector<float> c = Column(rows, j);
      const double want =
          k % 2 == 1 ? c[k / 2] : (static_cast<double>(c[k / 2 - 1]) + c[k / 2]) / 2;
      ASSERT_FLOAT_EQ(out[j], static_cast<float>(want)) << "k " << k << " parameter " << j;
    }
  }
}

// Every K from 1 to 70: the sorting network (K <= 64) and the one-by-one sort beyond it.
TEST(RobustKernelsTest, MedianAndTrimmedMeanAreRightForEveryK) {
  for (int k = 1; k <= 70; ++k) {
    auto rows = RandomRows(k, 100 + k, 1000);
    std::vector<float> median(1000), trimmed(1000);
    internal::CoordinateMedian(Spans(rows), median);
    const int cut = (k - 1) / 3;
    internal::TrimmedMean(Spans(rows), cut, trimmed);
    for (size_t j = 0; j < 1000; ++j) {
      std::vector<float> c = Column(rows, j);
      const double want =
          k % 2 == 1 ? c[k / 2] : (static_cast<double>(c[k / 2 - 1]) + c[k / 2]) / 2;
      ASSERT_FLOAT_EQ(median[j], static_cast<float>(want)) << "k " << k << " parameter " << j;
      const double mean = std::accumulate(c.begin() + cut, c.end() - cut, 0.0) / (k - 2 * cut);
      ASSERT_NEAR(trimmed[j], mean, 1e-5) << "k " << k << " parameter " << j;
    }
  }
}

TEST(RobustKernelsTest, TrimmedMeanDropsCutValuesAtEachEnd) {
  auto rows = RandomRows(9, 5);
  for (int cut : {0, 2, 4}) {
    std::vector<float> out(kSize);
    internal::TrimmedMean(Spans(rows), cut, out);
    for (size_t j = 0; j < out.size(); j += 97) {
      std::vector<float> c = Column(rows, j);
      const double want = std::accumulate(c.begin() + cut, c.end() - cut, 0.0) / (9 - 2 * cut);
      ASSERT_NEAR(out[j], want, 1e-6) << "cut " << cut << " parameter " << j;
    }
  }
}

TEST(RobustKernelsTest, SquaredDistancesMatchThePairwiseSums) {
  auto rows = RandomRows(5, 3);
  std::vector<double> d2 = internal::SquaredDistances(Spans(rows));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(d2[i * 5 + i], 0.0);
    for (int m = 0; m < 5; ++m) {
      double want = 0;
      for (int64_t j = 0; j < kSize; ++j) {
        const double d = static_cast<double>(rows[i][j]) - rows[m][j];
        want += d * d;
      }
      EXPECT_NEAR(d2[i * 5 + m], want, want * 1e-6) << i << "," << m;
    }
  }
}

// Honest updates near 0, attackers far off: Krum's choice and Bulyan's selection are honest.
TEST(RobustKernelsTest, KrumAndBulyanPassOverOutliers) {
  // 7 updates, f = 1: the last is an outlier.
  std::vector<double> d2(49, 1.0);
  for (int i = 0; i < 7; ++i) {
    d2[i * 7 + i] = 0;
    d2[i * 7 + 6] = d2[6 * 7 + i] = i == 6 ? 0 : 1e6;
  }
  d2[2 * 7 + 3] = d2[3 * 7 + 2] = 0.5;  // 2 and 3 are the closest pair
  std::vector<int> all = {0, 1, 2, 3, 4, 5, 6};
  std::vector<int> one = internal::KrumSelect(d2, 7, all, 1, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0] == 2 || one[0] == 3) << one[0];
  std::vector<int> five = internal::KrumSelect(d2, 7, all, 1, 5);
  EXPECT_EQ(std::count(five.begin(), five.end(), 6), 0) << "the outlier is not kept";
  std::vector<int> bulyan = internal::BulyanSelect(d2, 7, 1);
  EXPECT_EQ(bulyan.size(), 5u);  // theta = K - 2f
  EXPECT_EQ(std::count(bulyan.begin(), bulyan.end(), 6), 0);
}

// 6 candidates, f = 1: each scores its n - f - 2 = 3 nearest others. Candidate 0 has two very
// near neighbours and the rest far; candidate 1 has three moderately near ones. With 3 nearest,
// 1 wins (0's third is far); a Krum that summed 2 would pick 0.
TEST(RobustKernelsTest, KrumScoresSumExactlyTheNMinusFMinus2Nearest) {
  const int k = 6;
  std::vector<double> d2(k * k, 100.0);
  auto set = [&](int a, int b, double v) { d2[a * k + b] = d2[b * k + a] = v; };
  for (int i = 0; i < k; ++i) d2[i * k + i] = 0;
  set(0, 2, 1), set(0, 3, 1);                // 0: 1, 1, then 100s
  set(1, 3, 5), set(1, 4, 5), set(1, 5, 5);  // 1: 5, 5, 5
  std::vector<double> scores = internal::KrumScores(d2, k, {0, 1, 2, 3, 4, 5}, 1);
  EXPECT_DOUBLE_EQ(scores[0], 1 + 1 + 100);
  EXPECT_DOUBLE_EQ(scores[1], 5 + 5 + 5);
  EXPECT_EQ(internal::KrumSelect(d2, k, {0, 1, 2, 3, 4, 5}, 1, 1), std::vector<int>{1});
}

// Multi-Krum averages its picks weighted by their examples.
TEST(RobustKernelsTest, WeightedMeanOfRowsWeighsThePicksOnly) {
  std::vector<std::vector<float>> rows = {{1, 10}, {3, 30}, {100, 100}};
  std::vector<float> out(2);
  internal::WeightedMeanOfRows(Spans(rows), {0, 1}, {1, 3, 50}, out);
  EXPECT_FLOAT_EQ(out[0], 2.5f);
  EXPECT_FLOAT_EQ(out[1], 25.0f);
}

TEST(RobustKernelsTest, MeanClosestToMedianAveragesTheBetaNearestValues) {
  // One coordinate's values 0, 1, 2, 10, 11 (median 2): the 3 nearest are 0, 1, 2 (10 is 8 off).
  std::vector<std::vector<float>> rows = {{0}, {1}, {2}, {10}, {11}};
  std::vector<float> out(1);
  internal::MeanClosestToMedian(Spans(rows), {0, 1, 2, 3, 4}, 3, out);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  // Even count 1, 2, 4, 5, 100: with only {0,1,3,4} picked the median is 3; nearest two: 2 and 4.
  rows = {{1}, {2}, {100}, {4}, {5}};
  internal::MeanClosestToMedian(Spans(rows), {0, 1, 3, 4}, 2, out);
  EXPECT_FLOAT_EQ(out[0], 3.0f);
}

// A spill in a fresh directory, removed afterwards.
class RobustStrategyTest : public ::testing::Test {
 protected:
  std::unique_ptr<Strategy> Make(StrategyOptions options,
                                 std::shared_ptr<SpillSpace> spill = nullptr) {
    absl::StatusOr<std::unique_ptr<Strategy>> s =
        MakeStrategy(options, {}, spill != nullptr ? spill : MakeFileSpill(dir_));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  // Sends `rows` as whole updates, each in three pieces, through BeginUpdate; returns Finish.
  static absl::StatusOr<Model> Round(Strategy& strategy, const ModelSpec& spec,
                                     const std::vector<std::vector<float>>& rows) {
    Model global(spec);
    std::unique_ptr<RoundAggregator> agg = strategy.BeginRound(global);
    for (size_t i = 0; i < rows.size(); ++i) {
      absl::StatusOr<std::unique_ptr<UpdateSink>> sink =
          agg->BeginUpdate({.weight = 10.0 * (i + 1)});
      if (!sink.ok()) return sink.status();
      const std::span<const float> all(rows[i]);
      const size_t third = all.size() / 3;
      for (size_t first : {size_t{0}, third, 2 * third}) {
        const size_t n = first == 2 * third ? all.size() - first : third;
        if (absl::Status s = (*sink)->Write(first, all.subspan(first, n)); !s.ok()) return s;
      }
      if (absl::Status s = (*sink)->Accept(); !s.ok()) return s;
    }
    return agg->Finish();
  }

  fl::testing::TempDir tmp_;
  const std::string& dir_ = tmp_.path();
};

ModelSpec SpecOf(int64_t n) { return ModelSpec({{"w", {n}}}); }

TEST_F(RobustStrategyTest, EachStrategyIsItsKernelOverTheSpilledUpdates) {
  auto rows = RandomRows(7, 21);
  struct Case {
    StrategyOptions options;
    std::function<void(std::span<float>)> want;
  };
  const internal::Rows spans = Spans(rows);
  const std::vector<double> weights = {10, 20, 30, 40, 50, 60, 70};
  std::vector<Case> cases;
  cases.push_back(
      {{.name = "fedmedian"}, [&](auto out) { internal::CoordinateMedian(spans, out); }});
  cases.push_back({{.name = "fedtrimmedavg", .trim_beta = 0.3},
                   [&](auto out) { internal::TrimmedMean(spans, 2, out); }});
  cases.push_back({{.name = "krum", .num_malicious = 2}, [&](auto out) {
                     auto d2 = internal::SquaredDistances(spans);
                     auto best = internal::KrumSelect(d2, 7, {0, 1, 2, 3, 4, 5, 6}, 2, 1);
                     std::copy(rows[best[0]].begin(), rows[best[0]].end(), out.begin());
                   }});
  cases.push_back({{.name = "multikrum", .num_malicious = 1, .num_to_keep = 3}, [&](auto out) {
                     auto d2 = internal::SquaredDistances(spans);
                     auto best = internal::KrumSelect(d2, 7, {0, 1, 2, 3, 4, 5, 6}, 1, 3);
                     internal::WeightedMeanOfRows(spans, best, weights, out);
                   }});
  cases.push_back({{.name = "bulyan", .num_malicious = 1}, [&](auto out) {
                     auto d2 = internal::SquaredDistances(spans);
                     internal::MeanClosestToMedian(spans, internal::BulyanSelect(d2, 7, 1), 3, out);
                   }});
  for (Case& c : cases) {
    std::unique_ptr<Strategy> s = Make(c.options);
    ASSERT_NE(s, nullptr);
    absl::StatusOr<Model> got = Round(*s, SpecOf(kSize), rows);
    ASSERT_TRUE(got.ok()) << c.options.name << ": " << got.status();
    std::vector<float> want(kSize);
    c.want(want);
    for (int64_t j = 0; j < kSize; ++j) {
      ASSERT_NEAR(got->data()[j], want[j], 1e-6) << c.options.name << " parameter " << j;
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "spill files are unlinked at creation";
}

// Four honest sites near +1, attackers sending -100 everywhere: FedAvg is dragged off, the robust
// strategies stay within the honest values.
TEST_F(RobustStrategyTest, AFewAttackersMoveFedAvgButNotTheRobustStrategies) {
  auto rows = RandomRows(7, 8, 4096);
  for (int i = 0; i < 7; ++i) {
    for (float& x : rows[i]) x = i < 5 ? 1.0f + 0.01f * x : -100.0f;
  }
  std::unique_ptr<Strategy> fedavg = MakeFedAvg();
  absl::StatusOr<Model> mean = Round(*fedavg, SpecOf(4096), rows);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_LT(mean->data()[0], -20.0f);
  for (StrategyOptions o : std::vector<StrategyOptions>{{.name = "fedmedian"},
                                                        {.name = "fedtrimmedavg", .trim_beta = 0.3},
                                                        {.name = "krum", .num_malicious = 2},
                                                        {.name = "multikrum", .num_malicious = 2},
                                                        {.name = "bulyan", .num_malicious = 1}}) {
    std::unique_ptr<Strategy> s = Make(o);
    absl::StatusOr<Model> got = Round(*s, SpecOf(4096), rows);
    ASSERT_TRUE(got.ok()) << o.name << ": " << got.status();
    for (float x : got->data()) ASSERT_NEAR(x, 1.0f, 0.05f) << o.name;
  }
}

TEST_F(RobustStrategyTest, SettingsThatCannotWorkAreRefusedWithTheReason) {
  StrategyOptions half{.name = "fedtrimmedavg", .trim_beta = 0.5};
  EXPECT_THAT(MakeStrategy(half).status().message(),
              HasSubstr("trim_beta must be in [0, 0.5) (at 0.5 the trimmed mean trims every"));
  EXPECT_THAT(MakeStrategy({.name = "krum", .num_malicious = -1}).status().message(),
              HasSubstr("num_malicious must be >= 0"));

  std::unique_ptr<Strategy> krum = Make({.name = "krum", .num_malicious = 2});
  EXPECT_THAT(krum->CheckPlan({.min_updates = 6}).message(),
              HasSubstr("'krum' with num_malicious = 2 needs at least 7 updates in every round, "
                        "and min_fit_clients is 6; raise min_fit_clients to 7"));
  EXPECT_TRUE(krum->CheckPlan({.min_updates = 7}).ok());
  EXPECT_THAT(krum->CheckPlan({.min_updates = 9, .secure_aggregation = true}).message(),
              HasSubstr("needs each site's update apart, and secure aggregation shows the server "
                        "only their sum"));
  std::unique_ptr<Strategy> bulyan = Make({.name = "bulyan", .num_malicious = 2});
  EXPECT_THAT(bulyan->CheckPlan({.min_updates = 10}).message(),
              HasSubstr("needs at least 11 updates"));
  std::unique_ptr<Strategy> multi =
      Make({.name = "multikrum", .num_malicious = 1, .num_to_keep = 8});
  EXPECT_THAT(multi->CheckPlan({.min_updates = 6}).message(),
              HasSubstr("num_malicious = 1 and num_to_keep = 8 needs at least 9 updates"));
  std::unique_ptr<Strategy> median = Make({.name = "fedmedian"});
  EXPECT_THAT(
      dp::MakeCentralDp(*median, {.noise_multiplier = 1, .clip_norm = 1}).status().message(),
      HasSubstr("central DP cannot wrap strategy 'fedmedian'"));
}

TEST_F(RobustStrategyTest, ARoundWithTooFewUpdatesForFFailsWithTheCount) {
  std::unique_ptr<Strategy> krum = Make({.name = "krum", .num_malicious = 1});
  absl::StatusOr<Model> got = Round(*krum, SpecOf(100), RandomRows(4, 1, 100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(),
              HasSubstr("krum with num_malicious = 1 needs at least 5 updates in a round, and "
                        "this one accepted 4"));
  absl::StatusOr<Model> none = Round(*krum, SpecOf(100), {});
  EXPECT_THAT(none.status().message(), HasSubstr("no update was accepted"));
}

// A spill that refuses the n-th file, or fails the n-th write.
class FailingSpill : public SpillSpace {
 public:
  FailingSpill(std::shared_ptr<SpillSpace> real, int fail_create, int fail_write)
      : real_(std::move(real)), fail_create_(fail_create), fail_write_(fail_write) {}
  absl::StatusOr<std::unique_ptr<SpillFile>> Create(int64_t n) override {
    if (++creates_ == fail_create_) return absl::ResourceExhaustedError("no space left (test)");
    absl::StatusOr<std::unique_ptr<SpillFile>> f = real_->Create(n);
    if (!f.ok() || creates_ != fail_write_) return f;
    struct Broken : SpillFile {
      std::unique_ptr<SpillFile> inner;
      absl::Status Write(int64_t, std::span<const float>) override {
        return absl::InternalError("write error (test)");
      }
      absl::StatusOr<std::span<const float>> Map() override { return inner->Map(); }
    };
    auto b = std::make_unique<Broken>();
    b->inner = *std::move(f);
    return b;
  }

 private:
  std::shared_ptr<SpillSpace> real_;
  int fail_create_, fail_write_;
  int creates_ = 0;
};

TEST_F(RobustStrategyTest, AnUpdateTheSpillCannotKeepIsLeftOutAndTheRoundGoesOn) {
  auto spill = std::make_shared<FailingSpill>(MakeFileSpill(dir_), 2, 4);
  std::unique_ptr<Strategy> median = Make({.name = "fedmedian"}, spill);
  auto rows = RandomRows(5, 4, 64);
  std::unique_ptr<RoundAggregator> agg = median->BeginRound(Model(SpecOf(64)));
  EXPECT_TRUE(agg->keeps_updates_apart());
  std::vector<int> kept;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::unique_ptr<UpdateSink>> sink = agg->BeginUpdate({.weight = 1});
    if (i == 1) {
      EXPECT_THAT(sink.status().message(), HasSubstr("no space left (test)"));
      continue;
    }
    ASSERT_TRUE(sink.ok()) << sink.status();
    absl::Status w = (*sink)->Write(0, rows[i]);
    if (i == 3) {
      EXPECT_THAT(w.message(), HasSubstr("write error (test)"));
      continue;  // dropped before Accept
    }
    ASSERT_TRUE(w.ok()) << w;
    ASSERT_TRUE((*sink)->Accept().ok());
    kept.push_back(i);
  }
  EXPECT_EQ(agg->num_accepted(), 3);
  absl::StatusOr<Model> got = agg->Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t j = 0; j < 64; ++j) {
    std::vector<float> c = {rows[0][j], rows[2][j], rows[4][j]};
    std::sort(c.begin(), c.end());
    ASSERT_EQ(got->data()[j], c[1]) << j;
  }
}

TEST_F(RobustStrategyTest, PiecesFoldedWithoutAnUpdateFailTheRound) {
  std::unique_ptr<Strategy> median = Make({.name = "fedmedian"});
  std::unique_ptr<RoundAggregator> agg = median->BeginRound(Model(SpecOf(4)));
  const float v[4] = {1, 2, 3, 4};
  agg->Fold(0, v, 1.0);
  agg->Accept(1.0);
  EXPECT_THAT(agg->Finish().status().message(),
              HasSubstr("was given pieces of updates not kept apart"));
}

TEST_F(RobustStrategyTest, AMissingSpillDirectoryIsRefusedWithItsPath) {
  std::shared_ptr<SpillSpace> nowhere = MakeFileSpill(dir_ + "/missing");
  absl::StatusOr<std::unique_ptr<SpillFile>> f = nowhere->Create(10);
  EXPECT_THAT(f.status().message(),
              HasSubstr("cannot create a spill file in " + dir_ + "/missing"));
}

}  // namespace
}  // namespace fl::aggregation
