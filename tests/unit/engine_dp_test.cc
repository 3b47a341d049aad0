// The engine with central differential privacy: the server clips each update's delta, averages
// the clipped updates with equal weights, adds Gaussian noise of z * C / n, records the epsilon
// spent with every committed round (also across a restart), and finishes the run before a round
// that would exceed the budget.
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/clipping.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/crypto.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

std::vector<RoundRecord> Committed(Store& store, int64_t run_id) {
  std::vector<RoundRecord> committed;
  absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds(run_id);
  EXPECT_TRUE(rounds.ok()) << rounds.status();
  if (!rounds.ok()) return committed;
  for (const RoundRecord& r : *rounds) {
    if (r.status == RoundStatus::kCommitted) committed.push_back(r);
  }
  return committed;
}

double EpsilonAfter(double q, double z, int64_t steps, double delta) {
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::ComputeEpsilon(q, z, steps, delta);
  EXPECT_TRUE(spent.ok()) << spent.status();
  return spent.ok() ? spent->epsilon : -1;
}

class EngineDpTest : public EngineTest {
 protected:
  void EnableDp(double z, double clip_norm, double budget = 0) {
    options_.privacy.mode = "central";
    options_.privacy.noise_multiplier = z;
    options_.privacy.clip_norm = clip_norm;
    options_.privacy.delta = 1e-5;
    options_.privacy.epsilon_budget = budget;
  }

  // A new engine on the same store file, as after a crash: the accountant replays the rounds.
  void Restart() {
    engine_.reset();
    store_.reset();
    OpenStore();
    StartEngine();
  }

  // Every client submits RandomModel(i) with examples 1, 10, 100, ... (ignored under DP).
  void RunDpRound() {
    int64_t examples = 1;
    for (size_t i = 0; i < clients_.size(); ++i, examples *= 10) {
      Task task = engine_->Poll(clients_[i]);
      ASSERT_EQ(task.kind, Task::Kind::kFit);
      EXPECT_TRUE(task.fit.differential_privacy);
      ASSERT_TRUE(Submit(clients_[i], task, RandomModel(i), examples).ok());
    }
  }
};

TEST_F(EngineDpTest, CommitsTheNoisyUnweightedMeanOfClippedUpdatesAndRecordsEpsilon) {
  EnableDp(/*z=*/0.5, /*clip_norm=*/1.0);
  StartEngine();
  JoinAll();
  RunDpRound();
  ASSERT_EQ(engine_->committed_round(), 1);
  // The expected mean: each client's delta from the zero initial model clipped to norm 1.
  const int64_t size = TestSpec().NumFloats();
  std::vector<double> mean(size, 0.0);
  for (size_t i = 0; i < clients_.size(); ++i) {
    Model m = RandomModel(i);
    ASSERT_GT(aggregation::dp::L2Norm(m.data()), 100.0);  // far above the clip norm
    ASSERT_TRUE(aggregation::dp::ClipL2(m.data(), 1.0).ok());
    for (int64_t j = 0; j < size; ++j) mean[j] += m.data()[j] / 3.0;
  }
  // What is left is the noise: N(0, (0.5 * 1 / 3)^2) per coordinate.
  const Model& global = *engine_->global_model();
  double sum = 0, sum_sq = 0;
  for (int64_t j = 0; j < size; ++j) {
    const double r = global.data()[j] - mean[j];
    sum += r;
    sum_sq += r * r;
  }
  const double sigma = 0.5 / 3.0;
  EXPECT_NEAR(sum / size, 0.0, 5 * sigma / std::sqrt(size));
  // Standard error of the variance: sigma^2 sqrt(2 / size); 6 of them.
  EXPECT_NEAR(sum_sq / size, sigma * sigma, 6 * sigma * sigma * std::sqrt(2.0 / size));

  RunDpRound();
  ASSERT_EQ(engine_->committed_round(), 2);
  std::vector<RoundRecord> rounds = Committed(*store_, engine_->run_id());
  ASSERT_EQ(rounds.size(), 2u);
  // All 3 online clients sampled: q = 1.
  EXPECT_EQ(rounds[0].dp_sampling_rate, 1.0);
  EXPECT_NEAR(rounds[0].dp_epsilon, EpsilonAfter(1.0, 0.5, 1, 1e-5), 1e-9);
  EXPECT_NEAR(rounds[1].dp_epsilon, EpsilonAfter(1.0, 0.5, 2, 1e-5), 1e-9);
  EXPECT_GT(rounds[1].dp_epsilon, rounds[0].dp_epsilon);
}

// Under DP a round's draw is secret: its seed is not the run's stored one (from which anyone with
// the store could replay who was sampled, and the amplification by sampling would not hold) but
// EngineHooks::dp_draw_seed's, by default OpenSSL's CSPRNG.
TEST_F(EngineDpTest, TheDrawUnderPrivacyDoesNotFollowFromTheRunsSeed) {
  EnableDp(/*z=*/1.0, /*clip_norm=*/1.0);
  clients_.clear();
  for (int i = 0; i < 20; ++i) clients_.push_back(absl::StrCat("site-", 100 + i));
  options_.min_clients = 20;
  options_.min_fit_clients = 1;
  options_.sample_fraction = 0.2;  // 4 of 20
  hooks_.dp_draw_seed = [] { return uint64_t{42}; };
  StartEngine();
  JoinAll();
  engine_->Tick();
  std::vector<std::string_view> available(clients_.begin(), clients_.end());  // name order
  aggregation::RoundContext ctx{.round = 1, .available = available, .num_to_sample = 4};
  ctx.seed = 42;
  EXPECT_EQ(engine_->PendingClients(), aggregation::SampleSites(ctx));
  ctx.seed = options_.seed * 1000003u + 1 * 7919u;  // the draw of a run without DP
  EXPECT_NE(engine_->PendingClients(), aggregation::SampleSites(ctx));
  // The default source: 64 bits from the CSPRNG, two draws alike once in 2^64.
  absl::StatusOr<uint64_t> a = SecureRandomUint64();
  absl::StatusOr<uint64_t> b = SecureRandomUint64();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST_F(EngineDpTest, RoundsWithoutPrivacyRecordNoEpsilonAndTasksAreNotFlagged) {
  StartEngine();
  JoinAll();
  Task task = engine_->Poll(clients_[0]);
  ASSERT_EQ(task.kind, Task::Kind::kFit);
  EXPECT_FALSE(task.fit.differential_privacy);
  ASSERT_TRUE(Submit(clients_[0], task, RandomModel(0), 1).ok());
  for (size_t i = 1; i < clients_.size(); ++i) {
    ASSERT_TRUE(Submit(clients_[i], engine_->Poll(clients_[i]), RandomModel(i), 1).ok());
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  EXPECT_EQ((*rounds)[0].dp_epsilon, 0.0);
  EXPECT_EQ((*rounds)[0].dp_sampling_rate, 0.0);
}

TEST_F(EngineDpTest, BudgetEndsTheRunBeforeTheRoundThatWouldExceedItAcrossARestart) {
  const double eps2 = EpsilonAfter(1.0, 2.0, 2, 1e-5);
  const double eps3 = EpsilonAfter(1.0, 2.0, 3, 1e-5);
  ASSERT_LT(eps2, eps3);
  EnableDp(/*z=*/2.0, /*clip_norm=*/1.0, /*budget=*/(eps2 + eps3) / 2);
  options_.num_rounds = 10;
  StartEngine();
  JoinAll();
  RunDpRound();
  ASSERT_EQ(engine_->committed_round(), 1);
  const int64_t run_id = engine_->run_id();
  Restart();  // the accountant replays round 1 from the store
  ASSERT_EQ(engine_->run_id(), run_id);
  JoinAll();
  RunDpRound();
  ASSERT_EQ(engine_->committed_round(), 2);
  EXPECT_TRUE(engine_->finished());
  std::vector<RoundRecord> rounds = Committed(*store_, run_id);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_NEAR(rounds[1].dp_epsilon, eps2, 1e-9);  // round 1 was counted after the restart
  absl::StatusOr<RunRecord> run = store_->GetRun(run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFinished);
  EXPECT_NE(run->reason.find("privacy budget spent: round 3"), std::string::npos) << run->reason;
  EXPECT_EQ(engine_->Poll(clients_[0]).kind, Task::Kind::kDone);
}

// The round draw takes a fixed number of sites, so each round is accounted with the bound for
// sampling without replacement, not as Poisson sampling (which would report less), also when the
// accountant replays the rounds after a restart.
TEST_F(EngineDpTest, AFixedSizeDrawIsAccountedAsSamplingWithoutReplacement) {
  EnableDp(/*z=*/1.0, /*clip_norm=*/1.0);
  options_.sample_fraction = 0.5;  // 2 of the 3 online clients
  options_.num_rounds = 10;
  // Only round `round`'s tasks: once it commits, the next round may already be offered.
  auto run_sampled_round = [&](int32_t round) {
    int sampled = 0;
    for (size_t i = 0; i < clients_.size(); ++i) {
      Task task = engine_->Poll(clients_[i]);
      if (task.kind != Task::Kind::kFit || task.round != round) continue;
      ++sampled;
      ASSERT_TRUE(Submit(clients_[i], task, RandomModel(i), 1).ok());
    }
    EXPECT_EQ(sampled, 2);
  };
  StartEngine();
  JoinAll();
  run_sampled_round(1);
  ASSERT_EQ(engine_->committed_round(), 1);
  const int64_t run_id = engine_->run_id();
  Restart();
  JoinAll();
  run_sampled_round(2);
  ASSERT_EQ(engine_->committed_round(), 2);
  std::vector<RoundRecord> rounds = Committed(*store_, run_id);
  ASSERT_EQ(rounds.size(), 2u);
  const double q = 2.0 / 3.0;
  EXPECT_DOUBLE_EQ(rounds[1].dp_sampling_rate, q);
  absl::StatusOr<aggregation::dp::PrivacySpent> fixed =
      aggregation::dp::ComputeEpsilon(q, 1.0, 2, 1e-5, {}, aggregation::dp::Sampling::kFixedSize);
  ASSERT_TRUE(fixed.ok());
  EXPECT_NEAR(rounds[1].dp_epsilon, fixed->epsilon, 1e-9);
  EXPECT_GT(rounds[1].dp_epsilon, EpsilonAfter(q, 1.0, 2, 1e-5) * 1.01);  // Poisson's figure
}

TEST_F(EngineDpTest, RefusesBadPrivacySettingsAndScaffold) {
  EnableDp(0.0, 1.0);
  absl::StatusOr<std::unique_ptr<RoundEngine>> engine = RoundEngine::Create(
      options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()), hooks_);
  ASSERT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("privacy.noise_multiplier must be a finite number > 0, "
                                           "got 0"),
            absl::string_view::npos)
      << engine.status();
  EnableDp(1.0, 1.0);
  options_.privacy.delta = 1.0;
  engine = RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()),
                               hooks_);
  EXPECT_NE(engine.status().message().find("privacy.delta must be in (0, 1), got 1"),
            absl::string_view::npos)
      << engine.status();
  EnableDp(1.0, 1.0);
  options_.privacy.mode = "local";
  engine = RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()),
                               hooks_);
  EXPECT_NE(engine.status().message().find("got \"local\""), absl::string_view::npos)
      << engine.status();
  EnableDp(1.0, 1.0);
  std::unique_ptr<aggregation::Strategy> scaffold = aggregation::MakeScaffold({});
  engine = RoundEngine::Create(options_, store_.get(), scaffold.get(), &clock_, Model(TestSpec()),
                               hooks_);
  EXPECT_NE(engine.status().message().find("cannot wrap strategy 'scaffold'"),
            absl::string_view::npos)
      << engine.status();
}

}  // namespace
}  // namespace fl::server
