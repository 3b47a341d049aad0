// A closed round's commit on the engine's own thread (EngineOptions::commit_thread): the upload
// that closed the round returns at once, and while the commit runs (held inside the strategy's
// Finish, or inside the evaluation hook) polls, heartbeats, downloads and the run's state are
// answered; stopping or aborting the run waits for the commit, which keeps its round.
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "gmock/gmock.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Holds the commit inside the evaluation hook until Release(); says when the hook was entered.
// Released on destruction, so that a failing test does not leave the engine's thread waiting.
class CommitGate {
 public:
  CommitGate() : released_(release_.get_future().share()) {}
  ~CommitGate() { Release(); }
  EngineHooks::EvaluateFn Hook() {
    return [this](const Model&) {
      EnterAndWait();
      return std::map<std::string, double>{{"test_accuracy", 0.5}};
    };
  }
  void EnterAndWait() {
    if (!entered_set_.exchange(true)) entered_.set_value();
    released_.wait();
  }
  bool WaitEntered() { return entered_future_.wait_for(30s) == std::future_status::ready; }
  void Release() {
    if (!released_set_.exchange(true)) release_.set_value();
  }

 private:
  std::promise<void> release_;
  std::shared_future<void> released_;
  std::promise<void> entered_;
  std::future<void> entered_future_ = entered_.get_future();
  std::atomic<bool> entered_set_{false};
  std::atomic<bool> released_set_{false};
};

// FedAvg whose Finish (the next model, computed by the commit) waits for the gate first.
class GatedStrategy final : public aggregation::Strategy {
 public:
  explicit GatedStrategy(CommitGate* gate) : gate_(gate) {}
  std::string name() const override { return "gated-fedavg"; }
  std::unique_ptr<aggregation::RoundAggregator> BeginRound(const Model& global) override {
    return std::make_unique<Aggregator>(fedavg_->BeginRound(global), gate_);
  }

 private:
  class Aggregator final : public aggregation::RoundAggregator {
   public:
    Aggregator(std::unique_ptr<aggregation::RoundAggregator> inner, CommitGate* gate)
        : inner_(std::move(inner)), gate_(gate) {}
    void Fold(int64_t offset, std::span<const float> values, double weight) override {
      inner_->Fold(offset, values, weight);
    }
    void Accept(double weight) override { inner_->Accept(weight); }
    int num_accepted() const override { return inner_->num_accepted(); }
    absl::StatusOr<Model> Finish() override {
      gate_->EnterAndWait();
      return inner_->Finish();
    }

   private:
    std::unique_ptr<aggregation::RoundAggregator> inner_;
    CommitGate* gate_;
  };
  std::unique_ptr<aggregation::Strategy> fedavg_ = aggregation::MakeFedAvg();
  CommitGate* gate_;
};

// Waits (real time, at most 30 s) until the engine has committed `round`.
bool WaitForCommitted(RoundEngine& engine, int32_t round) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (engine.committed_round() < round) {
    if (std::chrono::steady_clock::now() > until) return false;
    engine.WaitForChange(engine.version(), absl::Milliseconds(100));
  }
  return true;
}

// Where the test holds the commit.
enum class Hold { kAggregation, kEvaluation };

class EngineCommitTest : public EngineTest, public ::testing::WithParamInterface<Hold> {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    options_.commit_thread = true;
    hooks_.evaluate = [](const Model&) {
      return std::map<std::string, double>{{"test_accuracy", 0.5}};
    };
    if (GetParam() == Hold::kEvaluation) {
      hooks_.evaluate = gate_.Hook();
    } else {
      strategy_ = std::make_unique<GatedStrategy>(&gate_);
    }
  }

  // `call` on another thread: whether it returned within 10 s (it may not take the engine's lock
  // for longer than a moment while a commit runs). When it did not, the commit is let go, so
  // that the test fails rather than hangs.
  template <typename F>
  bool ReturnsPromptly(F call) {
    std::promise<void> done;
    std::future<void> returned = done.get_future();
    std::thread t([&] {
      call();
      done.set_value();
    });
    const bool prompt = returned.wait_for(10s) == std::future_status::ready;
    if (!prompt) gate_.Release();
    t.join();
    return prompt;
  }
  void TearDown() override {
    gate_.Release();
    EngineTest::TearDown();
  }
  // Round 1 with every client's update in; the last upload returns while the commit is held.
  void CloseRoundOne() {
    StartEngine();
    JoinAll();
    std::vector<Task> tasks;
    for (const std::string& c : clients_) tasks.push_back(engine_->Poll(c));
    for (size_t i = 0; i + 1 < clients_.size(); ++i) {
      ASSERT_TRUE(Submit(clients_[i], tasks[i], RandomModel(i), 1).ok());
    }
    last_task_ = tasks.back();
    ASSERT_TRUE(ReturnsPromptly([&] {
      ASSERT_TRUE(Submit(clients_.back(), last_task_, RandomModel(9), 1).ok());
    })) << "the upload that closed the round waited for its commit";
    ASSERT_TRUE(gate_.WaitEntered()) << "the commit did not start";
  }

  CommitGate gate_;
  Task last_task_;
};

TEST_P(EngineCommitTest, PollsHeartbeatsAndDownloadsGoOnWhileARoundCommits) {
  ASSERT_NO_FATAL_FAILURE(CloseRoundOne());
  Task polled;
  EXPECT_TRUE(ReturnsPromptly([&] { polled = engine_->Poll("client-a"); }));
  EXPECT_EQ(polled.kind, Task::Kind::kWait);
  EXPECT_TRUE(ReturnsPromptly([&] { engine_->Heartbeat("client-b", 0, ""); }));
  absl::StatusOr<GlobalModel> download = absl::UnknownError("not called");
  EXPECT_TRUE(ReturnsPromptly([&] {
    download = engine_->ModelForTask("client-c", last_task_.run_id, 1, last_task_.task_id);
  }));
  EXPECT_THAT(download.status().message(), HasSubstr("round 1 is closed and being committed"));
  RunActivity activity;
  EXPECT_TRUE(ReturnsPromptly([&] { activity = engine_->Activity(); }));
  EXPECT_EQ(activity.phase, RunActivity::Phase::kTraining);
  EXPECT_EQ(engine_->committed_round(), 0);

  gate_.Release();
  ASSERT_TRUE(WaitForCommitted(*engine_, 1));
  Task next = engine_->Poll("client-a");
  EXPECT_EQ(next.kind, Task::Kind::kFit);
  EXPECT_EQ(next.round, 2);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_GE(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kCommitted);
  EXPECT_THAT((*rounds)[0].metrics_json, HasSubstr("\"test_accuracy\":0.5"));
}

TEST_P(EngineCommitTest, StoppingTheRunWaitsForTheCommitAndKeepsItsRound) {
  ASSERT_NO_FATAL_FAILURE(CloseRoundOne());
  auto stopped = std::async(std::launch::async,
                            [&] { return engine_->Stop(RunStatus::kFinished, "operator stop"); });
  // Held by the commit: the stop cannot have finished the run under it.
  EXPECT_EQ(stopped.wait_for(200ms), std::future_status::timeout);
  gate_.Release();
  ASSERT_EQ(stopped.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(stopped.get().ok());
  EXPECT_EQ(engine_->committed_round(), 1);
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u) << "no round may start between the commit and the stop";
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kCommitted);
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->status, RunStatus::kFinished);
  EXPECT_EQ(run->reason, "operator stop");
}

TEST_P(EngineCommitTest, AShutdownDuringACommitKeepsTheRoundAndStartsNoOther) {
  ASSERT_NO_FATAL_FAILURE(CloseRoundOne());
  auto aborted = std::async(std::launch::async, [&] { engine_->Abort("server shutting down"); });
  EXPECT_EQ(aborted.wait_for(200ms), std::future_status::timeout);
  gate_.Release();
  ASSERT_EQ(aborted.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(engine_->committed_round(), 1);
  EXPECT_FALSE(engine_->finished());  // resumable: a restart runs round 2
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kCommitted);
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);
}

TEST_P(EngineCommitTest, DestroyingTheEngineFinishesACommitInFlight) {
  ASSERT_NO_FATAL_FAILURE(CloseRoundOne());
  const int64_t run_id = engine_->run_id();
  auto destroyed = std::async(std::launch::async, [&] { engine_.reset(); });
  EXPECT_EQ(destroyed.wait_for(200ms), std::future_status::timeout);
  gate_.Release();
  ASSERT_EQ(destroyed.wait_for(30s), std::future_status::ready);
  absl::StatusOr<std::optional<RoundRecord>> last = store_->LastCommittedRound(run_id);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->round, 1);
}

INSTANTIATE_TEST_SUITE_P(HeldIn, EngineCommitTest,
                         ::testing::Values(Hold::kAggregation, Hold::kEvaluation),
                         [](const ::testing::TestParamInfo<Hold>& info) {
                           return info.param == Hold::kAggregation ? "StrategysFinish"
                                                                   : "EvaluationHook";
                         });

}  // namespace
}  // namespace fl::server
