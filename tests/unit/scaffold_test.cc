// SCAFFOLD's server side, FedProx's (FedAvg's) and the strategies chosen by name.
#include "fl/aggregation/scaffold.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/fedprox.h"
#include "fl/aggregation/strategies.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::aggregation {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Weights "w" [2] and "b" [1], then "scaffold.c.w" [2] and "scaffold.c.b" [1]: six floats,
// x = data[0..3), c = data[3..6).
ModelSpec SmallSpec() { return ScaffoldSpec(ModelSpec({{"w", {2}}, {"b", {1}}})); }

Model MakeModel(const ModelSpec& spec, const std::vector<float>& values) {
  Model m(spec);
  EXPECT_EQ(m.data().size(), values.size());
  std::copy(values.begin(), values.end(), m.data().begin());
  return m;
}

std::vector<float> Values(const Model& m) { return {m.data().begin(), m.data().end()}; }

// Folds `update` in chunks of `chunk` floats (the last one shorter), then accepts it.
void FoldUpdate(RoundAggregator& agg, const Model& update, double weight, size_t chunk) {
  std::span<const float> data = update.data();
  for (size_t off = 0; off < data.size(); off += chunk) {
    agg.Fold(static_cast<int64_t>(off), data.subspan(off, std::min(chunk, data.size() - off)),
             weight);
  }
  agg.Accept(weight);
}

std::function<int64_t()> Parties(int64_t n) {
  return [n] { return n; };
}

// The round of the hand computation below: global x = [1, 2, 3], c = [0.5, 0, -1]; client A
// (10 examples) sends y = [3, 2, 1], delta c = [1, 2, 3]; client B (30 examples) sends
// y = [1, 6, 5], delta c = [-1, 2, 1]. Two of N = 4 parties take part.
//   weighted mean of y = (10 * [3, 2, 1] + 30 * [1, 6, 5]) / 40 = [1.5, 5, 4]
//   c + (1/4) * ([1, 2, 3] + [-1, 2, 1]) = [0.5, 0, -1] + [0, 1, 1] = [0.5, 1, 0]
class ScaffoldHandComputedTest : public ::testing::TestWithParam<size_t> {
 protected:
  absl::StatusOr<Model> RunRound(double server_learning_rate, int64_t parties) {
    std::unique_ptr<Strategy> strategy = MakeScaffold(
        {.server_learning_rate = server_learning_rate, .num_parties = Parties(parties)});
    EXPECT_EQ(strategy->name(), "scaffold");
    std::unique_ptr<RoundAggregator> agg = strategy->BeginRound(global_);
    FoldUpdate(*agg, a_, 10, GetParam());
    FoldUpdate(*agg, b_, 30, GetParam());
    EXPECT_EQ(agg->num_accepted(), 2);
    return agg->Finish();
  }

  Model global_ = MakeModel(SmallSpec(), {1, 2, 3, 0.5f, 0, -1});
  Model a_ = MakeModel(SmallSpec(), {3, 2, 1, 1, 2, 3});
  Model b_ = MakeModel(SmallSpec(), {1, 6, 5, -1, 2, 1});
};

TEST_P(ScaffoldHandComputedTest, PartialParticipationMovesCByTheSumOverN) {
  absl::StatusOr<Model> next = RunRound(1.0, 4);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->spec(), SmallSpec());
  EXPECT_THAT(Values(*next), ElementsAre(1.5f, 5.0f, 4.0f, 0.5f, 1.0f, 0.0f));
}

TEST_P(ScaffoldHandComputedTest, GlobalStepSizeScalesTheMoveOfTheWeightsOnly) {
  // x + 0.5 * ([1.5, 5, 4] - [1, 2, 3]) = [1.25, 3.5, 3.5]; c as with eta_g = 1.
  absl::StatusOr<Model> next = RunRound(0.5, 4);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(Values(*next), ElementsAre(1.25f, 3.5f, 3.5f, 0.5f, 1.0f, 0.0f));
}

TEST_P(ScaffoldHandComputedTest, FullParticipationIsTheMeanDelta) {
  // N = 2 = |S|: c + ([0, 4, 4]) / 2 = [0.5, 2, 1].
  absl::StatusOr<Model> next = RunRound(1.0, 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(Values(*next), ElementsAre(1.5f, 5.0f, 4.0f, 0.5f, 2.0f, 1.0f));
}

TEST_P(ScaffoldHandComputedTest, MoreUpdatesThanPartiesFailsTheRound) {
  absl::StatusOr<Model> next = RunRound(1.0, 1);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("2 updates were accepted"));
  EXPECT_THAT(next.status().message(), HasSubstr("N = 1"));
}

// Chunks of 1, 2 (crossing from the weights into the control variates at offset 3), 4 and 6.
INSTANTIATE_TEST_SUITE_P(ChunkSizes, ScaffoldHandComputedTest, ::testing::Values(1, 2, 4, 6));

TEST(ScaffoldTest, WithoutNTheAcceptedUpdatesAreTheParties) {
  std::unique_ptr<Strategy> strategy = MakeScaffold({});
  Model global = MakeModel(SmallSpec(), {0, 0, 0, 1, 1, 1});
  std::unique_ptr<RoundAggregator> agg = strategy->BeginRound(global);
  FoldUpdate(*agg, MakeModel(SmallSpec(), {2, 4, 6, 2, 4, 6}), 1, 6);
  FoldUpdate(*agg, MakeModel(SmallSpec(), {4, 8, 2, 0, 0, 2}), 3, 6);
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_TRUE(next.ok()) << next.status();
  // x: ([2, 4, 6] + 3 * [4, 8, 2]) / 4 = [3.5, 7, 3]; c: [1, 1, 1] + [2, 4, 8] / 2 = [2, 3, 5].
  EXPECT_THAT(Values(*next), ElementsAre(3.5f, 7.0f, 3.0f, 2.0f, 3.0f, 5.0f));
}

TEST(ScaffoldTest, NIsAskedAtTheStartOfEveryRound) {
  int64_t enrolled = 4;
  std::unique_ptr<Strategy> strategy =
      MakeScaffold({.num_parties = [&enrolled] { return enrolled; }});
  Model global = MakeModel(SmallSpec(), {0, 0, 0, 0, 0, 0});
  Model update = MakeModel(SmallSpec(), {1, 1, 1, 8, 8, 8});
  std::unique_ptr<RoundAggregator> first = strategy->BeginRound(global);
  enrolled = 8;  // enrolled during the round: counts from the next round on
  FoldUpdate(*first, update, 1, 6);
  absl::StatusOr<Model> next = first->Finish();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(Values(*next), ElementsAre(1, 1, 1, 2, 2, 2));
  std::unique_ptr<RoundAggregator> second = strategy->BeginRound(*next);
  FoldUpdate(*second, update, 1, 6);
  next = second->Finish();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(Values(*next), ElementsAre(1, 1, 1, 3, 3, 3));
}

TEST(ScaffoldTest, NoAcceptedUpdateFailsTheRound) {
  std::unique_ptr<Strategy> strategy = MakeScaffold({.num_parties = Parties(3)});
  Model global(SmallSpec());
  std::unique_ptr<RoundAggregator> agg = strategy->BeginRound(global);
  EXPECT_EQ(agg->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ScaffoldTest, NonFiniteResultFailsTheRound) {
  std::unique_ptr<Strategy> strategy = MakeScaffold({.num_parties = Parties(1)});
  const float big = 3e38f;
  Model global = MakeModel(SmallSpec(), {0, 0, 0, big, 0, 0});
  std::unique_ptr<RoundAggregator> agg = strategy->BeginRound(global);
  FoldUpdate(*agg, MakeModel(SmallSpec(), {0, 0, 0, big, 0, 0}), 1, 6);  // c: 3e38 + 3e38
  absl::StatusOr<Model> next = agg->Finish();
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("parameter 3"));
}

TEST(ScaffoldSpecTest, InitialModelHasTheWeightsAndZeroControlVariates) {
  Model weights = MakeModel(ModelSpec({{"w", {2}}, {"b", {1}}}), {1, 2, 3});
  Model initial = WithZeroControlVariates(weights);
  EXPECT_EQ(initial.spec(), SmallSpec());
  EXPECT_TRUE(CheckScaffoldSpec(initial.spec()).ok());
  EXPECT_THAT(Values(initial), ElementsAre(1, 2, 3, 0, 0, 0));
  // ... and back: the weights alone, as another strategy's model.
  Model back = WithoutControlVariates(MakeModel(SmallSpec(), {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(back.spec(), weights.spec());
  EXPECT_THAT(Values(back), ElementsAre(1, 2, 3));
}

TEST(ScaffoldSpecTest, AcceptsScaffoldSpecAndRefusesWhatDoesNotMirror) {
  const ModelSpec weights({{"fc1.weight", {4, 3}}, {"fc1.bias", {4}}});
  EXPECT_TRUE(CheckScaffoldSpec(ScaffoldSpec(weights)).ok());

  struct Case {
    ModelSpec spec;
    std::string error;
  };
  const std::vector<Case> cases = {
      {weights, "2 weight tensors but 0 tensors after them"},
      {ModelSpec({{"scaffold.c.w", {2}}}), "no weight tensors"},
      {ModelSpec({{"w", {2}}, {"b", {1}}, {"scaffold.c.b", {1}}, {"scaffold.c.w", {2}}}),
       "is 'scaffold.c.b' but should be 'scaffold.c.w'"},
      {ModelSpec({{"w", {2}}, {"scaffold.c.w", {1, 2}}}),
       "'scaffold.c.w' has shape [1,2] but 'w' has shape [2]"},
      {ModelSpec({{"w", {2}}, {"scaffold.c.w", {2}}, {"extra", {1}}}),
       "1 weight tensors but 2 tensors after them"},
  };
  for (const Case& c : cases) {
    absl::Status s = CheckScaffoldSpec(c.spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_THAT(s.message(), HasSubstr(c.error));
    std::unique_ptr<Strategy> strategy = MakeScaffold({});
    EXPECT_EQ(strategy->CheckModel(c.spec).code(), absl::StatusCode::kInvalidArgument);
    // A round begun on such a model folds nothing and fails with the same reason.
    Model global(c.spec);
    std::unique_ptr<RoundAggregator> agg = strategy->BeginRound(global);
    std::vector<float> values(static_cast<size_t>(c.spec.NumFloats()), 1.0f);
    agg->Fold(0, values, 1);
    agg->Accept(1);
    absl::StatusOr<Model> next = agg->Finish();
    EXPECT_EQ(next.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(next.status().message(), HasSubstr(c.error));
  }
}

// A model spanning several 1 MiB stripes, its weights ending inside a stripe, folded by many
// threads at once in random chunks: the same as the direct computation.
TEST(ScaffoldTest, ConcurrentChunkedFoldsMatchTheDirectComputation) {
  const ModelSpec spec = ScaffoldSpec(ModelSpec({{"w", {300, 1001}}, {"b", {7}}}));
  const int64_t n = spec.NumFloats();
  const int64_t weights_end = n / 2;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1, 1);
  auto random_model = [&] {
    Model m(spec);
    for (float& v : m.data()) v = value(rng);
    return m;
  };
  Model global = random_model();
  std::vector<Model> updates;
  std::vector<double> weights;
  for (int i = 0; i < 6; ++i) {
    updates.push_back(random_model());
    weights.push_back(1 + 100 * i);
  }
  const int64_t parties = 10;
  const double eta = 0.7;

  std::unique_ptr<Strategy> strategy =
      MakeScaffold({.server_learning_rate = eta, .num_parties = Parties(parties)});
  std::unique_ptr<RoundAggregator> agg = strategy->BeginRound(global);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < updates.size(); ++i) {
    threads.emplace_back([&, i] { FoldUpdate(*agg, updates[i], weights[i], 77777 + 1000 * i); });
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_TRUE(next.ok()) << next.status();

  double total = 0;
  for (double w : weights) total += w;
  int failures = 0;
  for (int64_t j = 0; j < n && failures < 10; ++j) {
    double expected = global.data()[j];
    if (j < weights_end) {
      double mean = 0;
      for (size_t i = 0; i < updates.size(); ++i) mean += weights[i] * updates[i].data()[j];
      expected += eta * (mean / total - expected);
    } else {
      for (const Model& u : updates) expected += u.data()[j] / static_cast<double>(parties);
    }
    if (!(std::abs(next->data()[j] - expected) <= 1e-6 * std::max(1.0, std::abs(expected)))) {
      ADD_FAILURE() << "parameter " << j << ": got " << next->data()[j] << ", expected "
                    << expected;
      ++failures;
    }
  }
}

TEST(FedProxTest, AggregatesExactlyAsFedAvg) {
  const ModelSpec spec({{"w", {2}}, {"b", {1}}});
  std::unique_ptr<Strategy> fedprox = MakeFedProx();
  EXPECT_EQ(fedprox->name(), "fedprox");
  Model global(spec);
  std::unique_ptr<RoundAggregator> agg = fedprox->BeginRound(global);
  Model a = MakeModel(spec, {1, 2, 3}), b = MakeModel(spec, {3, 6, -3});
  FoldUpdate(*agg, a, 1, 2);
  FoldUpdate(*agg, b, 3, 2);
  absl::StatusOr<Model> next = agg->Finish();
  ASSERT_TRUE(next.ok()) << next.status();
  absl::StatusOr<Model> fedavg = WeightedAverage({&a, &b}, {1, 3});
  ASSERT_TRUE(fedavg.ok());
  EXPECT_EQ(Values(*next), Values(*fedavg));
  EXPECT_THAT(Values(*next), ElementsAre(2.5f, 5.0f, -1.5f));
}

TEST(StrategiesTest, MakesEachStrategyByName) {
  for (const std::string name : {"fedavg", "fedprox", "scaffold"}) {
    absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy({.name = name});
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    EXPECT_EQ((*s)->name(), name);
  }
  absl::StatusOr<std::unique_ptr<Strategy>> bad = MakeStrategy({.name = "fedsgd"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown strategy 'fedsgd'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("fedavg, fedprox, scaffold"));
}

TEST(StrategiesTest, ScaffoldTakesNFromTheOptionsOrFromTheEnrolledClients) {
  Model global = MakeModel(SmallSpec(), {0, 0, 0, 0, 0, 0});
  Model update = MakeModel(SmallSpec(), {0, 0, 0, 6, 6, 6});
  auto c_after_one_update = [&](const StrategyOptions& options, int64_t enrolled) {
    absl::StatusOr<std::unique_ptr<Strategy>> s =
        MakeStrategy(options, [enrolled] { return enrolled; });
    EXPECT_TRUE(s.ok()) << s.status();
    std::unique_ptr<RoundAggregator> agg = (*s)->BeginRound(global);
    FoldUpdate(*agg, update, 5, 6);
    absl::StatusOr<Model> next = agg->Finish();
    EXPECT_TRUE(next.ok()) << next.status();
    return next.ok() ? next->data()[3] : -1.0f;
  };
  EXPECT_EQ(c_after_one_update({.name = "scaffold"}, 3), 2.0f);                    // N = 3
  EXPECT_EQ(c_after_one_update({.name = "scaffold", .num_parties = 2}, 3), 3.0f);  // N = 2
}

TEST(StrategiesTest, ClientConfigCarriesTheClientsValues) {
  StrategyOptions fedprox{
      .name = "fedprox", .proximal_mu = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .clip_norm = 5};
  EXPECT_THAT(fedprox.ClientConfig(),
              ElementsAre(Pair("clip_norm", 5.0), Pair("momentum", 0.9), Pair("proximal_mu", 0.1),
                          Pair("weight_decay", 1e-4)));
  StrategyOptions scaffold{.name = "scaffold", .proximal_mu = 0.1};
  EXPECT_THAT(scaffold.ClientConfig(), ElementsAre(Pair("clip_norm", 0.0), Pair("momentum", 0.0),
                                                   Pair("weight_decay", 0.0)));
}

TEST(StrategiesTest, ValidateNamesTheBadValue) {
  // Each case changes one value of the defaults (a function, not an aggregate: GCC 12 warns of
  // "maybe uninitialized" strings in an array of designated initializers this size).
  struct Case {
    std::function<void(StrategyOptions&)> set;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](StrategyOptions& o) { o.name = "fedprox", o.proximal_mu = 0; },
       "proximal_mu must be > 0 for strategy 'fedprox'"},
      {[](StrategyOptions& o) { o.name = "fedprox", o.proximal_mu = -1; },
       "proximal_mu must be >= 0, got -1"},
      {[](StrategyOptions& o) { o.momentum = 1; }, "momentum must be in [0, 1), got 1"},
      {[](StrategyOptions& o) { o.weight_decay = -0.5; }, "weight_decay must be >= 0, got -0.5"},
      {[](StrategyOptions& o) { o.clip_norm = -1; }, "clip_norm must be >= 0"},
      {[](StrategyOptions& o) { o.server_learning_rate = -1; },
       "server_learning_rate must be >= 0 (0: the strategy's"},
      {[](StrategyOptions& o) { o.num_parties = -2; }, "num_parties must be >= 0"},
  };
  for (const Case& c : cases) {
    StrategyOptions options;
    c.set(options);
    absl::Status s = options.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_THAT(s.message(), HasSubstr(c.error));
  }
  StrategyOptions optimizer;
  optimizer.server_momentum = 1;
  EXPECT_THAT(optimizer.Validate().message(), HasSubstr("server_momentum must be in [0, 1)"));
  optimizer.server_momentum = 0.9;
  optimizer.tau = 0;
  EXPECT_THAT(optimizer.Validate().message(), HasSubstr("tau must be > 0"));
  const StrategyOptions fedavg_without_mu{.name = "fedavg", .proximal_mu = 0};
  EXPECT_TRUE(fedavg_without_mu.Validate().ok());
  const StrategyOptions fedprox{.name = "fedprox", .proximal_mu = 0.5};
  EXPECT_TRUE(fedprox.Validate().ok());
}

}  // namespace
}  // namespace fl::aggregation
