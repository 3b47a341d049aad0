// Admitting a site at join (RoundEngine::Admit): its model spec against the global model, its data
// columns against the run's first site's, what a dry run leaves behind, and the audit log; and
// the warning when the federated evaluation loss diverges.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;

SiteProfile WithSpec(ModelSpec spec) {
  SiteProfile p;
  p.model_spec = std::move(spec);
  return p;
}

SiteProfile WithColumns(std::vector<std::string> columns, std::string sha) {
  SiteProfile p;
  p.feature_columns = std::move(columns);
  p.feature_schema_sha256 = std::move(sha);
  return p;
}

const std::string kShaA(64, 'a');
const std::string kShaB(64, 'b');

TEST_F(EngineTest, AdmitsASiteWhoseSpecIsTheGlobalModels) {
  StartEngine();
  EXPECT_TRUE(engine_->Admit("client-a", WithSpec(TestSpec()), false).ok());
  EXPECT_TRUE(engine_->Admit("client-a", SiteProfile{}, false).ok());  // an older client
}

TEST_F(EngineTest, RefusesASiteWhoseTensorShapeDiffersNamingTheTensorAndBothShapes) {
  StartEngine();
  absl::Status s =
      engine_->Admit("client-a", WithSpec(ModelSpec({{"w", {1000, 299}}, {"b", {999}}})), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("tensor 1 'b' is [1000] in the server's model but [999] in "
                                     "this site's model"));
  absl::StatusOr<std::vector<AuditRecord>> log = store_->AuditLog(10);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_FALSE(log->empty());
  EXPECT_EQ(log->back().event, "join_refused");
  EXPECT_EQ(log->back().client_id, "client-a");
}

TEST_F(EngineTest, RefusesASiteWithAnotherTensorOrderOrCount) {
  StartEngine();
  absl::Status renamed =
      engine_->Admit("c", WithSpec(ModelSpec({{"weight", {1000, 299}}, {"b", {1000}}})), false);
  EXPECT_THAT(renamed.message(), HasSubstr("tensor 0 is 'w' [1000, 299] in the server's model but "
                                           "'weight' [1000, 299] in this site's model"));
  absl::Status fewer = engine_->Admit("c", WithSpec(ModelSpec({{"w", {1000, 299}}})), false);
  EXPECT_THAT(fewer.message(), HasSubstr("this site's model lacks tensor 1 'b' [1000]"));
  absl::Status more = engine_->Admit(
      "c", WithSpec(ModelSpec({{"w", {1000, 299}}, {"b", {1000}}, {"extra", {3}}})), false);
  EXPECT_THAT(more.message(), HasSubstr("this site's model has tensor 2 'extra' [3]"));
}

TEST_F(EngineTest, ASiteWithTheSameTensorsInAnotherOrderIsToldSo) {
  StartEngine();
  absl::Status s =
      engine_->Admit("c", WithSpec(ModelSpec({{"b", {1000}}, {"w", {1000, 299}}})), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the same tensors in another order"));
  EXPECT_THAT(s.message(), HasSubstr("Python's safetensors sorts tensors by dtype and name"));
}

TEST_F(EngineTest, TheFirstSitesColumnsBindEveryLaterSite) {
  StartEngine();
  ASSERT_TRUE(engine_->Admit("client-a", WithColumns({"age", "bmi", "glucose"}, kShaA), false).ok());
  EXPECT_TRUE(engine_->Admit("client-b", WithColumns({"age", "bmi", "glucose"}, kShaA), false).ok());
  absl::Status s = engine_->Admit("client-c", WithColumns({"age", "glucose", "bmi"}, kShaB), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("column 2 is 'glucose' here but 'bmi' in the run's"));
  EXPECT_THAT(s.message(), HasSubstr("another order"));
  EXPECT_THAT(s.message(), HasSubstr("the run's columns: age, bmi, glucose"));
  absl::Status fewer = engine_->Admit("client-c", WithColumns({"age", "bmi"}, kShaB), false);
  EXPECT_THAT(fewer.message(), HasSubstr("this site lacks column 3 'glucose'"));
}

TEST_F(EngineTest, TheRunsColumnsSurviveARestart) {
  StartEngine();
  ASSERT_TRUE(engine_->Admit("client-a", WithColumns({"x", "y"}, kShaA), false).ok());
  engine_.reset();
  store_.reset();
  OpenStore();
  StartEngine();
  absl::Status s = engine_->Admit("client-b", WithColumns({"x", "z"}, kShaB), false);
  EXPECT_THAT(s.message(), HasSubstr("column 2 is 'z' here but 'y' in the run's"));
}

TEST_F(EngineTest, ADryRunChecksButDoesNotFixTheRunsColumns) {
  StartEngine();
  ASSERT_TRUE(engine_->Admit("client-a", WithColumns({"wrong"}, kShaB), true).ok());
  ASSERT_TRUE(engine_->Admit("client-b", WithColumns({"x", "y"}, kShaA), false).ok());
  absl::Status s = engine_->Admit("client-a", WithColumns({"wrong"}, kShaB), true);
  EXPECT_THAT(s.message(), HasSubstr("column 1 is 'wrong' here but 'x' in the run's"));
}

// Three rounds with federated evaluation, each client reporting `losses[round - 1]`; returns the
// audit records "evaluation_loss_diverging".
std::vector<AuditRecord> DivergenceWarnings(std::unique_ptr<RoundEngine>& engine, Store& store,
                                            const std::vector<double>& losses,
                                            const std::function<void(Model&, int)>& fit) {
  for (size_t round = 1; round <= losses.size(); ++round) {
    for (int i = 0; i < 3; ++i) {
      const std::string c = std::string("client-") + char('a' + i);
      Task task = engine->Poll(c);
      EXPECT_EQ(task.kind, Task::Kind::kFit) << "round " << round;
      Model m(TestSpec());
      fit(m, i);
      UpdateMeta meta;
      meta.run_id = task.run_id;
      meta.round = task.round;
      meta.task_id = task.task_id;
      meta.num_examples = 1;
      meta.payload_bytes = m.NumBytes();
      absl::StatusOr<std::unique_ptr<Upload>> up = engine->BeginUpload(c, meta);
      EXPECT_TRUE(up.ok()) << up.status();
      EXPECT_TRUE(ForEachChunk(m.bytes(), kMaxChunkBytes,
                               [&](int64_t offset, std::span<const std::byte> bytes) {
                                 return (*up)->AddChunk(
                                     offset, std::string_view(
                                                 reinterpret_cast<const char*>(bytes.data()),
                                                 bytes.size()));
                               })
                      .ok());
      EXPECT_TRUE((*up)->Finish(m.Sha256Hex()).ok());
    }
    for (int i = 0; i < 3; ++i) {
      const std::string c = std::string("client-") + char('a' + i);
      Task task = engine->Poll(c);
      EXPECT_EQ(task.kind, Task::Kind::kEvaluate);
      EvaluationReport r;
      r.run_id = task.run_id;
      r.round = task.round;
      r.task_id = task.task_id;
      r.num_examples = 10;
      r.loss = losses[round - 1];
      EXPECT_TRUE(engine->SubmitEvaluation(c, r).ok());
    }
  }
  std::vector<AuditRecord> warnings;
  absl::StatusOr<std::vector<AuditRecord>> log = store.AuditLog(100);
  EXPECT_TRUE(log.ok());
  for (const AuditRecord& r : *log) {
    if (r.event == "evaluation_loss_diverging") warnings.push_back(r);
  }
  return warnings;
}

TEST_F(EngineTest, WarnsOnceWhenTheEvaluationLossGrowsByOrdersOfMagnitude) {
  options_.num_rounds = 3;
  options_.eval_every = 1;
  options_.min_fit_clients = 3;
  StartEngine();
  JoinAll();
  std::vector<AuditRecord> w = DivergenceWarnings(
      engine_, *store_, {0.7, 90.0, 95.0}, [](Model& m, int i) { m.data()[0] = i; });
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].round, 2);
  EXPECT_THAT(w[0].detail, HasSubstr("evaluation loss 90 is 128 times the run's lowest, 0.7"));
  EXPECT_THAT(w[0].detail, HasSubstr("standardise the sites' features (run.federated_standardization)"));
}

TEST_F(EngineTest, WarnsWhenTheFirstEvaluationLossIsAlreadyHuge) {
  options_.num_rounds = 1;
  options_.eval_every = 1;
  options_.min_fit_clients = 3;
  StartEngine();
  JoinAll();
  std::vector<AuditRecord> w =
      DivergenceWarnings(engine_, *store_, {393.0}, [](Model&, int) {});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0].detail, HasSubstr("evaluation loss 393 is above 100"));
}

TEST_F(EngineTest, DoesNotWarnWhileTheLossFalls) {
  options_.num_rounds = 3;
  options_.eval_every = 1;
  options_.min_fit_clients = 3;
  StartEngine();
  JoinAll();
  EXPECT_TRUE(
      DivergenceWarnings(engine_, *store_, {2.3, 1.1, 0.6}, [](Model&, int) {}).empty());
}

}  // namespace
}  // namespace fl::server
