// A closed round's commit on the engine's own thread (EngineOptions::commit_thread): the upload
// that closed the round returns at once, and while the commit runs (here held inside the
// evaluation hook) polls, heartbeats, downloads and the run's state are answered; stopping or
// aborting the run waits for the commit, which keeps its round.
#include <chrono>
#include <future>
#include <memory>

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
      if (!entered_set_.exchange(true)) entered_.set_value();
      released_.wait();
      return std::map<std::string, double>{{"test_accuracy", 0.5}};
    };
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

// Waits (real time, at most 30 s) until the engine has committed `round`.
bool WaitForCommitted(RoundEngine& engine, int32_t round) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (engine.committed_round() < round) {
    if (std::chrono::steady_clock::now() > until) return false;
    engine.WaitForChange(engine.version(), absl::Milliseconds(100));
  }
  return true;
}

// `call` on another thread: whether it returned within 10 s (it may not take the engine's lock
// for longer than a moment while a commit runs).
template <typename F>
bool ReturnsPromptly(F call) {
  auto result = std::async(std::launch::async, std::move(call));
  return result.wait_for(10s) == std::future_status::ready;
}

class EngineCommitTest : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    options_.commit_thread = true;
    hooks_.evaluate = gate_.Hook();
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

TEST_F(EngineCommitTest, PollsHeartbeatsAndDownloadsGoOnWhileARoundCommits) {
  CloseRoundOne();
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

TEST_F(EngineCommitTest, StoppingTheRunWaitsForTheCommitAndKeepsItsRound) {
  CloseRoundOne();
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

TEST_F(EngineCommitTest, AShutdownDuringACommitKeepsTheRoundAndStartsNoOther) {
  CloseRoundOne();
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

TEST_F(EngineCommitTest, DestroyingTheEngineFinishesACommitInFlight) {
  CloseRoundOne();
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

}  // namespace
}  // namespace fl::server
