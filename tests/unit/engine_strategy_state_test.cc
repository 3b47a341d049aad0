// A strategy's server state (a server optimizer's momentum or moments) is checkpointed with each
// committed round and read back when the run resumes: a run stopped after round 1 and resumed by
// a new server (a new strategy object, its state empty) ends bit-identical to one never stopped.
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "fl/aggregation/strategies.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

class StrategyStateTest : public EngineTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    options_.num_rounds = 3;
    NewStrategy();
  }
  void NewStrategy() {
    absl::StatusOr<std::unique_ptr<aggregation::Strategy>> s =
        aggregation::MakeStrategy({.name = GetParam()});
    ASSERT_TRUE(s.ok()) << s.status();
    strategy_ = *std::move(s);
  }
  // Round `round`: every client sends a model of its own, the same in every run of the test.
  void Round(int32_t round) {
    for (size_t i = 0; i < clients_.size(); ++i) {
      Task task = engine_->Poll(clients_[i]);
      ASSERT_EQ(task.kind, Task::Kind::kFit);
      ASSERT_EQ(task.round, round);
      ASSERT_TRUE(Submit(clients_[i], task, RandomModel(100 * round + i), 10 * (i + 1)).ok());
    }
    ASSERT_EQ(engine_->committed_round(), round);
  }
  std::shared_ptr<const Model> RunThrough(bool restart_after_round_1) {
    StartEngine();
    JoinAll();
    Round(1);
    if (restart_after_round_1) {
      engine_->Abort("restart");
      engine_.reset();
      NewStrategy();
      StartEngine();
      JoinAll();
    }
    Round(2);
    Round(3);
    return engine_->global_model();
  }
};

TEST_P(StrategyStateTest, AResumedRunContinuesBitIdentically) {
  std::shared_ptr<const Model> straight = RunThrough(false);
  ASSERT_NE(straight, nullptr);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  for (const RoundRecord& r : *rounds) {
    EXPECT_EQ(r.state_checkpoint.size(), 64u) << "round " << r.round << " has no state";
  }
  engine_.reset();
  store_.reset();
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_ + "/spill");
  OpenStore();
  NewStrategy();

  std::shared_ptr<const Model> resumed = RunThrough(true);
  ASSERT_NE(resumed, nullptr);
  ASSERT_EQ(straight->spec(), resumed->spec());
  EXPECT_EQ(std::memcmp(straight->data().data(), resumed->data().data(), straight->NumBytes()), 0)
      << "the resumed run's model differs from the uninterrupted run's";
}

INSTANTIATE_TEST_SUITE_P(ServerOptimizers, StrategyStateTest,
                         ::testing::Values("fedavgm", "fedadagrad", "fedadam", "fedyogi"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Without the state (as if it were lost), the resumed run would not be the same: the test above
// can tell.
TEST(StrategyStateRestartTest, TheStateMattersToTheNextStep) {
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> adam =
      aggregation::MakeStrategy({.name = "fedadam"});
  ASSERT_TRUE(adam.ok());
  Model global = RandomModel(1);
  auto round = [&](aggregation::Strategy& s, uint64_t seed) {
    std::unique_ptr<aggregation::RoundAggregator> agg = s.BeginRound(global);
    Model update = RandomModel(seed);
    agg->Fold(0, update.data(), 1);
    agg->Accept(1);
    absl::StatusOr<Model> next = agg->Finish();
    EXPECT_TRUE(next.ok()) << next.status();
    std::optional<Model> state = agg->TakeState();
    EXPECT_TRUE(state.has_value());
    EXPECT_TRUE(s.AdoptState(*std::move(state)).ok());
    return *std::move(next);
  };
  (void)round(**adam, 2);
  Model with_state = round(**adam, 3);
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> fresh =
      aggregation::MakeStrategy({.name = "fedadam"});
  ASSERT_TRUE(fresh.ok());
  Model without_state = round(**fresh, 3);
  EXPECT_NE(
      std::memcmp(with_state.data().data(), without_state.data().data(), with_state.NumBytes()), 0);
}

}  // namespace
}  // namespace fl::server
