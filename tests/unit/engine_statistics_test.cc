// Federated standardisation in the engine: the statistics task before round 1, the sums added
// up into means and standard deviations, sent with every fit task, kept across a restart, and
// the refusals of a malformed report.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;

EvaluationReport Sums(const Task& task, int64_t count, std::vector<double> sum,
                      std::vector<double> sum_squares) {
  EvaluationReport r;
  r.run_id = task.run_id;
  r.round = task.round;
  r.task_id = task.task_id;
  r.num_examples = count;
  r.feature_sums = {count, std::move(sum), std::move(sum_squares)};
  return r;
}

TEST_F(EngineTest, StatisticsComeBeforeRoundOneAndRideOnEveryFitTask) {
  options_.federated_standardization = true;
  StartEngine();
  JoinAll();
  std::vector<Task> tasks;
  for (const std::string& c : clients_) {
    Task t = engine_->Poll(c);
    ASSERT_EQ(t.kind, Task::Kind::kStatistics) << c;
    EXPECT_EQ(t.round, 0);
    tasks.push_back(t);
  }
  // Site a: x = {1, 3} (feature 0), {10, 10} (feature 1); site b: x = {5}, {40}; site c declines.
  ASSERT_TRUE(engine_->SubmitEvaluation("client-a", Sums(tasks[0], 2, {4, 20}, {10, 200})).ok());
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);
  ASSERT_TRUE(engine_->SubmitEvaluation("client-b", Sums(tasks[1], 1, {5, 40}, {25, 1600})).ok());
  EvaluationReport declined = Sums(tasks[2], 0, {}, {});
  declined.error = "this trainer does not report feature statistics";
  ASSERT_TRUE(engine_->SubmitEvaluation("client-c", declined).ok());

  Task fit = engine_->Poll("client-a");
  ASSERT_EQ(fit.kind, Task::Kind::kFit);
  EXPECT_EQ(fit.round, 1);
  ASSERT_NE(fit.feature_statistics, nullptr);
  EXPECT_EQ(fit.feature_statistics->count, 3);
  EXPECT_DOUBLE_EQ(fit.feature_statistics->mean[0], 3.0);   // (1 + 3 + 5) / 3
  EXPECT_DOUBLE_EQ(fit.feature_statistics->mean[1], 20.0);  // (10 + 10 + 40) / 3
  EXPECT_NEAR(fit.feature_statistics->stddev[0], std::sqrt(8.0 / 3), 1e-12);
  EXPECT_NEAR(fit.feature_statistics->stddev[1], std::sqrt(200.0), 1e-9);

  // A restarted server keeps them and does not ask again.
  engine_.reset();
  store_.reset();
  OpenStore();
  StartEngine();
  JoinAll();
  Task again = engine_->Poll("client-b");
  ASSERT_EQ(again.kind, Task::Kind::kFit);
  ASSERT_NE(again.feature_statistics, nullptr);
  EXPECT_DOUBLE_EQ(again.feature_statistics->mean[0], 3.0);
}

TEST_F(EngineTest, AMalformedStatisticsReportIsRefusedNamingTheProblem) {
  options_.federated_standardization = true;
  clients_ = {"client-a", "client-b", "client-c", "client-d", "client-e"};
  options_.min_clients = 5;  // all five are asked
  StartEngine();
  JoinAll();
  std::map<std::string, Task> t;
  for (const std::string& c : clients_) t[c] = engine_->Poll(c);
  absl::Status ragged = engine_->SubmitEvaluation("client-a", Sums(t["client-a"], 2, {1, 2}, {1}));
  EXPECT_EQ(ragged.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ragged.message(), HasSubstr("one sum and one sum of squares per feature"));
  absl::Status nan =
      engine_->SubmitEvaluation("client-b", Sums(t["client-b"], 2, {std::nan("")}, {1}));
  EXPECT_THAT(nan.message(), HasSubstr("feature 0 are not finite"));
  absl::Status rows = engine_->SubmitEvaluation("client-c", Sums(t["client-c"], 0, {1}, {1}));
  EXPECT_THAT(rows.message(), HasSubstr("over 0 rows"));
  ASSERT_TRUE(engine_->SubmitEvaluation("client-d", Sums(t["client-d"], 2, {1, 2}, {1, 4})).ok());
  absl::Status other = engine_->SubmitEvaluation("client-e", Sums(t["client-e"], 2, {1}, {1}));
  EXPECT_THAT(other.message(), HasSubstr("this site has 1 features but another site reported 2"));
  // Each refused site counted as declined, so the phase ended at once, with one report of five.
  EXPECT_TRUE(engine_->finished());
}

TEST_F(EngineTest, SumsNoRealDataCouldGiveAreRefusedAndTheSiteIsNotAskedAgain) {
  options_.federated_standardization = true;
  StartEngine();
  JoinAll();
  Task a = engine_->Poll("client-a"), b = engine_->Poll("client-b");
  // sum^2 = 100 > count x sum_sq = 2: a site trying to shrink a deviation to 0 or below.
  absl::Status inconsistent = engine_->SubmitEvaluation("client-a", Sums(a, 2, {10}, {1}));
  EXPECT_EQ(inconsistent.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(inconsistent.message(), HasSubstr("feature 0 are inconsistent"));
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);  // counted as its decline
  absl::Status huge = engine_->SubmitEvaluation("client-b", Sums(b, 1, {1e300}, {1e300}));
  EXPECT_THAT(huge.message(), HasSubstr("exceed what 1 float values can sum to"));
}

TEST_F(EngineTest, TooFewStatisticsReportsFailTheRunSayingWhy) {
  options_.federated_standardization = true;
  options_.eval_timeout = absl::Minutes(1);
  StartEngine();
  JoinAll();
  Task a = engine_->Poll("client-a");
  ASSERT_TRUE(engine_->SubmitEvaluation("client-a", Sums(a, 2, {1}, {1})).ok());
  clock_.Advance(absl::Minutes(2));
  engine_->Tick();
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_THAT(run->reason, HasSubstr("1 of the 3 sites asked reported their feature statistics"));
}

TEST_F(EngineTest, FederatedStandardizationIsRefusedWithSecureAggregation) {
  options_.federated_standardization = true;
  options_.secure_aggregation.enabled = true;
  absl::StatusOr<std::unique_ptr<RoundEngine>> engine = RoundEngine::Create(
      options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()), hooks_);
  ASSERT_FALSE(engine.ok());
  EXPECT_THAT(engine.status().message(),
              HasSubstr("federated_standardization cannot run with secure aggregation"));
}

}  // namespace
}  // namespace fl::server
