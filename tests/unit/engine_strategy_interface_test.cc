// The engine over the strategy interface after Flower: the strategy chooses each round's sites and
// what each is told (ConfigureFit), is told which sampled sites failed before its Finish, chooses
// the evaluators and aggregates their reports (ConfigureEvaluate, AggregateEvaluate), and bounds
// each update's norm; the wrappers (norm bound, accept_failures = false) over FedAvg.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/strategy_wrapper.h"
#include "fl/aggregation/wrappers.h"
#include "gmock/gmock.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using aggregation::RoundContext;
using aggregation::RoundPlan;
using aggregation::SiteFailure;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the test strategy saw and what it answers; shared with its aggregators.
struct Script {
  absl::Mutex mu;
  std::vector<RoundContext> fit_contexts;  // `available` not kept (valid during the call)
  std::vector<std::string> fit_available;  // of the last ConfigureFit
  std::vector<SiteFailure> failures;       // told to the aggregators
  std::function<absl::StatusOr<RoundPlan>(const RoundContext&)> fit;
  std::function<absl::StatusOr<RoundPlan>(const RoundContext&)> evaluate;
  bool broken = true;  // for the scripts' own use
  int calls = 0;
};

class RecordingAggregator final : public aggregation::RoundAggregatorWrapper {
 public:
  RecordingAggregator(std::unique_ptr<aggregation::RoundAggregator> inner, Script* script)
      : RoundAggregatorWrapper(std::move(inner)), script_(script) {}
  void Failed(const SiteFailure& failure) override {
    absl::MutexLock lock(&script_->mu);
    script_->failures.push_back(failure);
  }

 private:
  Script* script_;
};

// FedAvg, configured by a Script; AggregateEvaluate reports the lowest loss (not the mean).
class ScriptedStrategy final : public aggregation::StrategyWrapper {
 public:
  explicit ScriptedStrategy(Script* script)
      : StrategyWrapper(aggregation::MakeFedAvg()), script_(script) {}

  absl::StatusOr<RoundPlan> ConfigureFit(const RoundContext& ctx) const override {
    absl::MutexLock lock(&script_->mu);
    script_->fit_contexts.push_back(ctx);
    script_->fit_available.assign(ctx.available.begin(), ctx.available.end());
    if (script_->fit) return script_->fit(ctx);
    return inner().ConfigureFit(ctx);
  }
  absl::StatusOr<RoundPlan> ConfigureEvaluate(const RoundContext& ctx) const override {
    if (script_->evaluate) return script_->evaluate(ctx);
    return inner().ConfigureEvaluate(ctx);
  }
  absl::StatusOr<aggregation::EvaluationSummary> AggregateEvaluate(
      int32_t round, std::span<const aggregation::SiteEvaluation> results,
      std::span<const SiteFailure> failures) const override {
    if (results.empty()) return absl::FailedPreconditionError("no results");
    aggregation::EvaluationSummary out;
    out.loss = results.front().loss;
    for (const aggregation::SiteEvaluation& r : results) out.loss = std::min(out.loss, r.loss);
    out.num_examples = static_cast<int64_t>(results.size());
    out.metrics["failures"] = static_cast<double>(failures.size());
    return out;
  }
  std::unique_ptr<aggregation::RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<RecordingAggregator>(inner().BeginRound(global), script_);
  }

 private:
  Script* script_;
};

// The engine tests' fixture with a Script that outlives the engine (TearDown ends the engine,
// whose last commit may still reach the strategy, before the script goes).
class EngineStrategyTest : public EngineTest {
 protected:
  void TearDown() override {
    engine_.reset();
    EngineTest::TearDown();
  }
  Script script_;
};

std::vector<AuditRecord> AuditEvents(Store& store, const std::string& event) {
  std::vector<AuditRecord> out;
  absl::StatusOr<std::vector<AuditRecord>> log = store.AuditLog(1000);
  EXPECT_TRUE(log.ok());
  for (const AuditRecord& r : *log) {
    if (r.event == event) out.push_back(r);
  }
  return out;
}

TEST_F(EngineStrategyTest, TheStrategyChoosesTheRoundsSitesAndWhatEachIsTold) {
  script_.fit = [](const RoundContext& ctx) -> absl::StatusOr<RoundPlan> {
    RoundPlan plan;
    plan.sites = {"client-a", "client-c"};
    plan.config = {{"lr_scale", 0.5}};
    plan.site_config["client-a"] = {{"role", 1}, {"lr_scale", 0.25}};
    return plan;
  };
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  options_.num_rounds = 1;
  StartEngine();
  JoinAll();
  const Task a = engine_->Poll("client-a");
  const Task b = engine_->Poll("client-b");
  const Task c = engine_->Poll("client-c");
  {
    absl::MutexLock lock(&script_.mu);
    ASSERT_EQ(script_.fit_contexts.size(), 1u);
    const RoundContext& ctx = script_.fit_contexts[0];
    EXPECT_EQ(ctx.round, 1);
    EXPECT_EQ(ctx.attempt, 0);
    EXPECT_EQ(ctx.num_to_sample, 3);  // sample_fraction 1 of 3
    EXPECT_EQ(ctx.min_sites, 2);      // min_fit_clients
    EXPECT_THAT(script_.fit_available, ElementsAre("client-a", "client-b", "client-c"));
  }
  ASSERT_EQ(a.kind, Task::Kind::kFit);
  EXPECT_EQ(b.kind, Task::Kind::kWait);  // not chosen
  ASSERT_EQ(c.kind, Task::Kind::kFit);
  // The site's value over the round's, the round's over the run's.
  EXPECT_EQ(a.fit.extra.at("lr_scale"), 0.25);
  EXPECT_EQ(a.fit.extra.at("role"), 1);
  EXPECT_EQ(c.fit.extra.at("lr_scale"), 0.5);
  EXPECT_EQ(c.fit.extra.count("role"), 0u);
  ASSERT_TRUE(Submit("client-a", a, RandomModel(1), 1).ok());
  ASSERT_TRUE(Submit("client-c", c, RandomModel(3), 1).ok());
  EXPECT_EQ(engine_->committed_round(), 1);  // the two chosen sites make the round
}

TEST_F(EngineStrategyTest, APlanThatCannotRunKeepsTheRoundFromStartingAndSaysWhy) {
  script_.fit = [this](const RoundContext& ctx) -> absl::StatusOr<RoundPlan> {
    RoundPlan plan;
    plan.sites = {"client-a", script_.broken ? "client-z" : "client-b"};
    return plan;
  };
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  options_.num_rounds = 1;
  options_.retry_backoff = absl::Seconds(10);
  StartEngine();
  JoinAll();
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);
  std::vector<AuditRecord> refused = AuditEvents(*store_, "round_not_configured");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].detail,
            "strategy 'fedavg' could not configure round 1: it chose site client-z, which is not "
            "available; asked again every 10s");
  // Not asked again before the backoff, then asked again: the fixed plan runs.
  script_.broken = false;
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kFit);
  EXPECT_EQ(engine_->Poll("client-c").kind, Task::Kind::kWait);
  EXPECT_EQ(AuditEvents(*store_, "round_not_configured").size(), 1u);
}

TEST_F(EngineStrategyTest, PlansWithTooFewSitesOrASiteTwiceAreRefusedByName) {
  script_.fit = [this](const RoundContext& ctx) -> absl::StatusOr<RoundPlan> {
    RoundPlan plan;
    switch (script_.calls++) {
      case 0:
        plan.sites = {"client-a"};
        break;
      case 1:
        plan.sites = {"client-a", "client-a"};
        break;
      case 2:
        plan.sites = {"client-a", "client-b"};
        plan.site_config["client-c"] = {{"x", 1}};
        break;
      default:
        return absl::UnavailableError("no GPU site online");
    }
    return plan;
  };
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  options_.retry_backoff = absl::Seconds(1);
  StartEngine();
  JoinAll();
  for (int i = 0; i < 4; ++i) {
    engine_->Tick();
    clock_.Advance(absl::Seconds(2));
  }
  std::vector<AuditRecord> refused = AuditEvents(*store_, "round_not_configured");
  std::vector<std::string> details;
  for (const AuditRecord& r : refused) details.push_back(r.detail);
  EXPECT_THAT(details,
              ::testing::UnorderedElementsAre(
                  HasSubstr("it chose 1 site; at least 2 are needed"),
                  HasSubstr("it chose site client-a twice"),
                  HasSubstr("its site_config names site client-c, which it did not choose"),
                  HasSubstr("no GPU site online")));
  EXPECT_EQ(engine_->committed_round(), 0);
}

TEST_F(EngineStrategyTest, AStrategyThatNeverCanFailsTheRunAfterWaitTimeoutSayingWhyOnce) {
  script_.fit = [](const RoundContext&) -> absl::StatusOr<RoundPlan> {
    return absl::UnavailableError("no GPU site online");
  };
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  options_.retry_backoff = absl::Seconds(1);
  options_.wait_timeout = absl::Seconds(30);
  StartEngine();
  JoinAll();
  for (int i = 0; i < 25; ++i) {
    for (const std::string& id : clients_) engine_->Poll(id);
    clock_.Advance(absl::Seconds(2));
  }
  {
    absl::MutexLock lock(&script_.mu);
    EXPECT_GT(script_.fit_contexts.size(), 10u);  // asked again after each backoff
  }
  EXPECT_EQ(AuditEvents(*store_, "round_not_configured").size(), 1u);  // not once per retry
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_THAT(run->reason, HasSubstr("strategy 'fedavg' could not configure round 1: no GPU site "
                                     "online (for longer than wait_timeout, 30s)"));
}

TEST_F(EngineStrategyTest, UnderDifferentialPrivacyThePlanMustBeTheUniformDraw) {
  script_.fit = [](const RoundContext& ctx) -> absl::StatusOr<RoundPlan> {
    RoundPlan plan;
    plan.sites = {"client-a", "client-b"};  // the draw takes all three
    return plan;
  };
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  options_.privacy.mode = "central";
  options_.privacy.noise_multiplier = 1.0;
  options_.privacy.clip_norm = 1.0;
  options_.privacy.delta = 1e-5;
  StartEngine();
  JoinAll();
  engine_->Tick();
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_THAT(run->reason, HasSubstr("chose other sites than the uniform draw in round 1, which "
                                     "differential privacy's accounting needs"));
}

TEST_F(EngineStrategyTest, TheStrategyIsToldOfEverySampledSiteThatFailed) {
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  clients_ = {"client-a", "client-b", "client-c", "client-d"};
  options_.num_rounds = 1;
  options_.min_clients = 4;
  options_.min_fit_clients = 1;
  options_.client_timeout = absl::Minutes(10);  // client-d is late, not gone
  StartEngine();
  JoinAll();
  const Task a = engine_->Poll("client-a");
  const Task b = engine_->Poll("client-b");
  const Task c = engine_->Poll("client-c");
  const Task d = engine_->Poll("client-d");
  ASSERT_TRUE(Submit("client-a", a, RandomModel(1), 1).ok());
  ASSERT_TRUE(engine_->Decline("client-b", MetaFor(b, 0), "UNAVAILABLE: the GPU is busy").ok());
  Model wrong(ModelSpec({{"w", {3}}}));
  UpdateMeta bad = MetaFor(c, 1);
  bad.payload_bytes = wrong.NumBytes();
  EXPECT_FALSE(engine_->BeginUpload("client-c", bad).ok());  // refused: wrong size
  clock_.Advance(options_.round_timeout + absl::Seconds(1));
  engine_->Tick();  // client-d never answered
  ASSERT_EQ(engine_->committed_round(), 1);
  absl::MutexLock lock(&script_.mu);
  ASSERT_EQ(script_.failures.size(), 3u);
  std::map<std::string, SiteFailure> by_site;
  for (const SiteFailure& f : script_.failures) by_site[f.site] = f;
  EXPECT_EQ(by_site.at("client-b").kind, SiteFailure::Kind::kDeclined);
  EXPECT_THAT(by_site.at("client-b").reason, HasSubstr("UNAVAILABLE: the GPU is busy"));
  EXPECT_EQ(by_site.at("client-c").kind, SiteFailure::Kind::kRefused);
  EXPECT_EQ(by_site.at("client-d").kind, SiteFailure::Kind::kMissing);
  EXPECT_THAT(by_site.at("client-d").reason, HasSubstr("deadline"));
}

TEST_F(EngineStrategyTest, WithoutAcceptFailuresALostSiteFailsTheAttemptNamingIt) {
  strategy_ = aggregation::MakeRequireEverySite(aggregation::MakeFedAvg());
  options_.num_rounds = 1;
  std::vector<RoundSummary> ends;
  hooks_.on_round_end = [&ends](const RoundSummary& s) { ends.push_back(s); };
  StartEngine();
  JoinAll();
  const Task a = engine_->Poll("client-a");
  const Task b = engine_->Poll("client-b");
  const Task c = engine_->Poll("client-c");
  ASSERT_TRUE(Submit("client-a", a, RandomModel(1), 1).ok());
  ASSERT_TRUE(Submit("client-c", c, RandomModel(3), 1).ok());
  ASSERT_TRUE(engine_->Decline("client-b", MetaFor(b, 0), "RESOURCE_EXHAUSTED: no memory").ok());
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_FALSE(ends[0].committed);
  EXPECT_THAT(ends[0].reason, HasSubstr("accept_failures is false and 1 of the sampled sites "
                                        "failed: client-b declined (the client declined the "
                                        "task: RESOURCE_EXHAUSTED: no memory)"));
  EXPECT_EQ(engine_->committed_round(), 0);
  // The retry, with every site, commits.
  clock_.Advance(absl::Minutes(2));
  for (const std::string& id : clients_) engine_->Poll(id);  // back online: the retry starts
  for (const std::string& id : clients_) {
    const Task t = engine_->Poll(id);
    ASSERT_EQ(t.kind, Task::Kind::kFit) << id;
    EXPECT_EQ(t.round, 1);
    ASSERT_TRUE(Submit(id, t, RandomModel(7), 1).ok());
  }
  EXPECT_EQ(engine_->committed_round(), 1);
}

TEST_F(EngineStrategyTest, ANormBoundClipsEachUpdatesChangeBeforeTheMean) {
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> bounded =
      aggregation::MakeNormBound(aggregation::MakeFedAvg(), 2.0);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  strategy_ = *std::move(bounded);
  options_.num_rounds = 1;
  StartEngine();
  JoinAll();
  // The global model is zero: each update is its own change. Site a moves 1 parameter by 10
  // (norm 10, clipped to 2), b by 1 (within the bound), c not at all.
  const std::vector<std::pair<std::string, float>> moves = {
      {"client-a", 10.f}, {"client-b", 1.f}, {"client-c", 0.f}};
  for (const auto& [id, move] : moves) {
    const Task t = engine_->Poll(id);
    ASSERT_EQ(t.kind, Task::Kind::kFit);
    Model m(TestSpec());
    m.data()[5] = move;
    ASSERT_TRUE(Submit(id, t, m, 1).ok());
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  std::shared_ptr<const Model> next = engine_->global_model();
  EXPECT_NEAR(next->data()[5], (2.0 + 1.0 + 0.0) / 3, 1e-6);  // unbounded: 11 / 3
  double others = 0;
  for (size_t i = 0; i < next->data().size(); ++i) others += i == 5 ? 0 : std::abs(next->data()[i]);
  EXPECT_EQ(others, 0);
}

TEST_F(EngineStrategyTest, TheStrategyChoosesTheEvaluatorsAndAggregatesTheirReports) {
  script_.evaluate = [](const RoundContext& ctx) -> absl::StatusOr<RoundPlan> {
    RoundPlan plan;
    plan.sites = {"client-b", "client-c"};
    return plan;
  };
  strategy_ = std::make_unique<ScriptedStrategy>(&script_);
  options_.num_rounds = 1;
  options_.eval_every = 1;
  StartEngine();
  JoinAll();
  RunRound();
  ASSERT_EQ(engine_->committed_round(), 1);
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);  // not chosen to evaluate
  const std::vector<std::pair<std::string, double>> losses = {{"client-b", 0.9}, {"client-c", 0.4}};
  for (const auto& [id, loss] : losses) {
    const Task t = engine_->Poll(id);
    ASSERT_EQ(t.kind, Task::Kind::kEvaluate) << id;
    EvaluationReport r;
    r.run_id = t.run_id;
    r.round = t.round;
    r.task_id = t.task_id;
    r.num_examples = 100;
    r.loss = loss;
    ASSERT_TRUE(engine_->SubmitEvaluation(id, r).ok());
  }
  absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(engine_->run_id());
  ASSERT_TRUE(evals.ok()) << evals.status();
  const auto federated = std::find_if(evals->begin(), evals->end(), [](const EvaluationRecord& e) {
    return e.source == "federated";
  });
  ASSERT_NE(federated, evals->end());
  EXPECT_EQ(federated->loss, 0.4);  // the strategy's lowest, not the mean 0.65
  EXPECT_EQ(federated->metrics.at("failures"), 0);
}

}  // namespace
}  // namespace fl::server
