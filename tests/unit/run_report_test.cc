#include "fl/simulation/run_report.h"

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/common/model.h"
#include "fl/server/store.h"
#include "fl/simulation/report.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

using server::ParticipationRecord;
using server::ParticipationStatus;
using server::RoundRecord;
using server::RoundStatus;
using server::RunRecord;
using server::RunStatus;
using server::Store;

// w: 10 x 3 and b: 3, 33 float32 parameters.
const ModelSpec kSpec({TensorSpec{"w", {10, 3}}, TensorSpec{"b", {3}}});
constexpr int64_t kModelBytes = 33 * 4;
constexpr int64_t kT0 = 1'700'000'000'000;  // the run's creation, in ms

ParticipationRecord Participation(int64_t run_id, int32_t round, int32_t attempt,
                                  const std::string& client_id, ParticipationStatus status,
                                  int64_t bytes_received) {
  ParticipationRecord p;
  p.run_id = run_id;
  p.round = round;
  p.attempt = attempt;
  p.client_id = client_id;
  p.task_id = client_id + "-task";
  p.status = status;
  p.bytes_received = bytes_received;
  p.num_examples = 100;
  return p;
}

class RunReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "run_report_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<std::string> sha = store_->WriteCheckpoint(Model(kSpec));
    ASSERT_TRUE(sha.ok()) << sha.status();
    checkpoint_ = *sha;
  }

  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  int64_t NewRun(const std::string& name) {
    RunRecord run;
    run.name = name;
    run.config_json = R"({"num_rounds": 2, "strategy": "fedavg"})";
    run.model_spec_json = kSpec.ToJson();
    run.initial_checkpoint = checkpoint_;
    run.created_at_ms = kT0;
    absl::StatusOr<int64_t> id = store_->CreateRun(run);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  RoundRecord Attempt(int64_t run_id, int32_t round, int32_t attempt, int64_t started_ms) {
    RoundRecord r;
    r.run_id = run_id;
    r.round = round;
    r.attempt = attempt;
    r.started_at_ms = started_ms;
    r.num_sampled = 3;
    EXPECT_TRUE(store_->BeginRound(r).ok());
    return r;
  }

  void Commit(RoundRecord r, int64_t ended_ms, const std::string& metrics_json,
              const std::vector<ParticipationRecord>& participations) {
    r.status = RoundStatus::kCommitted;
    r.ended_at_ms = ended_ms;
    r.checkpoint = checkpoint_;
    r.metrics_json = metrics_json;
    int32_t accepted = 0;
    for (const ParticipationRecord& p : participations) {
      accepted += p.status == ParticipationStatus::kAccepted ? 1 : 0;
    }
    r.num_reported = accepted;
    absl::Status s = store_->CommitRound(r, participations);
    EXPECT_TRUE(s.ok()) << s;
  }

  void Fail(const RoundRecord& r, int64_t ended_ms, const std::string& reason,
            const std::vector<ParticipationRecord>& participations) {
    EXPECT_TRUE(
        store_->EndRound(r.run_id, r.round, r.attempt, RoundStatus::kFailed, reason, ended_ms)
            .ok());
    for (const ParticipationRecord& p : participations) {
      EXPECT_TRUE(store_->RecordParticipation(p).ok());
    }
  }

  // A finished run of two rounds, the first failing once: round 1 attempt 0 (failed, one
  // accepted update), round 1 attempt 1 and round 2 (committed).
  int64_t TwoRoundRun() {
    const int64_t run = NewRun("mnist-fedavg");
    RoundRecord r10 = Attempt(run, 1, 0, kT0 + 1000);
    Fail(r10, kT0 + 3500, "only 1 of 3 sampled clients delivered an accepted update",
         {Participation(run, 1, 0, "a", ParticipationStatus::kAccepted, 140),
          Participation(run, 1, 0, "b", ParticipationStatus::kDropped, 0),
          Participation(run, 1, 0, "c", ParticipationStatus::kDropped, 60)});
    RoundRecord r11 = Attempt(run, 1, 1, kT0 + 4000);
    Commit(r11, kT0 + 6000, R"({"train_loss": 0.9, "test_accuracy": 0.61, "note": "x"})",
           {Participation(run, 1, 1, "a", ParticipationStatus::kAccepted, 140),
            Participation(run, 1, 1, "b", ParticipationStatus::kAccepted, 141),
            Participation(run, 1, 1, "c", ParticipationStatus::kRefused, 139)});
    RoundRecord r20 = Attempt(run, 2, 0, kT0 + 7000);
    Commit(r20, kT0 + 7500, R"({"train_loss": 0.7, "test_accuracy": 0.74})",
           {Participation(run, 2, 0, "a", ParticipationStatus::kAccepted, 150),
            Participation(run, 2, 0, "b", ParticipationStatus::kAccepted, 150),
            Participation(run, 2, 0, "c", ParticipationStatus::kAccepted, 150)});
    EXPECT_TRUE(store_->FinishRun(run, RunStatus::kFinished, "", kT0 + 9000).ok());
    return run;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
  std::string checkpoint_;
};

TEST_F(RunReportTest, ListsEveryAttemptInOrderWithWhyOneFailed) {
  const int64_t run = TwoRoundRun();
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, run, kT0 + 60'000);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->rounds.size(), 3u);
  const ReportRound& failed = report->rounds[0];
  EXPECT_EQ(failed.round, 1);
  EXPECT_EQ(failed.attempt, 0);
  EXPECT_FALSE(failed.committed);
  EXPECT_EQ(failed.reason, "only 1 of 3 sampled clients delivered an accepted update");
  EXPECT_EQ(failed.num_sampled, 3);
  EXPECT_EQ(failed.num_accepted, 1);  // its accepted update, although nothing was committed
  EXPECT_DOUBLE_EQ(failed.duration_s, 2.5);
  EXPECT_EQ(report->rounds[1].round, 1);
  EXPECT_EQ(report->rounds[1].attempt, 1);
  EXPECT_TRUE(report->rounds[1].committed);
  EXPECT_EQ(report->rounds[1].num_accepted, 2);
  EXPECT_DOUBLE_EQ(report->rounds[1].duration_s, 2.0);
  EXPECT_EQ(report->rounds[1].reason, "");
  EXPECT_EQ(report->rounds[2].round, 2);
  EXPECT_TRUE(report->rounds[2].committed);
  EXPECT_EQ(report->rounds[2].num_accepted, 3);
  EXPECT_DOUBLE_EQ(report->rounds[2].duration_s, 0.5);
  for (const ReportRound& r : report->rounds) EXPECT_TRUE(r.phase_seconds.empty());
}

TEST_F(RunReportTest, HeaderShowsTheRunsNameStatusConfigurationAndWallTime) {
  const int64_t run = TwoRoundRun();
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, run, kT0 + 60'000);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->title, "mnist-fedavg");
  EXPECT_EQ(report->run_id, run);
  EXPECT_EQ(report->status, "finished");
  EXPECT_EQ(report->configuration_json, R"({"num_rounds": 2, "strategy": "fedavg"})");
  EXPECT_DOUBLE_EQ(report->wall_seconds, 9.0);  // created to ended, not to "now"
  EXPECT_TRUE(report->partition.empty());
}

TEST_F(RunReportTest, MetricsAreTheRoundsNumbers) {
  const int64_t run = TwoRoundRun();
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, run, kT0 + 60'000);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->rounds[0].metrics.empty());
  const std::map<std::string, double> expected = {{"test_accuracy", 0.61}, {"train_loss", 0.9}};
  EXPECT_EQ(report->rounds[1].metrics, expected);  // "note" is not a number
  EXPECT_DOUBLE_EQ(report->rounds[2].metrics.at("test_accuracy"), 0.74);
}

TEST_F(RunReportTest, AddsPrivacySpentAndTheFederatedEvaluation) {
  const int64_t run = NewRun("dp");
  RoundRecord r = Attempt(run, 1, 0, kT0 + 1000);
  r.dp_sampling_rate = 0.5;
  r.dp_epsilon = 1.25;
  Commit(r, kT0 + 2000, R"({"train_loss": 0.8})",
         {Participation(run, 1, 0, "a", ParticipationStatus::kAccepted, 100)});
  ASSERT_TRUE(store_
                  ->RecordEvaluation(run, 1, "federated", 0.42, 0.88, 500, kT0 + 2500,
                                     {{"accuracy", 0.88}, {"auc", 0.93}})
                  .ok());
  // The server's own evaluation repeats the round's test_* metrics: not added again.
  ASSERT_TRUE(store_->RecordEvaluation(run, 1, "server", 0.5, 0.8, 0, kT0 + 2000, {}).ok());
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, run, kT0 + 60'000);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->rounds.size(), 1u);
  const std::map<std::string, double> expected = {{"dp_epsilon", 1.25},
                                                  {"eval_accuracy", 0.88},
                                                  {"eval_auc", 0.93},
                                                  {"eval_loss", 0.42},
                                                  {"train_loss", 0.8}};
  EXPECT_EQ(report->rounds[0].metrics, expected);
}

TEST_F(RunReportTest, BytesUpAreTheUploadsAndBytesDownTheModelPerSiteHandedATask) {
  const int64_t run = TwoRoundRun();
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, run, kT0 + 60'000);
  ASSERT_TRUE(report.ok()) << report.status();
  // Only this attempt's participations, dropped sites' partial uploads included.
  EXPECT_EQ(report->rounds[0].bytes_up, 140 + 0 + 60);
  EXPECT_EQ(report->rounds[1].bytes_up, 140 + 141 + 139);
  EXPECT_EQ(report->rounds[2].bytes_up, 450);
  for (const ReportRound& r : report->rounds) EXPECT_EQ(r.bytes_down, 3 * kModelBytes);
}

TEST_F(RunReportTest, ARunningRunAndRoundAreMeasuredToNow) {
  const int64_t run = NewRun("");
  const RoundRecord r = Attempt(run, 1, 0, kT0 + 1000);
  ASSERT_TRUE(
      store_->RecordParticipation(Participation(run, 1, 0, "a", ParticipationStatus::kAssigned, 0))
          .ok());
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, run, kT0 + 11'000);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->title, "run " + std::to_string(run));
  EXPECT_EQ(report->status, "running");
  EXPECT_DOUBLE_EQ(report->wall_seconds, 11.0);
  ASSERT_EQ(report->rounds.size(), 1u);
  EXPECT_FALSE(report->rounds[0].committed);
  EXPECT_DOUBLE_EQ(report->rounds[0].duration_s, 10.0);
  EXPECT_EQ(report->rounds[0].reason, "still running");
  EXPECT_EQ(report->rounds[0].bytes_down, kModelBytes);
}

TEST_F(RunReportTest, AnUnknownRunIsNotFoundNamingIt) {
  TwoRoundRun();
  absl::StatusOr<RunReport> report = ReportFromStore(*store_, 77);
  ASSERT_EQ(report.status().code(), absl::StatusCode::kNotFound) << report.status();
  EXPECT_NE(report.status().message().find("77"), std::string::npos) << report.status();
}

TEST_F(RunReportTest, NewestRunIdIsTheLastRunAndNotFoundWithoutRuns) {
  EXPECT_EQ(NewestRunId(*store_).status().code(), absl::StatusCode::kNotFound);
  NewRun("first");
  const int64_t second = NewRun("second");
  absl::StatusOr<int64_t> newest = NewestRunId(*store_);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, second);
}

TEST_F(RunReportTest, ReadOnlyStoreGivesThePageWithTheAccuracyChart) {
  const int64_t run = TwoRoundRun();
  // As `fl report` reads a server's directory: read-only, beside the writer.
  absl::StatusOr<std::unique_ptr<Store>> reader = Store::OpenReadOnly(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<RunReport> report = ReportFromStore(**reader, run);
  ASSERT_TRUE(report.ok()) << report.status();
  const std::string html = RenderHtmlReport(*report);
  const size_t figure = html.find("<figure id=\"plot-accuracy\">");
  ASSERT_NE(figure, std::string::npos);
  const std::string accuracy = html.substr(figure, html.find("</figure>", figure) - figure);
  EXPECT_NE(accuracy.find(">test_accuracy</text>"), std::string::npos) << accuracy;
  EXPECT_EQ(accuracy.find("no data"), std::string::npos) << accuracy;
}

}  // namespace
}  // namespace fl::simulation
