// Robust aggregation through the round engine: the updates travel the real upload path (chunks,
// checks, staging) into the strategy's spill; what cannot work is refused when the engine starts.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fl/aggregation/robust.h"
#include "fl/aggregation/strategies.h"
#include "gmock/gmock.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;

// The spill's n-th file cannot be created (a full disk); the others are real files.
class FullOnce : public aggregation::SpillSpace {
 public:
  FullOnce(std::string dir, int fail) : real_(aggregation::MakeFileSpill(dir)), fail_(fail) {}
  absl::StatusOr<std::unique_ptr<aggregation::SpillFile>> Create(int64_t n) override {
    if (++count_ == fail_) return absl::ResourceExhaustedError("no space in the spill (test)");
    return real_->Create(n);
  }

 private:
  std::shared_ptr<aggregation::SpillSpace> real_;
  int fail_;
  int count_ = 0;
};

class EngineRobustTest : public EngineTest {
 protected:
  void Use(aggregation::StrategyOptions o, std::shared_ptr<aggregation::SpillSpace> spill = {}) {
    absl::StatusOr<std::unique_ptr<aggregation::Strategy>> s = aggregation::MakeStrategy(
        o, {}, spill != nullptr ? spill : aggregation::MakeFileSpill(options_.spill_dir));
    ASSERT_TRUE(s.ok()) << s.status();
    strategy_ = *std::move(s);
  }
  absl::Status Start() {
    return RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()),
                               hooks_)
        .status();
  }
};

TEST_F(EngineRobustTest, TooFewUpdatesPerRoundForFAreRefusedAtStart) {
  Use({.name = "krum", .num_malicious = 1});
  options_.min_fit_clients = 3;
  EXPECT_THAT(Start().message(),
              HasSubstr("'krum' with num_malicious = 1 needs at least 5 updates in every round, "
                        "and min_fit_clients is 3"));
}

TEST_F(EngineRobustTest, SecureAggregationIsRefusedAtStart) {
  Use({.name = "fedmedian"});
  options_.secure_aggregation.enabled = true;
  EXPECT_THAT(Start().message(), HasSubstr("'fedmedian' needs each site's update apart"));
}

TEST_F(EngineRobustTest, CentralDpIsRefusedAtStart) {
  Use({.name = "bulyan"});
  options_.privacy.mode = "central";
  options_.privacy.noise_multiplier = 1.0;
  options_.privacy.clip_norm = 1.0;
  EXPECT_THAT(Start().message(), HasSubstr("central DP cannot wrap strategy 'bulyan'"));
}

// Three sites, one sending a model 1000 times too large: the committed model is the
// coordinate-wise median of the three models exactly.
TEST_F(EngineRobustTest, TheMedianOfTheUploadedModelsIsCommitted) {
  Use({.name = "fedmedian"});
  options_.min_fit_clients = 3;
  StartEngine();
  JoinAll();
  std::vector<Model> sent;
  for (size_t i = 0; i < clients_.size(); ++i) {
    Model m = RandomModel(40 + i);
    if (i == 2) {
      for (float& x : m.data()) x *= 1000;
    }
    Task task = engine_->Poll(clients_[i]);
    ASSERT_EQ(task.kind, Task::Kind::kFit);
    ASSERT_TRUE(Submit(clients_[i], task, m, 100 * (i + 1)).ok());
    sent.push_back(std::move(m));
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  std::shared_ptr<const Model> global = engine_->global_model();
  for (size_t j = 0; j < global->data().size(); ++j) {
    float v[3] = {sent[0].data()[j], sent[1].data()[j], sent[2].data()[j]};
    std::sort(v, v + 3);
    ASSERT_EQ(global->data()[j], v[1]) << "parameter " << j;
  }
}

// The spill cannot take the second update: that upload is refused with the reason, the round
// commits with the other two.
TEST_F(EngineRobustTest, AnUpdateTheSpillCannotTakeIsRefusedAndTheRoundGoesOn) {
  Use({.name = "fedtrimmedavg", .trim_beta = 0.0},
      std::make_shared<FullOnce>(options_.spill_dir, 2));
  StartEngine();
  JoinAll();
  std::vector<absl::Status> results;
  for (size_t i = 0; i < clients_.size(); ++i) {
    Task task = engine_->Poll(clients_[i]);
    ASSERT_EQ(task.kind, Task::Kind::kFit);
    results.push_back(Submit(clients_[i], task, RandomModel(i), 1));
  }
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_THAT(results[1].message(), HasSubstr("no space in the spill (test)"));
  EXPECT_TRUE(results[2].ok()) << results[2];
  ASSERT_EQ(engine_->committed_round(), 1);
  std::shared_ptr<const Model> global = engine_->global_model();
  const Model a = RandomModel(0), c = RandomModel(2);
  for (size_t j = 0; j < global->data().size(); j += 101) {
    ASSERT_NEAR(global->data()[j], (a.data()[j] + c.data()[j]) / 2, 1e-6) << j;
  }
}

// q-FedAvg refuses an update without the site's initial_loss before any of it reaches the sum:
// that site is refused with the reason, the round commits with the other two.
TEST_F(EngineRobustTest, AQFedAvgUpdateWithoutItsLossIsRefusedAndTheRoundCommits) {
  Use({.name = "qfedavg"});
  StartEngine();
  JoinAll();
  std::vector<absl::Status> results;
  for (size_t i = 0; i < clients_.size(); ++i) {
    Task task = engine_->Poll(clients_[i]);
    ASSERT_EQ(task.kind, Task::Kind::kFit);
    std::map<std::string, double> metrics = {{"loss", 1.0}};
    if (i != 1) metrics["initial_loss"] = 0.5 + static_cast<double>(i);
    results.push_back(Submit(clients_[i], task, RandomModel(i), 10, metrics));
  }
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_THAT(results[1].message(), HasSubstr("q-FedAvg weighs each update by the metric "
                                              "'initial_loss'"));
  EXPECT_TRUE(results[2].ok()) << results[2];
  EXPECT_EQ(engine_->committed_round(), 1) << "the refused update did not spoil the round";
}

// The missing metric is refused when the upload begins, before the site sends its payload.
TEST_F(EngineRobustTest, AQFedAvgUpdateWithoutItsLossIsRefusedBeforeItsPayload) {
  Use({.name = "qfedavg"});
  StartEngine();
  JoinAll();
  Task task = engine_->Poll(clients_[0]);
  ASSERT_EQ(task.kind, Task::Kind::kFit);
  absl::StatusOr<std::unique_ptr<Upload>> upload =
      engine_->BeginUpload(clients_[0], MetaFor(task, 10));
  EXPECT_THAT(upload.status().message(),
              HasSubstr("q-FedAvg weighs each update by the metric 'initial_loss'"));
}

}  // namespace
}  // namespace fl::server
