// q-FedAvg (qfedavg.h): the update rule against the paper's formula computed here in float64,
// q = 0 as the unweighted mean, a worse-served site weighing more, and the refusals.
#include "fl/aggregation/qfedavg.h"

#include <cmath>
#include <vector>

#include "fl/aggregation/dp/central_dp.h"
#include "fl/aggregation/strategies.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::aggregation {
namespace {

using ::testing::HasSubstr;

ModelSpec Spec() { return ModelSpec({{"w", {3}}, {"b", {2}}}); }

Model Values(std::vector<float> v) {
  Model m(Spec());
  std::copy(v.begin(), v.end(), m.data().begin());
  return m;
}

std::vector<Model> Models(std::vector<std::vector<float>> values) {
  std::vector<Model> out;
  for (auto& v : values) out.push_back(Values(std::move(v)));
  return out;
}

// Sends each model whole, in two pieces, with its initial_loss.
absl::StatusOr<Model> Round(Strategy& s, const Model& global, const std::vector<Model>& models,
                            const std::vector<double>& losses) {
  std::unique_ptr<RoundAggregator> agg = s.BeginRound(global);
  for (size_t k = 0; k < models.size(); ++k) {
    absl::StatusOr<std::unique_ptr<UpdateSink>> sink =
        agg->BeginUpdate({.weight = 100, .metrics = {{"initial_loss", losses[k]}}});
    if (!sink.ok()) return sink.status();
    std::span<const float> v = models[k].data();
    if (absl::Status st = (*sink)->Write(0, v.subspan(0, 2)); !st.ok()) return st;
    if (absl::Status st = (*sink)->Write(2, v.subspan(2)); !st.ok()) return st;
    if (absl::Status st = (*sink)->Accept(); !st.ok()) return st;
  }
  return agg->Finish();
}

TEST(QFedAvgTest, TheNextModelFollowsThePapersUpdate) {
  const double q = 2, lr = 0.05, l = 1 / lr;
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeQFedAvg({.q = q, .qffl_learning_rate = lr});
  ASSERT_TRUE(s.ok()) << s.status();
  const Model x = Values({0.5f, -1, 2, 0, 1});
  const std::vector<Model> w = Models({{0.4f, -1.1f, 2.2f, 0.1f, 0.9f},
                                       {0.7f, -0.8f, 1.9f, -0.2f, 1.3f},
                                       {0.5f, -1, 2.05f, 0, 1.01f}});
  const std::vector<double> loss = {0.3, 1.7, 0.9};
  absl::StatusOr<Model> got = Round(**s, x, w, loss);
  ASSERT_TRUE(got.ok()) << got.status();
  // sum Delta_k / sum h_k, with dw_k = L (x - w_k), Delta_k = F^q dw_k,
  // h_k = q F^(q-1) ||dw_k||^2 + L F^q.
  std::vector<double> delta(5, 0.0);
  double h = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    const double f = loss[k] + 1e-10;
    double norm = 0;
    for (int i = 0; i < 5; ++i) {
      const double dw = l * (static_cast<double>(x.data()[i]) - w[k].data()[i]);
      delta[i] += std::pow(f, q) * dw;
      norm += dw * dw;
    }
    h += q * std::pow(f, q - 1) * norm + l * std::pow(f, q);
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(got->data()[i], x.data()[i] - delta[i] / h, 1e-6) << "parameter " << i;
  }
}

TEST(QFedAvgTest, QZeroIsTheUnweightedMean) {
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeQFedAvg({.q = 0, .qffl_learning_rate = 0.1});
  ASSERT_TRUE(s.ok());
  const Model x = Values({0, 0, 0, 0, 0});
  absl::StatusOr<Model> got =
      Round(**s, x, Models({{1, 2, 3, 4, 5}, {3, 2, 1, 0, -1}}), {0.1, 5.0});
  ASSERT_TRUE(got.ok()) << got.status();
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(got->data()[i], 2.0f, 1e-6) << i;
}

TEST(QFedAvgTest, TheSiteWithTheHigherLossWeighsMore) {
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeQFedAvg({.q = 5, .qffl_learning_rate = 0.1});
  ASSERT_TRUE(s.ok());
  const Model x = Values({0, 0, 0, 0, 0});
  absl::StatusOr<Model> got =
      Round(**s, x, Models({{0.1f, 0.1f, 0.1f, 0.1f, 0.1f}, {-0.1f, -0.1f, -0.1f, -0.1f, -0.1f}}),
            {2.0, 0.5});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->data()[0], 0.0f) << "pulled towards the worse-served site's model";
}

TEST(QFedAvgTest, AnUpdateWithoutItsLossIsRefusedWithWhatToDo) {
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy({.name = "qfedavg"});
  ASSERT_TRUE(s.ok()) << s.status();
  const Model x = Values({0, 0, 0, 0, 0});
  std::unique_ptr<RoundAggregator> agg = (*s)->BeginRound(x);
  EXPECT_THAT(agg->BeginUpdate({.weight = 1, .metrics = {{"loss", 0.3}}}).status().message(),
              HasSubstr("q-FedAvg weighs each update by the metric 'initial_loss'"));
  EXPECT_THAT(agg->BeginUpdate({.weight = 1, .metrics = {{"initial_loss", -1}}}).status().message(),
              HasSubstr("initial_loss must be finite and >= 0, got -1"));
  absl::StatusOr<std::unique_ptr<Strategy>> steep = MakeStrategy({.name = "qfedavg", .q = 50});
  ASSERT_TRUE(steep.ok());
  std::unique_ptr<RoundAggregator> steep_round = (*steep)->BeginRound(x);
  EXPECT_THAT(steep_round->BeginUpdate({.weight = 1, .metrics = {{"initial_loss", 1e10}}})
                  .status()
                  .message(),
              HasSubstr("raised to q = 50 is not finite; lower q"));
  EXPECT_THAT(agg->Finish().status().message(), HasSubstr("no update was accepted"));
}

TEST(QFedAvgTest, ItsClientsAreAskedForTheLossAndBadSettingsAreRefused) {
  EXPECT_THAT((StrategyOptions{.name = "qfedavg"}.ClientConfig()),
              ::testing::Contains(::testing::Pair("report_initial_loss", 1.0)));
  EXPECT_THAT(MakeStrategy({.name = "qfedavg", .q = -1}).status().message(),
              HasSubstr("q must be >= 0, got -1"));
  EXPECT_THAT(MakeStrategy({.name = "qfedavg", .qffl_learning_rate = 0}).status().message(),
              HasSubstr("qffl_learning_rate must be > 0, got 0"));
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy({.name = "qfedavg"});
  ASSERT_TRUE(s.ok());
  EXPECT_THAT((*s)->CheckPlan({.min_updates = 3, .secure_aggregation = true}).message(),
              HasSubstr("'qfedavg' weighs each site's update by its own loss"));
  EXPECT_THAT(dp::MakeCentralDp(**s, {.noise_multiplier = 1, .clip_norm = 1}).status().message(),
              HasSubstr("central DP cannot wrap strategy 'qfedavg'"));
}

}  // namespace
}  // namespace fl::aggregation
