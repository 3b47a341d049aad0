// What an operator does to a running run (fl run stop, fl run update, a resume with new
// values), on the engine with a fake clock over a real SQLite store.
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string AuditOf(Store& store) {
  std::vector<std::string> lines;
  absl::StatusOr<std::vector<AuditRecord>> log = store.AuditLog(100);
  EXPECT_TRUE(log.ok()) << log.status();
  if (!log.ok()) return "";
  for (const AuditRecord& r : *log) {
    lines.push_back(absl::StrCat(r.event, ": ", r.detail));
  }
  return absl::StrJoin(lines, "\n");
}

TEST_F(EngineTest, PoliciesChangeWhileTheRunRunsAuditedAndKeptAcrossARestart) {
  StartEngine();
  EngineOptions wanted = engine_->options();
  wanted.num_rounds = 5;
  wanted.min_clients = 2;
  wanted.round_timeout = absl::Minutes(15);
  absl::StatusOr<std::vector<std::string>> changes = engine_->ChangePolicies(wanted, "alice");
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(*changes,
              ElementsAre("rounds: 3 -> 5", "min_clients: 3 -> 2", "round_timeout_s: 300 -> 900"));
  EXPECT_THAT(AuditOf(*store_), HasSubstr("run_updated: rounds: 3 -> 5 (by alice)"));
  // Nothing to change is no change.
  EXPECT_TRUE(engine_->ChangePolicies(engine_->options(), "alice")->empty());

  // Two sites are enough now: a round starts and commits with them.
  ASSERT_TRUE(engine_->Join("client-a", "client-a").ok());
  ASSERT_TRUE(engine_->Join("client-b", "client-b").ok());
  ASSERT_TRUE(Submit("client-a", engine_->Poll("client-a"), RandomModel(1), 1).ok());
  ASSERT_TRUE(Submit("client-b", engine_->Poll("client-b"), RandomModel(2), 1).ok());
  EXPECT_EQ(engine_->committed_round(), 1);

  // The store keeps the change: a restarted engine resumes with it.
  engine_.reset();
  StartEngine();
  EXPECT_EQ(engine_->options().num_rounds, 5);
  EXPECT_EQ(engine_->options().min_clients, 2);
}

TEST_F(EngineTest, WhatARunCannotChangeIsRefusedAndNothingChanges) {
  StartEngine();
  EngineOptions wanted = engine_->options();
  wanted.num_rounds = 9;
  wanted.update_encoding = "int8";
  wanted.fit.learning_rate = 0.5;
  absl::StatusOr<std::vector<std::string>> refused = engine_->ChangePolicies(wanted, "alice");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("cannot change learning_rate"));
  EXPECT_THAT(refused.status().message(), HasSubstr("update_encoding \"float32\" -> \"int8\""));
  EXPECT_EQ(engine_->options().num_rounds, 3);

  EngineOptions bad = engine_->options();
  bad.min_fit_clients = 4;  // more than min_clients
  EXPECT_EQ(engine_->ChangePolicies(bad, "alice").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Rounds lowered under the committed ones: the round in flight (opened at the last commit) is
// let finish, and the run ends with it; a run that is over changes no more.
TEST_F(EngineTest, FewerRoundsThanCommittedEndTheRunAfterTheRoundInFlight) {
  StartEngine();
  JoinAll();
  for (const std::string& c : clients_) {
    ASSERT_TRUE(Submit(c, engine_->Poll(c), RandomModel(3), 1).ok());
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  EngineOptions wanted = engine_->options();
  wanted.num_rounds = 1;
  ASSERT_TRUE(engine_->ChangePolicies(wanted, "alice").ok());
  EXPECT_FALSE(engine_->finished());  // round 2 is in flight
  for (const std::string& c : clients_) {
    ASSERT_TRUE(Submit(c, engine_->Poll(c), RandomModel(4), 1).ok());
  }
  EXPECT_EQ(engine_->committed_round(), 2);
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kDone);
  EXPECT_EQ(engine_->ChangePolicies(wanted, "alice").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_->Stop(RunStatus::kFailed, "again").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(EngineTest, AStoppedRunAbortsItsRoundAndEndsAsTheOperatorSaid) {
  StartEngine();
  JoinAll();
  Task task = engine_->Poll("client-a");
  ASSERT_EQ(task.kind, Task::Kind::kFit);
  ASSERT_TRUE(engine_->Stop(RunStatus::kFailed, "stopped by alice: wrong data").ok());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_EQ(run->reason, "stopped by alice: wrong data");
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kAborted);
  // The site's upload for the aborted round is refused; it hears DONE.
  EXPECT_FALSE(Submit("client-a", task, RandomModel(1), 1).ok());
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kDone);
  EXPECT_THAT(AuditOf(*store_), HasSubstr("run_stopped: failed: stopped by alice: wrong data"));
}

}  // namespace
}  // namespace fl::server
