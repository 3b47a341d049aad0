// The server optimizers against the formulas of Reddi et al. 2021 (and Hsu et al. 2019 for
// FedAvgM), computed here directly over two rounds; their refusals; FedAvgM with mu = 0 and
// eta = 1 is FedAvg.
#include "fl/aggregation/server_optimizers.h"

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/strategies.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::aggregation {
namespace {

using ::testing::HasSubstr;

ModelSpec Spec() { return ModelSpec({{"w", {40, 25}}, {"b", {7}}}); }

Model Random(uint64_t seed, float scale) {
  Model m(Spec());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  for (float& x : m.data()) x = normal(rng);
  return m;
}

// The direct computation of one step, in double, from the state as kept (float).
struct Reference {
  std::string name;
  ServerOptimizerOptions o;
  std::vector<float> m, v;
  double step = 0;

  std::vector<double> Step(const Model& x, const std::vector<const Model*>& updates,
                           const std::vector<double>& weights) {
    const size_t n = x.data().size();
    if (m.empty()) m.assign(n, 0.f), v.assign(n, 0.f);
    step += 1;
    double total = 0;
    for (double w : weights) total += w;
    std::vector<double> out(n);
    const double eta_t = name == "fedadam"
                             ? o.learning_rate * std::sqrt(1 - std::pow(o.beta_2, step)) /
                                   (1 - std::pow(o.beta_1, step))
                             : o.learning_rate;
    for (size_t i = 0; i < n; ++i) {
      double mean = 0;
      for (size_t k = 0; k < updates.size(); ++k) mean += weights[k] * updates[k]->data()[i];
      const double d = mean / total - x.data()[i];
      if (name == "fedavgm") {
        m[i] = static_cast<float>(o.momentum * m[i] + d);
        out[i] = x.data()[i] + o.learning_rate * m[i];
        continue;
      }
      m[i] = static_cast<float>(o.beta_1 * m[i] + (1 - o.beta_1) * d);
      if (name == "fedadagrad") {
        v[i] = static_cast<float>(v[i] + d * d);
      } else if (name == "fedadam") {
        v[i] = static_cast<float>(o.beta_2 * v[i] + (1 - o.beta_2) * d * d);
      } else {
        const double diff = v[i] - d * d;
        v[i] = static_cast<float>(v[i] - (1 - o.beta_2) * d * d *
                                             (diff > 0   ? 1
                                              : diff < 0 ? -1
                                                         : 0));
      }
      out[i] = x.data()[i] + eta_t * m[i] / (std::sqrt(static_cast<double>(v[i])) + o.tau);
    }
    return out;
  }
};

class ServerOptimizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ServerOptimizerTest, TwoRoundsFollowThePublishedUpdate) {
  ServerOptimizerOptions o{.name = GetParam(),
                           .learning_rate = DefaultServerLearningRate(GetParam())};
  absl::StatusOr<std::unique_ptr<Strategy>> strategy = MakeServerOptimizer(o);
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  Reference ref{GetParam(), o};
  Model x = Random(1, 1.f);
  for (int round = 1; round <= 2; ++round) {
    Model a = Random(10 * round + 1, 1.f), b = Random(10 * round + 2, 1.f);
    std::unique_ptr<RoundAggregator> agg = (*strategy)->BeginRound(x);
    agg->Fold(0, a.data(), 3);
    agg->Accept(3);
    agg->Fold(0, b.data(), 1);
    agg->Accept(1);
    absl::StatusOr<Model> next = agg->Finish();
    ASSERT_TRUE(next.ok()) << next.status();
    std::vector<double> want = ref.Step(x, {&a, &b}, {3, 1});
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(next->data()[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
          << GetParam() << " round " << round << " parameter " << i;
    }
    std::optional<Model> state = agg->TakeState();
    ASSERT_TRUE(state.has_value());
    EXPECT_EQ(state->spec().tensors().back().name, "fedopt.step");
    EXPECT_EQ(state->data().back(), static_cast<float>(round));
    ASSERT_TRUE((*strategy)->AdoptState(*std::move(state)).ok());
    x = *std::move(next);
  }
}

TEST_P(ServerOptimizerTest, ARoundWithoutUpdatesLeavesNoState) {
  absl::StatusOr<std::unique_ptr<Strategy>> strategy = MakeServerOptimizer({.name = GetParam()});
  ASSERT_TRUE(strategy.ok());
  Model x = Random(1, 1.f);
  std::unique_ptr<RoundAggregator> agg = (*strategy)->BeginRound(x);
  absl::StatusOr<Model> next = agg->Finish();
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("no update was accepted"));
  EXPECT_FALSE(agg->TakeState().has_value());
}

TEST_P(ServerOptimizerTest, AMomentPastFloatsRangeFailsTheRound) {
  if (GetParam() == "fedavgm") GTEST_SKIP() << "its one moment is the change itself";
  absl::StatusOr<std::unique_ptr<Strategy>> strategy = MakeServerOptimizer({.name = GetParam()});
  ASSERT_TRUE(strategy.ok());
  Model x = Random(1, 1.f);
  Model huge(Spec());
  for (float& v : huge.data()) v = 1e30f;  // its square is no float
  std::unique_ptr<RoundAggregator> agg = (*strategy)->BeginRound(x);
  agg->Fold(0, huge.data(), 1);
  agg->Accept(1);
  absl::StatusOr<Model> next = agg->Finish();
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("is not finite at parameter 0"));
  EXPECT_FALSE(agg->TakeState().has_value()) << "a frozen (infinite) moment must not be kept";
}

TEST_P(ServerOptimizerTest, AForeignStateIsRefused) {
  absl::StatusOr<std::unique_ptr<Strategy>> strategy = MakeServerOptimizer({.name = GetParam()});
  ASSERT_TRUE(strategy.ok());
  absl::Status s = (*strategy)->AdoptState(Random(1, 1.f));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not its server state"));
}

INSTANTIATE_TEST_SUITE_P(All, ServerOptimizerTest,
                         ::testing::Values("fedavgm", "fedadagrad", "fedadam", "fedyogi"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(ServerOptimizerOptionsTest, FedAvgMWithoutMomentumIsFedAvg) {
  absl::StatusOr<std::unique_ptr<Strategy>> avgm =
      MakeServerOptimizer({.name = "fedavgm", .learning_rate = 1, .momentum = 0});
  ASSERT_TRUE(avgm.ok());
  Model x = Random(1, 1.f), a = Random(2, 1.f), b = Random(3, 1.f);
  std::unique_ptr<RoundAggregator> agg = (*avgm)->BeginRound(x);
  agg->Fold(0, a.data(), 2);
  agg->Accept(2);
  agg->Fold(0, b.data(), 5);
  agg->Accept(5);
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_TRUE(next.ok());
  absl::StatusOr<Model> mean = WeightedAverage({&a, &b}, {2, 5});
  ASSERT_TRUE(mean.ok());
  for (size_t i = 0; i < mean->data().size(); ++i) {
    ASSERT_NEAR(next->data()[i], mean->data()[i], 1e-6) << i;
  }
}

TEST(ServerOptimizerOptionsTest, SettingsThatCannotWorkAreRefusedByName) {
  EXPECT_THAT(MakeServerOptimizer({.name = "fedadam", .learning_rate = 0}).status().message(),
              HasSubstr("server_learning_rate must be > 0"));
  EXPECT_THAT(MakeServerOptimizer({.name = "fedavgm", .momentum = 1}).status().message(),
              HasSubstr("server_momentum must be in [0, 1)"));
  EXPECT_THAT(MakeServerOptimizer({.name = "fedyogi", .beta_2 = 1.5}).status().message(),
              HasSubstr("beta_2 must be in [0, 1)"));
  EXPECT_THAT(MakeServerOptimizer({.name = "fedadagrad", .tau = 0}).status().message(),
              HasSubstr("tau must be > 0"));
  EXPECT_THAT(MakeStrategy({.name = "fedlion"}).status().message(),
              HasSubstr("fedavgm, fedadagrad, fedadam, fedyogi"));
  // 0 is each strategy's published default.
  StrategyOptions o{.name = "fedyogi"};
  EXPECT_TRUE(MakeStrategy(o).ok());
  EXPECT_DOUBLE_EQ(DefaultServerLearningRate("fedyogi"), 0.01);
}

}  // namespace
}  // namespace fl::aggregation
