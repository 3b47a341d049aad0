// The reports and client administration of `fl admin` (server/admin/admin.h), on a real store in
// a temporary directory, and the `fl admin` command itself.
#include "server/admin/admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fl/common/crypto.h"
#include "fl/common/model.h"
#include "fl/server/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fl::server::admin {

using ::testing::HasSubstr;

namespace {

// Fingerprint-shaped client ids (64 hex digits).
const std::string kAlice = "a11ce" + std::string(59, '1');
const std::string kBob = "b0b" + std::string(61, '2');
const std::string kDave = "dade" + std::string(60, '4');
constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr int64_t kYearMs = 365LL * 24 * 3600 * 1000;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

ParticipationRecord Participation(const RoundRecord& r, const std::string& client,
                                  ParticipationStatus status, const std::string& reason = "") {
  ParticipationRecord p;
  p.run_id = r.run_id;
  p.round = r.round;
  p.attempt = r.attempt;
  p.client_id = client;
  p.task_id = absl::StrCat("task-", r.round, "-", r.attempt, "-", client.substr(0, 4));
  p.status = status;
  p.num_examples = 100;
  p.reason = reason;
  return p;
}

// Runs `command` with sh and returns its exit code and what it wrote to stdout.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "admin_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string NewCheckpoint(float value) {
    Model model(ModelSpec({TensorSpec{"w", {2, 3}}}));
    for (float& x : model.data()) x = value;
    absl::StatusOr<std::string> sha = store_->WriteCheckpoint(model);
    EXPECT_TRUE(sha.ok()) << sha.status();
    return sha.value_or("");
  }

  // Populate's run, with round 2 attempt 0 (running since Populate) committed with DP: q 0.5,
  // epsilon 1.375, and `server` against the server (0: central DP).
  void PopulateWithDp(double server) {
    Populate();
    RoundRecord dp = Round(2, 0);
    dp.ended_at_ms = dp.started_at_ms + 100;
    dp.num_reported = 2;
    dp.checkpoint = NewCheckpoint(2.0f);
    dp.dp_sampling_rate = 0.5;
    dp.dp_epsilon = 1.375;
    dp.dp_epsilon_server = server;
    ASSERT_TRUE(store_->CommitRound(dp, {}).ok());
  }

  RoundRecord Round(int32_t round, int32_t attempt) {
    RoundRecord r;
    r.run_id = run_;
    r.round = round;
    r.attempt = attempt;
    r.started_at_ms = kNowMs + 1000 * round + 100 * attempt;
    r.num_sampled = 2;
    return r;
  }

  // Run "mnist" (3 rounds configured): round 1 attempt 0 failed (alice refused, bob dropped),
  // attempt 1 committed (both accepted); round 2 attempt 0 running (alice assigned); "carol"
  // took part in plaintext mode without being enrolled. Alice and Bob are enrolled, Dave is
  // revoked; Alice was seen a minute before kNowMs, Bob an hour before.
  void Populate() {
    RunRecord run;
    run.name = "mnist";
    run.config_json = R"({"num_rounds": 3, "seed": 7})";
    run.model_spec_json = "[]";
    run.initial_checkpoint = NewCheckpoint(0.0f);
    run.created_at_ms = kNowMs;
    absl::StatusOr<int64_t> id = store_->CreateRun(run);
    ASSERT_TRUE(id.ok()) << id.status();
    run_ = *id;
    for (const auto& [client, name] :
         {std::pair{kAlice, "alice"}, std::pair{kBob, "bob"}, std::pair{kDave, "dave"}}) {
      ASSERT_TRUE(store_->EnrollClient(client, name, kNowMs).ok());
    }
    ASSERT_TRUE(store_->RevokeClient(kDave, kNowMs + 10).ok());
    ASSERT_TRUE(store_->SetClientCertificateExpiry(kAlice, kNowMs + kYearMs).ok());
    ASSERT_TRUE(store_->TouchClient(kAlice, kNowMs + 10'000 - 60'000).ok());
    ASSERT_TRUE(store_->TouchClient(kBob, kNowMs + 10'000 - 3'600'000).ok());

    RoundRecord failed = Round(1, 0);
    ASSERT_TRUE(store_->BeginRound(failed).ok());
    ASSERT_TRUE(
        store_
            ->RecordParticipation(Participation(failed, kAlice, ParticipationStatus::kRefused,
                                                "=HYPERLINK(\"x\")\nNaN in 'w'"))
            .ok());
    ASSERT_TRUE(
        store_->RecordParticipation(Participation(failed, kBob, ParticipationStatus::kDropped))
            .ok());
    ASSERT_TRUE(
        store_->RecordParticipation(Participation(failed, "carol", ParticipationStatus::kAccepted))
            .ok());
    ASSERT_TRUE(store_
                    ->EndRound(run_, 1, 0, RoundStatus::kFailed,
                               "too few updates, 1 of 2\n\x1b[31mred", failed.started_at_ms + 500)
                    .ok());

    RoundRecord committed = Round(1, 1);
    ASSERT_TRUE(store_->BeginRound(committed).ok());
    committed.ended_at_ms = committed.started_at_ms + 250;
    committed.num_reported = 2;
    committed.checkpoint = NewCheckpoint(1.0f);
    committed.metrics_json = R"({"train_loss": 0.5, "test_accuracy": 0.8125})";
    ASSERT_TRUE(store_
                    ->CommitRound(committed,
                                  {Participation(committed, kAlice, ParticipationStatus::kAccepted),
                                   Participation(committed, kBob, ParticipationStatus::kAccepted)})
                    .ok());
    ASSERT_TRUE(store_
                    ->RecordEvaluation(run_, 1, "server", 0.55, 0.8125, 10000,
                                       committed.ended_at_ms, {{"accuracy", 0.8125}})
                    .ok());

    RoundRecord running = Round(2, 0);
    ASSERT_TRUE(store_->BeginRound(running).ok());
    ASSERT_TRUE(
        store_->RecordParticipation(Participation(running, kAlice, ParticipationStatus::kAssigned))
            .ok());

    for (int i = 1; i <= 3; ++i) {
      AuditRecord record;
      record.at_ms = kNowMs + i;
      record.client_id = i == 2 ? "" : kAlice;
      record.event = i == 2 ? "tls_handshake_refused" : "update_refused";
      record.detail = absl::StrCat("reason ", i, i == 3 ? ", with a comma" : "");
      record.run_id = run_;
      record.round = 1;
      ASSERT_TRUE(store_->Audit(record).ok());
    }
  }

  std::unique_ptr<Store> OpenReadOnly() {
    absl::StatusOr<std::unique_ptr<Store>> ro = Store::OpenReadOnly(dir_);
    EXPECT_TRUE(ro.ok()) << ro.status();
    return ro.ok() ? *std::move(ro) : nullptr;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
  int64_t run_ = 0;
};

TEST(AdminFormatTest, ParseFormat) {
  EXPECT_EQ(*ParseFormat("table"), Format::kTable);
  EXPECT_EQ(*ParseFormat("csv"), Format::kCsv);
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  absl::StatusOr<Format> bad = ParseFormat("xml");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "table, csv or json")) << bad.status();
}

TEST_F(AdminTest, RoundsTableHasTheHeaderAndOneEscapedRowPerAttempt) {
  Populate();
  std::unique_ptr<Store> ro = OpenReadOnly();
  ASSERT_NE(ro, nullptr);
  absl::StatusOr<std::string> table = RoundsReport(*ro, std::nullopt, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_EQ(lines.size(), 5u) << *table;  // title, header, three attempts
  EXPECT_EQ(lines[0], absl::StrCat("Run ", run_, " 'mnist' (running), 3 attempts"));
  for (const char* column :
       {"ROUND", "ATTEMPT", "STATUS", "SAMPLED", "REPORTED", "DURATION_MS", "METRICS", "REASON"}) {
    EXPECT_TRUE(absl::StrContains(lines[1], column)) << lines[1];
  }
  EXPECT_TRUE(absl::StartsWith(lines[2], "1      0        failed")) << lines[2];
  // The reason's newline and escape sequence are shown, not obeyed.
  EXPECT_TRUE(absl::StrContains(lines[2], "too few updates, 1 of 2\\n\\x1b[31mred")) << lines[2];
  EXPECT_TRUE(absl::StartsWith(lines[3], "1      1        committed")) << lines[3];
  EXPECT_TRUE(absl::StrContains(lines[3], "250")) << lines[3];
  EXPECT_TRUE(absl::StrContains(lines[3], "test_accuracy=0.8125 train_loss=0.5")) << lines[3];
  EXPECT_TRUE(absl::StartsWith(lines[4], "2      0        running")) << lines[4];
  // Columns line up: every row's STATUS starts where the header's does.
  const size_t status_column = lines[1].find("STATUS");
  for (size_t i = 2; i < lines.size(); ++i) {
    EXPECT_NE(lines[i][status_column], ' ') << lines[i];
    EXPECT_EQ(lines[i][status_column - 1], ' ') << lines[i];
  }
}

TEST_F(AdminTest, RoundsCsvHasTheStableHeaderAndOneRowPerAttempt) {
  Populate();
  absl::StatusOr<std::string> csv = RoundsReport(*store_, run_, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  // Header, three attempts, and one more line: round 1's reason holds a (quoted) newline.
  std::vector<std::string> lines = Lines(*csv);
  ASSERT_EQ(lines.size(), 5u) << *csv;
  EXPECT_EQ(lines[0],
            "run_id,round,attempt,status,started_at_ms,ended_at_ms,duration_ms,num_sampled,"
            "num_reported,checkpoint,reason,metric_test_accuracy,metric_train_loss");
  const std::string failed = lines[1];
  EXPECT_TRUE(absl::StartsWith(
      failed, absl::StrCat(run_, ",1,0,failed,", kNowMs + 1000, ",", kNowMs + 1500, ",500,2,0,,")))
      << failed;
  // A reason with a comma and a newline is quoted (and so spans two physical lines).
  EXPECT_TRUE(absl::StrContains(*csv, "\"too few updates, 1 of 2\n\x1b[31mred\",,")) << *csv;
  EXPECT_TRUE(absl::StrContains(lines[3], ",0.8125,0.5")) << lines[3];
  // The running attempt has no duration and no metrics.
  EXPECT_EQ(lines[4], absl::StrCat(run_, ",2,0,running,", kNowMs + 2000, ",0,,2,0,,,,"));
}

TEST_F(AdminTest, RoundsJsonParsesAndHasTheFields) {
  Populate();
  absl::StatusOr<std::string> text = RoundsReport(*store_, std::nullopt, Format::kJson);
  ASSERT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << *text;
  EXPECT_EQ(j["run"]["run_id"], run_);
  EXPECT_EQ(j["run"]["name"], "mnist");
  EXPECT_EQ(j["run"]["status"], "running");
  ASSERT_EQ(j["rounds"].size(), 3u);
  const nlohmann::json& committed = j["rounds"][1];
  for (const char* field :
       {"run_id", "round", "attempt", "status", "started_at_ms", "ended_at_ms", "duration_ms",
        "num_sampled", "num_reported", "checkpoint", "reason", "metrics"}) {
    EXPECT_TRUE(committed.contains(field)) << field;
  }
  EXPECT_EQ(committed["status"], "committed");
  EXPECT_EQ(committed["attempt"], 1);
  EXPECT_EQ(committed["duration_ms"], 250);
  EXPECT_EQ(committed["checkpoint"].get<std::string>().size(), 64u);
  EXPECT_DOUBLE_EQ(committed["metrics"]["test_accuracy"].get<double>(), 0.8125);
  EXPECT_TRUE(j["rounds"][2]["duration_ms"].is_null());
  EXPECT_TRUE(j["rounds"][2]["metrics"].empty());
  EXPECT_EQ(j["rounds"][0]["reason"], "too few updates, 1 of 2\n\x1b[31mred");
  ASSERT_EQ(j["evaluations"].size(), 1u);
  EXPECT_EQ(j["evaluations"][0]["round"], 1);
  EXPECT_DOUBLE_EQ(j["evaluations"][0]["loss"].get<double>(), 0.55);
  EXPECT_EQ(j["evaluations"][0]["num_examples"], 10000);
  EXPECT_EQ(j["evaluations"][0]["metrics"], nlohmann::json({{"accuracy", 0.8125}}));
}

// A federated evaluation of round 1 with a metric beyond accuracy: the table gains an EVALUATION
// column, the CSV "eval_<name>" columns, JSON a metrics object; only the committed attempt of
// the evaluated round carries the values.
TEST_F(AdminTest, RoundsReportsShowEveryFederatedEvaluationMetric) {
  Populate();
  ASSERT_TRUE(store_
                  ->RecordEvaluation(run_, 1, "federated", 0.42, 0.875, 500, kNowMs + 1300,
                                     {{"accuracy", 0.875}, {"auc", 0.9125}})
                  .ok());
  absl::StatusOr<std::string> table = RoundsReport(*store_, run_, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_EQ(lines.size(), 5u) << *table;
  const size_t eval_column = lines[1].find("EVALUATION");
  ASSERT_NE(eval_column, std::string::npos) << lines[1];
  EXPECT_LT(eval_column, lines[1].find("REASON")) << lines[1];
  EXPECT_TRUE(absl::StartsWith(lines[3].substr(eval_column), "accuracy=0.875 auc=0.9125 loss=0.42"))
      << lines[3];
  EXPECT_TRUE(absl::StartsWith(lines[2].substr(eval_column), "-  ")) << lines[2];  // failed
  EXPECT_EQ(lines[4].substr(eval_column), "-") << lines[4];  // round 2, running, no reason

  absl::StatusOr<std::string> csv = RoundsReport(*store_, run_, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  lines = Lines(*csv);
  ASSERT_EQ(lines.size(), 5u) << *csv;
  EXPECT_EQ(lines[0],
            "run_id,round,attempt,status,started_at_ms,ended_at_ms,duration_ms,num_sampled,"
            "num_reported,checkpoint,reason,metric_test_accuracy,metric_train_loss,"
            "eval_accuracy,eval_auc,eval_loss");
  EXPECT_TRUE(absl::EndsWith(lines[3], ",0.8125,0.5,0.875,0.9125,0.42")) << lines[3];
  EXPECT_TRUE(absl::EndsWith(lines[2], "red\",,,,,")) << lines[2];  // failed: no evaluation
  EXPECT_EQ(lines[4], absl::StrCat(run_, ",2,0,running,", kNowMs + 2000, ",0,,2,0,,,,,,,"));

  absl::StatusOr<std::string> text = RoundsReport(*store_, run_, Format::kJson);
  ASSERT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(*text);
  ASSERT_EQ(j["evaluations"].size(), 2u);
  const nlohmann::json& federated = j["evaluations"][1];
  EXPECT_EQ(federated["source"], "federated");
  EXPECT_EQ(federated["num_examples"], 500);
  EXPECT_DOUBLE_EQ(federated["accuracy"].get<double>(), 0.875);
  EXPECT_EQ(federated["metrics"], nlohmann::json({{"accuracy", 0.875}, {"auc", 0.9125}}));
}

// A run with differential privacy: the epsilon spent up to each committed round is shown in
// every format; the rounds without it show none.
// fl admin evals: the sites' mean and each site's own row, by the site's name, in every format.
TEST_F(AdminTest, EvalsReportListsEachSitesEvaluationBesideTheMean) {
  Populate();
  ASSERT_TRUE(store_
                  ->RecordEvaluation(run_, 1, "federated", 0.5, 0.75, 300, kNowMs + 1300,
                                     {{"accuracy", 0.75}})
                  .ok());
  ASSERT_TRUE(store_
                  ->RecordEvaluation(run_, 1, absl::StrCat(kSiteEvaluationSource, kAlice), 0.25,
                                     0.9, 100, kNowMs + 1300, {{"accuracy", 0.9}})
                  .ok());
  ASSERT_TRUE(store_
                  ->RecordEvaluation(run_, 1, absl::StrCat(kSiteEvaluationSource, kBob), 0.625,
                                     0.675, 200, kNowMs + 1300, {{"accuracy", 0.675}})
                  .ok());
  absl::StatusOr<std::string> table = EvalsReport(*store_, run_, 1, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_EQ(lines.size(), 6u) << *table;  // run line, header, server, federated, alice, bob
  EXPECT_THAT(lines[1], HasSubstr("ROUND  SOURCE"));
  EXPECT_THAT(lines[3], HasSubstr("federated"));
  EXPECT_THAT(lines[4], HasSubstr("site:alice"));
  EXPECT_THAT(lines[4], HasSubstr("accuracy=0.9"));
  EXPECT_THAT(lines[5], HasSubstr("site:bob"));

  absl::StatusOr<std::string> json = EvalsReport(*store_, run_, std::nullopt, Format::kJson);
  ASSERT_TRUE(json.ok()) << json.status();
  nlohmann::json rows = nlohmann::json::parse(*json);
  ASSERT_EQ(rows.size(), 4u);  // Populate's server evaluation first
  EXPECT_EQ(rows[2]["client_id"], kAlice);
  EXPECT_EQ(rows[2]["source"], "site:alice");
  EXPECT_EQ(rows[2]["num_examples"], 100);
  absl::StatusOr<std::string> csv = EvalsReport(*store_, run_, 1, Format::kCsv);
  ASSERT_TRUE(csv.ok());
  EXPECT_EQ(Lines(*csv)[0], "run_id,round,source,client_id,num_examples,loss,metrics_json,at_ms");

  absl::Status none = EvalsReport(*store_, run_, 2, Format::kTable).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.message(), HasSubstr("has no evaluation of round 2"));
}

TEST_F(AdminTest, RoundsReportsShowTheEpsilonSpentWithDifferentialPrivacy) {
  PopulateWithDp(0);

  absl::StatusOr<std::string> table = RoundsReport(*store_, run_, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_GE(lines.size(), 5u) << *table;
  const size_t column = lines[1].find("EPSILON");
  ASSERT_NE(column, std::string::npos) << lines[1];
  EXPECT_EQ(lines[3].substr(column, 1), "-") << *table;  // round 1, committed without DP
  EXPECT_EQ(lines[4].substr(column, 5), "1.375") << *table;

  absl::StatusOr<std::string> csv = RoundsReport(*store_, run_, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_TRUE(absl::StrContains(Lines(*csv)[0], ",reason,dp_sampling_rate,dp_epsilon,")) << *csv;
  EXPECT_TRUE(absl::StrContains(*csv, ",0.5,1.375,")) << *csv;

  absl::StatusOr<std::string> json = RoundsReport(*store_, run_, Format::kJson);
  ASSERT_TRUE(json.ok()) << json.status();
  nlohmann::json j = nlohmann::json::parse(*json);
  ASSERT_EQ(j["rounds"].size(), 3u);
  EXPECT_FALSE(j["rounds"][1].contains("dp_epsilon"));
  EXPECT_EQ(j["rounds"][2]["dp_epsilon"], 1.375);
  EXPECT_EQ(j["rounds"][2]["dp_sampling_rate"], 0.5);
  EXPECT_FALSE(j["rounds"][2].contains("dp_epsilon_server"));
  EXPECT_EQ(lines[1].find("EPS_SERVER"), std::string::npos) << "only with distributed DP";
}

// With distributed DP a round also records the most exposed site's epsilon against the server.
TEST_F(AdminTest, RoundsReportsShowTheEpsilonAgainstTheServerWithDistributedDp) {
  PopulateWithDp(4.25);

  absl::StatusOr<std::string> table = RoundsReport(*store_, run_, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_GE(lines.size(), 5u) << *table;
  const size_t column = lines[1].find("EPS_SERVER");
  ASSERT_NE(column, std::string::npos) << lines[1];
  EXPECT_EQ(lines[3].substr(column, 1), "-") << *table;
  EXPECT_EQ(lines[4].substr(column, 4), "4.25") << *table;
  absl::StatusOr<std::string> csv = RoundsReport(*store_, run_, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_TRUE(absl::StrContains(Lines(*csv)[0], ",dp_epsilon,dp_epsilon_server,")) << *csv;
  EXPECT_TRUE(absl::StrContains(*csv, ",0.5,1.375,4.25,")) << *csv;
  absl::StatusOr<std::string> json = RoundsReport(*store_, run_, Format::kJson);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(nlohmann::json::parse(*json)["rounds"][2]["dp_epsilon_server"], 4.25);
}

// A round with secure aggregation: the clients left after each stage are shown, and the JSON
// report carries the round's whole secure-aggregation record.
TEST_F(AdminTest, RoundsReportsShowWhoTookPartInEachSecureStage) {
  Populate();
  RoundRecord secure = Round(2, 0);
  secure.ended_at_ms = secure.started_at_ms + 100;
  secure.num_reported = 9;
  secure.checkpoint = NewCheckpoint(2.0f);
  secure.secagg_json = R"({"params":{"n":10,"k":9,"t":5},"u1":10,"u2":10,"u3":9,"u4":9})";
  ASSERT_TRUE(store_->CommitRound(secure, {}).ok());
  // A round with the consistency stage: the survivors that signed, between U3 and U4.
  RoundRecord signed_round = Round(3, 0);
  signed_round.ended_at_ms = signed_round.started_at_ms + 100;
  signed_round.num_reported = 9;
  signed_round.checkpoint = NewCheckpoint(3.0f);
  signed_round.secagg_json =
      R"({"params":{"n":10,"k":9,"t":5},"u1":10,"u2":10,"u3":9,"signed":8,"u4":8})";
  ASSERT_TRUE(store_->BeginRound(signed_round).ok());
  absl::Status committed = store_->CommitRound(signed_round, {});
  ASSERT_TRUE(committed.ok()) << committed;

  absl::StatusOr<std::string> table = RoundsReport(*store_, run_, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_GE(lines.size(), 6u) << *table;
  const size_t column = lines[1].find("SECAGG_U1>U2>U3>SIGNED>U4");
  ASSERT_NE(column, std::string::npos) << lines[1];
  EXPECT_EQ(lines[3].substr(column, 1), "-") << *table;       // round 1, a plain round
  EXPECT_EQ(lines[4].substr(column), "10>10>9>9") << *table;  // recorded before the signatures
  EXPECT_EQ(lines[5].substr(column), "10>10>9>8>8") << *table;

  absl::StatusOr<std::string> csv = RoundsReport(*store_, run_, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_TRUE(absl::StrContains(Lines(*csv)[0], ",secagg_u1_u2_u3_signed_u4")) << *csv;
  EXPECT_TRUE(absl::StrContains(*csv, ",10>10>9>8>8")) << *csv;
  EXPECT_TRUE(absl::StrContains(*csv, ",10>10>9>9")) << *csv;

  absl::StatusOr<std::string> json = RoundsReport(*store_, run_, Format::kJson);
  ASSERT_TRUE(json.ok()) << json.status();
  nlohmann::json j = nlohmann::json::parse(*json);
  ASSERT_EQ(j["rounds"].size(), 4u);
  EXPECT_FALSE(j["rounds"][1].contains("secure_aggregation"));
  EXPECT_EQ(j["rounds"][2]["secure_aggregation"]["u3"], 9);
  EXPECT_EQ(j["rounds"][2]["secure_aggregation"]["params"]["k"], 9);
  EXPECT_EQ(j["rounds"][3]["secure_aggregation"]["signed"], 8);
}

TEST_F(AdminTest, RoundsOfAnUnknownRunOrAnEmptyStoreAreNotFound) {
  absl::StatusOr<std::string> none = RoundsReport(*store_, std::nullopt, Format::kTable);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), "no run yet")) << none.status();
  Populate();
  EXPECT_EQ(RoundsReport(*store_, run_ + 1, Format::kCsv).status().code(),
            absl::StatusCode::kNotFound);
  // The default is the newest run.
  RunRecord second;
  second.name = "second";
  second.config_json = "{}";
  absl::StatusOr<int64_t> id = store_->CreateRun(second);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(ResolveRun(*store_, std::nullopt)->run_id, *id);
  EXPECT_EQ(ResolveRun(*store_, run_)->name, "mnist");
  EXPECT_EQ(Lines(*RoundsReport(*store_, std::nullopt, Format::kCsv)).size(), 1u);
}

TEST_F(AdminTest, StatusReportSummarisesRunsAndClients) {
  Populate();
  absl::StatusOr<std::string> report = StatusReport(*store_, kNowMs + 10'000);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(absl::StrContains(*report, store_->db_path())) << *report;
  std::vector<std::string> lines = Lines(*report);
  auto run_line = std::find_if(lines.begin(), lines.end(),
                               [](const std::string& l) { return absl::StrContains(l, "mnist"); });
  ASSERT_NE(run_line, lines.end()) << *report;
  EXPECT_TRUE(absl::StrContains(*run_line, "running")) << *run_line;
  EXPECT_TRUE(absl::StrContains(*run_line, " 1/3 ")) << *run_line;  // committed of configured
  EXPECT_TRUE(absl::StrContains(*run_line, "round 2 running")) << *run_line;
  EXPECT_TRUE(absl::StrContains(*run_line, "test_accuracy=0.8125 train_loss=0.5")) << *run_line;
  EXPECT_TRUE(
      absl::StrContains(*report, "Clients: 2 enrolled, 1 revoked, 1 seen in the last 5 minutes"))
      << *report;
}

// `fl admin status --format json|csv`: the same facts for a script.
TEST_F(AdminTest, StatusReportInJsonAndCsv) {
  Populate();
  absl::StatusOr<std::string> json = StatusReport(*store_, kNowMs + 10'000, Format::kJson);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json j = nlohmann::json::parse(*json);
  EXPECT_EQ(j.at("database"), store_->db_path());
  ASSERT_EQ(j.at("runs").size(), 1u);
  const nlohmann::json& run = j.at("runs")[0];
  EXPECT_EQ(run.at("name"), "mnist");
  EXPECT_EQ(run.at("status"), "running");
  EXPECT_EQ(run.at("rounds_committed"), 1);
  EXPECT_EQ(run.at("rounds_configured"), 3);
  EXPECT_EQ(run.at("last_attempt").at("round"), 2);
  EXPECT_EQ(run.at("last_attempt").at("status"), "running");
  EXPECT_DOUBLE_EQ(run.at("last_metrics").at("test_accuracy").get<double>(), 0.8125);
  EXPECT_EQ(j.at("clients").at("enrolled"), 2);
  EXPECT_EQ(j.at("clients").at("revoked"), 1);
  EXPECT_EQ(j.at("clients").at("seen_recently"), 1);

  absl::StatusOr<std::string> csv = StatusReport(*store_, kNowMs + 10'000, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  std::vector<std::string> lines = Lines(*csv);
  ASSERT_EQ(lines.size(), 2u) << *csv;
  EXPECT_TRUE(absl::StartsWith(lines[0], "run_id,name,status,")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], ",mnist,running,")) << lines[1];
  EXPECT_TRUE(absl::EndsWith(lines[1], ",2,1,1")) << lines[1];
}

TEST_F(AdminTest, ClientsReportCountsParticipationsInEveryFormat) {
  Populate();
  absl::StatusOr<std::string> table = ClientsReport(*store_, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_EQ(lines.size(), 5u) << *table;  // header, alice, bob, dave, carol
  EXPECT_TRUE(absl::StartsWith(lines[0], "CLIENT")) << lines[0];
  EXPECT_TRUE(absl::StartsWith(lines[1], kAlice.substr(0, kTableIdDigits) + "  alice  enrolled"))
      << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[3], "dave   revoked")) << lines[3];
  EXPECT_TRUE(absl::StrContains(lines[3], "never")) << lines[3];
  EXPECT_TRUE(absl::StartsWith(lines[4], "carol")) << lines[4];
  EXPECT_TRUE(absl::StrContains(lines[4], "not_enrolled")) << lines[4];
  EXPECT_TRUE(absl::EndsWith(lines[1], "2024-11-13 22:13:20Z")) << lines[1];

  absl::StatusOr<std::string> csv = ClientsReport(*store_, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  lines = Lines(*csv);
  ASSERT_EQ(lines.size(), 5u) << *csv;
  EXPECT_EQ(lines[0],
            "client_id,name,status,enrolled_at_ms,revoked_at_ms,last_seen_ms,assigned,accepted,"
            "refused,dropped,last_round_started_ms,cert_not_after_ms");
  // alice: accepted in 1.1, refused in 1.0, assigned in 2.0 (started at kNowMs + 2000); her
  // certificate expires in a year; bob's expiry is not known.
  EXPECT_EQ(lines[1], absl::StrCat(kAlice, ",alice,enrolled,", kNowMs, ",0,", kNowMs - 50'000,
                                   ",1,1,1,0,", kNowMs + 2000, ",", kNowMs + kYearMs));
  EXPECT_EQ(lines[2], absl::StrCat(kBob, ",bob,enrolled,", kNowMs, ",0,", kNowMs - 3'590'000,
                                   ",0,1,0,1,", kNowMs + 1100, ",0"));

  absl::StatusOr<std::string> text = ClientsReport(*store_, Format::kJson);
  ASSERT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_TRUE(j.is_array()) << *text;
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0]["client_id"], kAlice);
  EXPECT_EQ(j[0]["refused"], 1);
  EXPECT_EQ(j[2]["status"], "revoked");
  EXPECT_EQ(j[2]["revoked_at_ms"], kNowMs + 10);
  EXPECT_EQ(j[3]["client_id"], "carol");
  EXPECT_EQ(j[3]["status"], "not_enrolled");
  EXPECT_EQ(j[3]["accepted"], 1);
}

TEST_F(AdminTest, AuditReportInEveryFormat) {
  Populate();
  absl::StatusOr<std::string> table = AuditReport(*store_, 2, Format::kTable);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<std::string> lines = Lines(*table);
  ASSERT_EQ(lines.size(), 3u) << *table;
  EXPECT_TRUE(absl::StartsWith(lines[0], "ID  TIME")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "tls_handshake_refused")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[1], "2023-11-14 22:13:20Z")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[2], kAlice.substr(0, kTableIdDigits) + "  " +
                                              absl::StrCat(run_) + "    1      reason 3"))
      << lines[2];

  absl::StatusOr<std::string> csv = AuditReport(*store_, 10, Format::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  lines = Lines(*csv);
  ASSERT_EQ(lines.size(), 4u) << *csv;
  EXPECT_EQ(lines[0], "id,at_ms,event,client_id,run_id,round,detail");
  EXPECT_TRUE(absl::EndsWith(lines[3], ",\"reason 3, with a comma\"")) << lines[3];

  absl::StatusOr<std::string> text = AuditReport(*store_, 10, Format::kJson);
  ASSERT_TRUE(text.ok()) << text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_TRUE(j.is_array() && j.size() == 3u) << *text;
  EXPECT_EQ(j[0]["event"], "update_refused");
  EXPECT_EQ(j[1]["client_id"], "");
  EXPECT_EQ(j[2]["at_ms"], kNowMs + 3);
  EXPECT_EQ(AuditReport(*store_, -1, Format::kCsv).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AdminTest, CsvCellsThatLookLikeFormulasAreDefused) {
  Populate();
  absl::StatusOr<std::string> csv = ClientsReport(*store_, Format::kCsv);
  ASSERT_TRUE(csv.ok());
  ASSERT_TRUE(store_->EnrollClient(std::string(64, 'e'), "=cmd|' /C calc'!A0", kNowMs + 1).ok());
  csv = ClientsReport(*store_, Format::kCsv);
  ASSERT_TRUE(csv.ok());
  EXPECT_TRUE(absl::StrContains(*csv, ",'=cmd|' /C calc'!A0,")) << *csv;
}

TEST_F(AdminTest, FindClientResolvesUniquePrefixesOnly) {
  const std::string a = "abcdef00" + std::string(56, '1');
  const std::string b = "abcdef00" + std::string(56, '2');
  const std::string c = "12345678" + std::string(56, '3');
  ASSERT_TRUE(store_->EnrollClient(a, "site-a", 1).ok());
  ASSERT_TRUE(store_->EnrollClient(b, "site-b", 2).ok());
  ASSERT_TRUE(store_->EnrollClient(c, "site-c", 3).ok());

  EXPECT_EQ(FindClient(*store_, "abcdef001")->client_id, a);
  EXPECT_EQ(FindClient(*store_, "ABCDEF00:2")->client_id, b);  // case and colons ignored
  EXPECT_EQ(FindClient(*store_, "12345678")->name, "site-c");
  EXPECT_EQ(FindClient(*store_, c)->client_id, c);

  absl::StatusOr<ClientRecord> ambiguous = FindClient(*store_, "abcdef00");
  EXPECT_EQ(ambiguous.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(ambiguous.status().message(), "ambiguous")) << ambiguous.status();
  EXPECT_TRUE(absl::StrContains(ambiguous.status().message(), "site-a")) << ambiguous.status();
  EXPECT_TRUE(absl::StrContains(ambiguous.status().message(), "site-b")) << ambiguous.status();

  absl::StatusOr<ClientRecord> unknown = FindClient(*store_, "ffffffff");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "ffffffff")) << unknown.status();

  absl::StatusOr<ClientRecord> short_prefix = FindClient(*store_, "abcdef0");
  EXPECT_EQ(short_prefix.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(short_prefix.status().message(), "at least") ||
              absl::StrContains(short_prefix.status().message(), "between"))
      << short_prefix.status();
  absl::StatusOr<ClientRecord> no_name = FindClient(*store_, "site-a-x");
  EXPECT_EQ(no_name.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(no_name.status().message(), "no client is named 'site-a-x'"))
      << no_name.status();
  EXPECT_EQ(FindClient(*store_, a + "0").status().code(), absl::StatusCode::kInvalidArgument);
}

// `fl admin revoke site-2`: a site's name finds it, unless another site has the same name.
TEST_F(AdminTest, FindClientTakesASitesNameWhenItIsUnique) {
  const std::string a = "abcdef00" + std::string(56, '1');
  const std::string b = "abcdef00" + std::string(56, '2');
  const std::string c = "12345678" + std::string(56, '3');
  ASSERT_TRUE(store_->EnrollClient(a, "site-a", 1).ok());
  ASSERT_TRUE(store_->EnrollClient(b, "twin", 2).ok());
  ASSERT_TRUE(store_->EnrollClient(c, "twin", 3).ok());
  EXPECT_EQ(FindClient(*store_, "site-a")->client_id, a);

  absl::StatusOr<ClientRecord> twins = FindClient(*store_, "twin");
  EXPECT_EQ(twins.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(twins.status().message(), "the name 'twin' is ambiguous"))
      << twins.status();
  EXPECT_TRUE(absl::StrContains(twins.status().message(), "give the fingerprint"))
      << twins.status();

  // A name that is also hex: a fingerprint prefix wins; a short one is taken as a name.
  const std::string d = "cafebabe" + std::string(56, '4');
  ASSERT_TRUE(store_->EnrollClient(d, "12345678", 4).ok());
  EXPECT_EQ(FindClient(*store_, "12345678")->client_id, c);
  ASSERT_TRUE(store_->EnrollClient(std::string(64, '5'), "beef", 5).ok());
  EXPECT_EQ(FindClient(*store_, "beef")->name, "beef");

  absl::StatusOr<Revocation> revoked = RevokeClient(*store_, "site-a", "operator", 10);
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_EQ(revoked->client.client_id, a);
  EXPECT_FALSE(*store_->IsEnrolled(a));
}

TEST_F(AdminTest, RevokeByPrefixAuditsOnceAndRefusesAmbiguity) {
  const std::string a = "abcdef00" + std::string(56, '1');
  const std::string b = "abcdef00" + std::string(56, '2');
  ASSERT_TRUE(store_->EnrollClient(a, "site-a", 1).ok());
  ASSERT_TRUE(store_->EnrollClient(b, "site-b", 2).ok());

  absl::StatusOr<Revocation> ambiguous = RevokeClient(*store_, "abcdef00", "op@host", 10);
  EXPECT_EQ(ambiguous.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RevokeClient(*store_, "99999999", "op@host", 10).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(*store_->IsEnrolled(a));
  EXPECT_TRUE(*store_->IsEnrolled(b));
  EXPECT_TRUE(store_->AuditLog(10)->empty());

  absl::StatusOr<Revocation> revoked = RevokeClient(*store_, "abcdef001111", "op@host", 10);
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_FALSE(revoked->already_revoked);
  EXPECT_EQ(revoked->client.client_id, a);
  EXPECT_FALSE(*store_->IsEnrolled(a));
  EXPECT_TRUE(*store_->IsEnrolled(b));
  std::vector<AuditRecord> log = *store_->AuditLog(10);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].event, "client_revoked");
  EXPECT_EQ(log[0].client_id, a);
  EXPECT_EQ(log[0].at_ms, 10);
  EXPECT_TRUE(absl::StrContains(log[0].detail, "site-a")) << log[0].detail;
  EXPECT_TRUE(absl::StrContains(log[0].detail, "op@host")) << log[0].detail;

  // Again (by the full fingerprint): nothing changes and nothing is audited.
  revoked = RevokeClient(*store_, a, "op@host", 20);
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_TRUE(revoked->already_revoked);
  EXPECT_EQ(revoked->client.revoked_at_ms, 10);
  EXPECT_EQ(store_->AuditLog(10)->size(), 1u);

  std::unique_ptr<Store> ro = OpenReadOnly();
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(RevokeClient(*ro, b, "op@host", 30).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(*store_->IsEnrolled(b));
}

TEST_F(AdminTest, EnrollChecksTheCertificateAgainstTheFederationCa) {
  absl::StatusOr<CertAndKey> ca = MakeCertificateAuthority("federation CA", 30);
  absl::StatusOr<CertAndKey> foreign_ca = MakeCertificateAuthority("someone else's CA", 30);
  ASSERT_TRUE(ca.ok() && foreign_ca.ok());
  absl::StatusOr<CertAndKey> site = MakeClientCertificate(*ca, "hospital-a", 30);
  absl::StatusOr<CertAndKey> foreign = MakeClientCertificate(*foreign_ca, "intruder", 30);
  absl::StatusOr<CertAndKey> server = MakeServerCertificate(*ca, "server", {"localhost"}, 30);
  ASSERT_TRUE(site.ok() && foreign.ok() && server.ok());

  absl::StatusOr<Enrollment> refused =
      EnrollCertificate(*store_, foreign->cert_pem, ca->cert_pem, "", "op@host", kNowMs);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "not signed by this federation's CA"))
      << refused.status();
  EXPECT_EQ(EnrollCertificate(*store_, server->cert_pem, ca->cert_pem, "", "op@host", kNowMs)
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);  // not for client authentication
  EXPECT_EQ(EnrollCertificate(*store_, site->key_pem, ca->cert_pem, "", "op@host", kNowMs)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // a key, not a certificate
  EXPECT_EQ(
      EnrollCertificate(*store_, site->cert_pem, "junk", "", "op@host", kNowMs).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->Clients()->empty());
  EXPECT_TRUE(store_->AuditLog(10)->empty());

  absl::StatusOr<Enrollment> enrolled =
      EnrollCertificate(*store_, site->cert_pem, ca->cert_pem, "", "op@host", kNowMs);
  ASSERT_TRUE(enrolled.ok()) << enrolled.status();
  EXPECT_TRUE(enrolled->changed);
  EXPECT_EQ(enrolled->client_id, *CertificateFingerprint(site->cert_pem));
  EXPECT_EQ(enrolled->name, "hospital-a");  // the common name
  EXPECT_TRUE(*store_->IsEnrolled(enrolled->client_id));
  std::vector<AuditRecord> log = *store_->AuditLog(10);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].event, "client_enrolled");
  EXPECT_EQ(log[0].client_id, enrolled->client_id);
  EXPECT_TRUE(absl::StrContains(log[0].detail, "hospital-a")) << log[0].detail;
  EXPECT_TRUE(absl::StrContains(log[0].detail, "op@host")) << log[0].detail;

  // The same again changes nothing; a new name is a change.
  enrolled = EnrollCertificate(*store_, site->cert_pem, ca->cert_pem, "", "op@host", kNowMs + 1);
  ASSERT_TRUE(enrolled.ok());
  EXPECT_FALSE(enrolled->changed);
  EXPECT_EQ(store_->AuditLog(10)->size(), 1u);
  enrolled =
      EnrollCertificate(*store_, site->cert_pem, ca->cert_pem, "site A", "op@host", kNowMs + 2);
  ASSERT_TRUE(enrolled.ok());
  EXPECT_TRUE(enrolled->changed);
  EXPECT_EQ(store_->Clients()->at(0).name, "site A");
  EXPECT_EQ(store_->AuditLog(10)->size(), 2u);

  std::unique_ptr<Store> ro = OpenReadOnly();
  ASSERT_NE(ro, nullptr);
  absl::StatusOr<CertAndKey> other = MakeClientCertificate(*ca, "hospital-b", 30);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(
      EnrollCertificate(*ro, other->cert_pem, ca->cert_pem, "", "op@host", kNowMs).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(AdminTest, ReadOnlyReportsWhileAnotherStoreWrites) {
  EXPECT_EQ(Store::OpenReadOnly(dir_ + "/missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing"));

  Populate();
  std::unique_ptr<Store> ro = OpenReadOnly();
  ASSERT_NE(ro, nullptr);
  const std::string sha = NewCheckpoint(2.0f);
  std::atomic<bool> done = false;
  // A second read-write store on the same directory, as the server would be.
  absl::StatusOr<std::unique_ptr<Store>> writer_store =
      Store::Open(dir_, StoreOpenOptions{.remove_stale_temp_files = false});
  ASSERT_TRUE(writer_store.ok()) << writer_store.status();
  std::thread writer([&] {
    Store& w = **writer_store;
    for (int32_t round = 3; round <= 40; ++round) {
      RoundRecord r = Round(round, 0);
      ASSERT_TRUE(w.BeginRound(r).ok());
      r.ended_at_ms = r.started_at_ms + 10;
      r.num_reported = 1;
      r.checkpoint = sha;
      r.metrics_json = R"({"train_loss": 0.25})";
      ASSERT_TRUE(w.CommitRound(r, {Participation(r, kBob, ParticipationStatus::kAccepted)}).ok());
      ASSERT_TRUE(w.TouchClient(kBob, kNowMs + round).ok());
    }
    done = true;
  });
  size_t rows = 0;
  int reads = 0;
  while (!done || reads < 5) {
    absl::StatusOr<std::string> csv = RoundsReport(*ro, run_, Format::kCsv);
    ASSERT_TRUE(csv.ok()) << csv.status();
    // Quoted newlines aside (one in round 1's reason), one line per attempt.
    const size_t now_rows = Lines(*csv).size() - 2;
    ASSERT_GE(now_rows, rows);
    rows = now_rows;
    ASSERT_TRUE(StatusReport(*ro, kNowMs).ok());
    ASSERT_TRUE(ClientsReport(*ro, Format::kJson).ok());
    ++reads;
  }
  writer.join();
  EXPECT_EQ(Lines(*RoundsReport(*ro, run_, Format::kCsv)).size(), 2u + 3u + 38u);
  nlohmann::json clients = nlohmann::json::parse(*ClientsReport(*ro, Format::kJson));
  EXPECT_EQ(clients[1]["accepted"], 1 + 38);
}

TEST_F(AdminTest, FlAdminColumnsShowsAndResetsTheRunsColumnsWithAnAuditRecord) {
  Populate();
  ASSERT_TRUE(store_->ClaimFeatureSchema(run_, R"({"sha256":"ab","columns":["age","bmi"]})").ok());
  auto [code, out] =
      RunCommand(absl::StrCat("'", FL_BINARY, "' admin --data-dir '", dir_, "' columns"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr(R"("columns":["age","bmi"])"));
  std::tie(code, out) =
      RunCommand(absl::StrCat("'", FL_BINARY, "' admin --data-dir '", dir_, "' columns --reset"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("columns forgotten"));
  absl::StatusOr<std::string> after = store_->ClaimFeatureSchema(run_, "");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, "");
  absl::StatusOr<std::vector<AuditRecord>> log = store_->AuditLog(1);
  ASSERT_TRUE(log.ok() && !log->empty());
  EXPECT_EQ(log->back().event, "feature_schema_reset");
  EXPECT_THAT(log->back().detail, ::testing::HasSubstr("age"));
}

TEST_F(AdminTest, FlAdminRoundsCsvPrintsTheReport) {
  Populate();
  const std::string expected = *RoundsReport(*store_, std::nullopt, Format::kCsv);
  auto [code, out] = RunCommand(
      absl::StrCat("'", FL_BINARY, "' admin --data-dir '", dir_, "' rounds --format csv"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, expected);
  EXPECT_TRUE(absl::StartsWith(out, "run_id,round,attempt,status,")) << out;

  // --out writes the same to a file.
  const std::string file = dir_ + "/rounds.csv";
  std::tie(code, out) =
      RunCommand(absl::StrCat("'", FL_BINARY, "' admin --data-dir '", dir_, "' rounds --run ", run_,
                              " --format csv --out '", file, "'"));
  EXPECT_EQ(code, 0) << out;
  absl::StatusOr<std::string> written = [&]() -> absl::StatusOr<std::string> {
    FILE* f = fopen(file.c_str(), "r");
    if (f == nullptr) return absl::NotFoundError(file);
    std::string text;
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof(buffer), f)) > 0;) text.append(buffer, n);
    fclose(f);
    return text;
  }();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, expected);

  // Errors: "error: ..." on stderr and exit code 1.
  std::tie(code, out) = RunCommand(
      absl::StrCat("'", FL_BINARY, "' admin --data-dir '", dir_, "/nowhere' rounds 2>&1"));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StartsWith(out, "error: ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "no such file or directory: " + dir_ +
                                         "/nowhere; give a "
                                         "server's data directory or the federation.db file in it"))
      << out;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/nowhere"));
  std::tie(code, out) = RunCommand(
      absl::StrCat("'", FL_BINARY, "' admin --data-dir '", dir_, "' rounds --format xml 2>&1"));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "error: INVALID_ARGUMENT: unknown format 'xml'")) << out;
}

}  // namespace
}  // namespace fl::server::admin
