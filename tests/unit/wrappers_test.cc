// The strategy interface's defaults (the seeded draw, the evaluation's weighted means) and the
// wrappers: the norm bound and accept_failures = false over FedAvg, and what every wrapper passes
// on to the strategy it wraps.
#include "fl/aggregation/wrappers.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fl/aggregation/dp/central_dp.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/strategies.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::aggregation {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string_view> Views(const std::vector<std::string>& ids) {
  return std::vector<std::string_view>(ids.begin(), ids.end());
}

TEST(StrategyInterfaceTest, TheDefaultDrawIsSeededSortedAndTakesWhatIsAskedFor) {
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.push_back("site-" + std::to_string(1000 + i));
  const std::vector<std::string_view> available = Views(ids);
  RoundContext ctx{.round = 3, .available = available, .num_to_sample = 10, .seed = 42};
  const std::vector<std::string> a = SampleSites(ctx);
  ASSERT_EQ(a.size(), 10u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(SampleSites(ctx), a);  // same context, same sites
  ctx.seed = 43;
  EXPECT_NE(SampleSites(ctx), a);
  // Pinned: the engine drew exactly these before strategies configured rounds (the same
  // seeded Fisher-Yates over the same order), so a run's sites do not change with the interface.
  ctx.seed = 7 * 1000003u + 3 * 7919u;
  EXPECT_THAT(
      SampleSites(ctx),
      ::testing::ElementsAre("site-1000", "site-1003", "site-1007", "site-1027", "site-1028",
                             "site-1030", "site-1062", "site-1072", "site-1075", "site-1081"));
  ctx.num_to_sample = 500;  // more than there are: all of them
  EXPECT_EQ(SampleSites(ctx).size(), 100u);
  absl::StatusOr<RoundPlan> plan = MakeFedAvg()->ConfigureFit(ctx);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->sites, SampleSites(ctx));
  EXPECT_TRUE(plan->config.empty());
}

TEST(StrategyInterfaceTest, TheDefaultEvaluationWeighsByExamplesAndEachMetricByItsOwnSites) {
  const std::vector<SiteEvaluation> results = {
      {.site = "a", .num_examples = 100, .loss = 1.0, .metrics = {{"accuracy", 0.5}}},
      {.site = "b", .num_examples = 300, .loss = 2.0, .metrics = {{"accuracy", 0.9}, {"auc", 0.8}}},
  };
  const std::vector<SiteFailure> failures = {
      {.site = "c", .kind = SiteFailure::Kind::kDeclined, .reason = "no test data"}};
  absl::StatusOr<EvaluationSummary> s = MakeFedAvg()->AggregateEvaluate(4, results, failures);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->loss, (100 * 1.0 + 300 * 2.0) / 400);
  EXPECT_EQ(s->num_examples, 400);
  EXPECT_DOUBLE_EQ(s->metrics.at("accuracy"), (100 * 0.5 + 300 * 0.9) / 400);
  EXPECT_DOUBLE_EQ(s->metrics.at("auc"), 0.8);  // b's alone: a did not report it
  absl::StatusOr<EvaluationSummary> none = MakeFedAvg()->AggregateEvaluate(4, {}, failures);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      none.status().message(),
      HasSubstr("no site's evaluation of round 4 holds an example (0 results, 1 failures)"));
}

TEST(WrappersTest, NormBoundAsksForItsBoundPassesTheRestOnAndRefusesSecureAggregation) {
  absl::StatusOr<std::unique_ptr<Strategy>> bounded = MakeNormBound(MakeFedAvg(), 3.5);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_EQ((*bounded)->name(), "fedavg");
  EXPECT_EQ((*bounded)->update_norm_bound(), 3.5);
  EXPECT_TRUE((*bounded)->CheckPlan({.min_updates = 2}).ok());
  const absl::Status secure = (*bounded)->CheckPlan({.secure_aggregation = true});
  EXPECT_EQ(secure.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(secure.message(), HasSubstr("strategy.norm_bound (3.5) cannot be used with secure "
                                          "aggregation"));
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    absl::StatusOr<std::unique_ptr<Strategy>> refused = MakeNormBound(MakeFedAvg(), bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("norm_bound must be a finite number > 0"));
  }
}

TEST(WrappersTest, CentralDpAndANormBoundClipToTheSmallerOfTheirBounds) {
  absl::StatusOr<std::unique_ptr<Strategy>> bounded = MakeNormBound(MakeFedAvg(), 0.5);
  ASSERT_TRUE(bounded.ok());
  absl::StatusOr<std::unique_ptr<Strategy>> dp =
      dp::MakeCentralDp(**bounded, {.noise_multiplier = 1.0, .clip_norm = 2.0, .make_source = {}});
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ((*dp)->update_norm_bound(), 0.5);
  absl::StatusOr<std::unique_ptr<Strategy>> loose = MakeNormBound(MakeFedAvg(), 9.0);
  absl::StatusOr<std::unique_ptr<Strategy>> dp2 =
      dp::MakeCentralDp(**loose, {.noise_multiplier = 1.0, .clip_norm = 2.0, .make_source = {}});
  ASSERT_TRUE(dp2.ok());
  EXPECT_EQ((*dp2)->update_norm_bound(), 2.0);
  EXPECT_EQ(MakeFedAvg()->update_norm_bound(), 0);
}

TEST(WrappersTest, RequireEverySiteFailsTheRoundNamingTheSitesAndCommitsAWholeOne) {
  std::unique_ptr<Strategy> strict = MakeRequireEverySite(MakeFedAvg());
  Model global(ModelSpec({{"w", {2}}}));
  Model update(global.spec());
  update.data()[0] = 1;
  update.data()[1] = 3;

  std::unique_ptr<RoundAggregator> whole = strict->BeginRound(global);
  whole->Fold(0, update.data(), 1.0);
  whole->Accept(1.0);
  absl::StatusOr<Model> next = whole->Finish();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->data()[1], 3);

  std::unique_ptr<RoundAggregator> partial = strict->BeginRound(global);
  partial->Fold(0, update.data(), 1.0);
  partial->Accept(1.0);
  for (int i = 0; i < 7; ++i) {
    partial->Failed({.site = std::to_string(i) + "123456789abcdef-site",
                     .kind = i == 0 ? SiteFailure::Kind::kDropped : SiteFailure::Kind::kMissing,
                     .reason = i == 0 ? "offline: no poll for 2m" : "no update before the close"});
  }
  absl::StatusOr<Model> failed = partial->Finish();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("accept_failures is false and 7 of the sampled sites failed: "
                        "0123456789abcdef dropped (offline: no poll for 2m); 1123456789abcdef "
                        "missing (no update before the close)"));
  EXPECT_THAT(failed.status().message(), HasSubstr("4123456789abcdef missing"));
  EXPECT_THAT(failed.status().message(), Not(HasSubstr("5123456789abcdef")));  // five shown
  EXPECT_THAT(failed.status().message(), HasSubstr("; ..."));
}

TEST(WrappersTest, MakeStrategyWrapsAsTheOptionsSay) {
  StrategyOptions options;
  options.name = "fedmedian";
  options.norm_bound = 1.5;
  options.accept_failures = false;
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy(options, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->name(), "fedmedian");
  EXPECT_EQ((*s)->update_norm_bound(), 1.5);
  // Still the median underneath: it keeps updates apart, and refuses central DP.
  EXPECT_EQ((*s)->CheckPlan({.central_dp = true}).code(), absl::StatusCode::kInvalidArgument);
  // accept_failures = false took: a round that lost a site fails.
  Model global(ModelSpec({{"w", {3}}}));
  std::unique_ptr<RoundAggregator> round = (*s)->BeginRound(global);
  round->Failed({.site = "site-x", .kind = SiteFailure::Kind::kDeclined, .reason = "busy"});
  EXPECT_THAT(round->Finish().status().message(), HasSubstr("accept_failures is false"));
  options.accept_failures = true;
  options.norm_bound = 0;
  absl::StatusOr<std::unique_ptr<Strategy>> plain = MakeStrategy(options, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->update_norm_bound(), 0);
  options.name = "scaffold";
  options.norm_bound = 1;
  EXPECT_THAT(MakeStrategy(options, {}).status().message(),
              HasSubstr("norm_bound cannot wrap strategy 'scaffold'"));
  options.norm_bound = -2;
  EXPECT_THAT(MakeStrategy(options, {}).status().message(),
              HasSubstr("norm_bound must be >= 0 (0: off), got -2"));
}

}  // namespace
}  // namespace fl::aggregation
