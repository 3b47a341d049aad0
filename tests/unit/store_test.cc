#include "fl/server/store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fl/common/model.h"
#include "gtest/gtest.h"
#include "server/store/migrations.h"
#include "server/store/run_queue.h"

namespace fl::server {
namespace {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};

// A second connection to the store's database, as another process would have.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    sqlite3* raw = nullptr;
    rc_ = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
    db_.reset(raw);
  }
  bool ok() const { return rc_ == SQLITE_OK; }
  // The first column of the first row of `sql`, as text ("" when there is no row).
  std::string QueryText(const char* sql) {
    sqlite3_stmt* raw = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_.get(), sql, -1, &raw, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db_.get());
    std::unique_ptr<sqlite3_stmt, StmtFinalizer> stmt(raw);
    if (stmt == nullptr || sqlite3_step(stmt.get()) != SQLITE_ROW) return "";
    const unsigned char* text = sqlite3_column_text(stmt.get(), 0);
    return text == nullptr ? "" : reinterpret_cast<const char*>(text);
  }
  int Exec(const char* sql) { return sqlite3_exec(db_.get(), sql, nullptr, nullptr, nullptr); }

 private:
  int rc_ = SQLITE_ERROR;
  std::unique_ptr<sqlite3, DbCloser> db_;
};

ParticipationRecord Participation(int64_t run_id, int32_t round, int32_t attempt,
                                  const std::string& client_id) {
  ParticipationRecord p;
  p.run_id = run_id;
  p.round = round;
  p.attempt = attempt;
  p.client_id = client_id;
  return p;
}

AuditRecord Event(int64_t at_ms, const std::string& client_id, const std::string& detail,
                  int32_t round) {
  AuditRecord r;
  r.at_ms = at_ms;
  r.client_id = client_id;
  r.event = "update_refused";
  r.detail = detail;
  r.run_id = 1;
  r.round = round;
  return r;
}

Model MakeModel(int64_t hidden, float seed) {
  Model model(ModelSpec({TensorSpec{"w", {hidden, 3}}, TensorSpec{"b", {3}}}));
  std::span<float> data = model.data();
  for (size_t i = 0; i < data.size(); ++i) data[i] = seed + 0.25f * static_cast<float>(i % 1000);
  return model;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "store_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    Reopen();
  }

  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Closes the store (as a restart would) and opens it again.
  void Reopen() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  int64_t NewRun(const std::string& name, int64_t now_ms) {
    RunRecord run;
    run.name = name;
    run.config_json = R"({"rounds": 3})";
    run.model_spec_json = "[]";
    run.initial_checkpoint = "init";
    run.created_at_ms = now_ms;
    absl::StatusOr<int64_t> id = store_->CreateRun(run);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  std::string NewCheckpoint(float seed) {
    absl::StatusOr<std::string> sha = store_->WriteCheckpoint(MakeModel(4, seed));
    EXPECT_TRUE(sha.ok()) << sha.status();
    return sha.value_or("");
  }

  RoundRecord Round(int64_t run_id, int32_t round, int32_t attempt) {
    RoundRecord r;
    r.run_id = run_id;
    r.round = round;
    r.attempt = attempt;
    r.started_at_ms = 100 * round + attempt;
    r.num_sampled = 2;
    return r;
  }

  // Commits round `round` (attempt `attempt`) with two accepted participations, and the
  // strategy's state `state` when given.
  absl::Status Commit(int64_t run_id, int32_t round, int32_t attempt, const std::string& sha,
                      const std::string& state = "") {
    RoundRecord r = Round(run_id, round, attempt);
    r.ended_at_ms = r.started_at_ms + 50;
    r.num_reported = 2;
    r.checkpoint = sha;
    r.state_checkpoint = state;
    r.metrics_json = R"({"train_loss": 0.5})";
    std::vector<ParticipationRecord> ps;
    for (const char* client : {"alice", "bob"}) {
      ParticipationRecord p = Participation(run_id, round, attempt, client);
      p.task_id = absl::StrCat("t-", client);
      p.status = ParticipationStatus::kAccepted;
      p.num_examples = 10;
      p.bytes_received = 1234;
      ps.push_back(std::move(p));
    }
    return store_->CommitRound(r, ps);
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, CreatesSchemaAtTheLatestVersionAndReopensIdempotently) {
  EXPECT_EQ(store_->schema_version(), 10);
  EXPECT_EQ(store_->db_path(), dir_ + "/federation.db");
  EXPECT_TRUE(std::filesystem::is_directory(store_->checkpoint_dir()));
  Reopen();
  Reopen();
  EXPECT_EQ(store_->schema_version(), 10);
  RawDb db(store_->db_path());
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db.QueryText("SELECT group_concat(version) FROM schema_version"),
            "1,2,3,4,5,6,7,8,9,10");
  EXPECT_EQ(db.QueryText("SELECT group_concat(name) FROM (SELECT name FROM sqlite_master "
                         "WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name)"),
            "audit_log,checkpoints,clients,evaluations,participations,revoked_certificates,rounds,"
            "run_queue,runs,"
            "schema_version");
}

TEST_F(StoreTest, DatabaseIsInWalModeWithForeignKeys) {
  RawDb db(store_->db_path());
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db.QueryText("PRAGMA journal_mode"), "wal");
  // A participation of a round that does not exist violates the foreign key.
  absl::Status s = store_->RecordParticipation(Participation(7, 1, 0, "x"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("participations"), absl::string_view::npos) << s;
}

TEST_F(StoreTest, CreateActiveAndFinishRuns) {
  absl::StatusOr<std::optional<RunRecord>> active = store_->ActiveRun();
  ASSERT_TRUE(active.ok()) << active.status();
  EXPECT_FALSE(active->has_value());

  int64_t first = NewRun("first", 1000);
  int64_t second = NewRun("second", 2000);
  EXPECT_LT(first, second);
  active = store_->ActiveRun();
  ASSERT_TRUE(active.ok() && active->has_value());
  EXPECT_EQ((*active)->run_id, second);
  EXPECT_EQ((*active)->name, "second");
  EXPECT_EQ((*active)->config_json, R"({"rounds": 3})");
  EXPECT_EQ((*active)->initial_checkpoint, "init");
  EXPECT_EQ((*active)->status, RunStatus::kRunning);
  EXPECT_EQ((*active)->created_at_ms, 2000);

  ASSERT_TRUE(store_->FinishRun(second, RunStatus::kFailed, "diverged", 3000).ok());
  active = store_->ActiveRun();
  ASSERT_TRUE(active.ok() && active->has_value());
  EXPECT_EQ((*active)->run_id, first);
  absl::StatusOr<RunRecord> run = store_->GetRun(second);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_EQ(run->reason, "diverged");
  EXPECT_EQ(run->ended_at_ms, 3000);

  EXPECT_EQ(store_->FinishRun(second, RunStatus::kFinished, "", 4000).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->FinishRun(99, RunStatus::kFinished, "", 4000).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->FinishRun(first, RunStatus::kRunning, "", 4000).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetRun(99).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StoreTest, BeginRoundTwiceIsAlreadyExists) {
  int64_t run = NewRun("r", 1);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  absl::Status s = store_->BeginRound(Round(run, 1, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("rounds"), absl::string_view::npos) << s;
  EXPECT_TRUE(store_->BeginRound(Round(run, 1, 1)).ok());
  EXPECT_EQ(store_->BeginRound(Round(run + 1, 1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);  // no such run
}

TEST_F(StoreTest, CommitRoundWritesRoundAndParticipationsAtomically) {
  int64_t run = NewRun("r", 1);
  std::string sha = NewCheckpoint(1.0f);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());

  // A fault in the middle of the transaction (the second participation) leaves nothing behind.
  RawDb db(store_->db_path());
  ASSERT_EQ(db.Exec("CREATE TRIGGER poison BEFORE INSERT ON participations "
                    "WHEN NEW.client_id = 'bob' BEGIN SELECT RAISE(ABORT, 'injected'); END"),
            SQLITE_OK);
  absl::Status s = Commit(run, 1, 0, sha);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("injected"), absl::string_view::npos) << s;
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok() && rounds->size() == 1);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kRunning);
  EXPECT_TRUE(store_->Participations(run, 1)->empty());

  ASSERT_EQ(db.Exec("DROP TRIGGER poison"), SQLITE_OK);
  ASSERT_TRUE(Commit(run, 1, 0, sha).ok());
  rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok() && rounds->size() == 1);
  const RoundRecord& r = (*rounds)[0];
  EXPECT_EQ(r.status, RoundStatus::kCommitted);
  EXPECT_EQ(r.checkpoint, sha);
  EXPECT_EQ(r.num_sampled, 2);
  EXPECT_EQ(r.num_reported, 2);
  EXPECT_EQ(r.started_at_ms, 100);
  EXPECT_EQ(r.ended_at_ms, 150);
  EXPECT_EQ(r.metrics_json, R"({"train_loss": 0.5})");
  absl::StatusOr<std::vector<ParticipationRecord>> ps = store_->Participations(run, 1);
  ASSERT_TRUE(ps.ok() && ps->size() == 2);
  EXPECT_EQ((*ps)[0].client_id, "alice");
  EXPECT_EQ((*ps)[0].task_id, "t-alice");
  EXPECT_EQ((*ps)[0].status, ParticipationStatus::kAccepted);
  EXPECT_EQ((*ps)[1].bytes_received, 1234);
}

TEST_F(StoreTest, CommitRoundRefusesSecondCommittedAttemptAndUnwrittenCheckpoint) {
  int64_t run = NewRun("r", 1);
  std::string sha = NewCheckpoint(1.0f);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 1)).ok());
  EXPECT_EQ(Commit(run, 1, 0, std::string(64, 'a')).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Commit(run, 1, 0, sha).ok());
  EXPECT_EQ(Commit(run, 1, 0, sha).code(), absl::StatusCode::kFailedPrecondition);
  absl::Status s = Commit(run, 1, 1, sha);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(Commit(run, 2, 0, sha).code(), absl::StatusCode::kNotFound);

  // The schema itself refuses a second committed attempt, whoever writes it.
  RawDb db(store_->db_path());
  EXPECT_EQ(db.Exec("UPDATE rounds SET status = 'committed' WHERE attempt = 1") & 0xff,
            SQLITE_CONSTRAINT);
  RoundRecord bad = Round(run, 1, 0);
  bad.round = 2;
  std::vector<ParticipationRecord> wrong_round = {Participation(run, 1, 0, "c")};
  ASSERT_TRUE(store_->BeginRound(bad).ok());
  EXPECT_EQ(store_->CommitRound(bad, wrong_round).code(), absl::StatusCode::kInvalidArgument);
}

// Schema 3: a committed round of a run with differential privacy keeps its sampling rate and the
// epsilon spent so far; rounds without it read back 0 in both.
TEST_F(StoreTest, CommittedRoundKeepsItsPrivacySpending) {
  int64_t run = NewRun("dp", 1);
  std::string sha = NewCheckpoint(1.0f);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  RoundRecord r = Round(run, 1, 0);
  r.ended_at_ms = r.started_at_ms + 5;
  r.num_reported = 1;
  r.checkpoint = sha;
  r.dp_sampling_rate = 0.25;
  r.dp_epsilon = 1.75;
  r.dp_epsilon_server = 3.5;  // schema 10
  ASSERT_TRUE(store_->CommitRound(r, {}).ok());
  ASSERT_TRUE(store_->BeginRound(Round(run, 2, 0)).ok());
  ASSERT_TRUE(Commit(run, 2, 0, sha).ok());  // without differential privacy
  Reopen();
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[0].dp_sampling_rate, 0.25);
  EXPECT_EQ((*rounds)[0].dp_epsilon, 1.75);
  EXPECT_EQ((*rounds)[0].dp_epsilon_server, 3.5);
  EXPECT_EQ((*rounds)[1].dp_sampling_rate, 0.0);
  EXPECT_EQ((*rounds)[1].dp_epsilon, 0.0);
  EXPECT_EQ((*rounds)[1].dp_epsilon_server, 0.0);
}

// Schema 4: a round's secure-aggregation record, written with the commit or, for an attempt that
// fails, before it ends; other rounds read back ''.
TEST_F(StoreTest, RoundKeepsItsSecureAggregationRecord) {
  int64_t run = NewRun("secagg", 1);
  std::string sha = NewCheckpoint(1.0f);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ASSERT_TRUE(store_
                  ->SetRoundSecAgg(run, 1, 0, R"({"u1":3})",
                                   {.sampling_rate = 0.25, .epsilon = 1.5, .epsilon_server = 4})
                  .ok());
  ASSERT_TRUE(store_->EndRound(run, 1, 0, RoundStatus::kFailed, "too few", 9).ok());
  EXPECT_EQ(store_->SetRoundSecAgg(run, 1, 0, "{}", {}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->SetRoundSecAgg(run, 1, 7, "{}", {}).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 1)).ok());
  RoundRecord r = Round(run, 1, 1);
  r.checkpoint = sha;
  r.secagg_json = R"({"u1":4})";
  ASSERT_TRUE(store_->CommitRound(r, {}).ok());
  ASSERT_TRUE(store_->BeginRound(Round(run, 2, 0)).ok());
  ASSERT_TRUE(Commit(run, 2, 0, sha).ok());
  Reopen();
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 3u);
  EXPECT_EQ((*rounds)[0].secagg_json, R"({"u1":3})");
  // A failed attempt whose sum was unmasked keeps what its release spent.
  EXPECT_EQ((*rounds)[0].dp_sampling_rate, 0.25);
  EXPECT_EQ((*rounds)[0].dp_epsilon, 1.5);
  EXPECT_EQ((*rounds)[0].dp_epsilon_server, 4.0);
  EXPECT_EQ((*rounds)[1].secagg_json, R"({"u1":4})");
  EXPECT_EQ((*rounds)[2].secagg_json, "");
}

// A restart counts the release of an attempt aborted while its masks came off: only an aborted
// attempt takes it, and its record stays.
TEST_F(StoreTest, AbortedRoundTakesThePrivacyItsReleaseSpent) {
  int64_t run = NewRun("secagg", 1);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ASSERT_TRUE(
      store_->SetRoundSecAgg(run, 1, 0, R"({"unmasking":true})", {.sampling_rate = 0.5}).ok());
  const SpentPrivacy spent{.sampling_rate = 0.5, .epsilon = 2.5, .epsilon_server = 6};
  EXPECT_EQ(store_->SetAbortedRoundPrivacy(run, 1, 0, spent).code(),
            absl::StatusCode::kFailedPrecondition);  // still running
  EXPECT_EQ(store_->SetAbortedRoundPrivacy(run, 1, 3, spent).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->AbortInFlightRounds(run, 5).ok());
  ASSERT_TRUE(store_->SetAbortedRoundPrivacy(run, 1, 0, spent).ok());
  Reopen();
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kAborted);
  EXPECT_EQ((*rounds)[0].secagg_json, R"({"unmasking":true})");
  EXPECT_EQ((*rounds)[0].dp_sampling_rate, 0.5);
  EXPECT_EQ((*rounds)[0].dp_epsilon, 2.5);
  EXPECT_EQ((*rounds)[0].dp_epsilon_server, 6.0);
}

TEST_F(StoreTest, AbortInFlightRoundsAfterRestartKeepsCommittedRounds) {
  int64_t run = NewRun("r", 1);
  std::string sha = NewCheckpoint(1.0f);
  absl::StatusOr<std::optional<RoundRecord>> last = store_->LastCommittedRound(run);
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->has_value());
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ASSERT_TRUE(Commit(run, 1, 0, sha).ok());
  ASSERT_TRUE(store_->BeginRound(Round(run, 2, 0)).ok());

  Reopen();  // the server restarts with round 2 in flight
  absl::StatusOr<int> aborted = store_->AbortInFlightRounds(run, 9000);
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ(*aborted, 1);
  EXPECT_EQ(*store_->AbortInFlightRounds(run, 9001), 0);

  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok() && rounds->size() == 2);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kCommitted);
  EXPECT_EQ((*rounds)[0].checkpoint, sha);
  EXPECT_EQ((*rounds)[0].ended_at_ms, 150);
  EXPECT_EQ((*rounds)[1].status, RoundStatus::kAborted);
  EXPECT_EQ((*rounds)[1].reason, "server restarted");
  EXPECT_EQ((*rounds)[1].ended_at_ms, 9000);
  EXPECT_EQ(store_->Participations(run, 1)->size(), 2u);

  last = store_->LastCommittedRound(run);
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->round, 1);
  // The aborted round runs again as a new attempt.
  ASSERT_TRUE(store_->BeginRound(Round(run, 2, 1)).ok());
  ASSERT_TRUE(Commit(run, 2, 1, sha).ok());
  last = store_->LastCommittedRound(run);
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->round, 2);
  EXPECT_EQ((*last)->attempt, 1);
}

TEST_F(StoreTest, EndRoundMarksOnlyRunningAttempts) {
  int64_t run = NewRun("r", 1);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ASSERT_TRUE(store_->EndRound(run, 1, 0, RoundStatus::kFailed, "too few clients", 500).ok());
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run);
  ASSERT_TRUE(rounds.ok() && rounds->size() == 1);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kFailed);
  EXPECT_EQ((*rounds)[0].reason, "too few clients");
  EXPECT_EQ(store_->EndRound(run, 1, 0, RoundStatus::kAborted, "", 600).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->EndRound(run, 5, 0, RoundStatus::kAborted, "", 600).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->EndRound(run, 1, 0, RoundStatus::kCommitted, "", 600).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, RecordParticipationReplacesByKey) {
  int64_t run = NewRun("r", 1);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ParticipationRecord p = Participation(run, 1, 0, "alice");
  p.task_id = "t1";
  ASSERT_TRUE(store_->RecordParticipation(p).ok());
  p.status = ParticipationStatus::kDropped;
  p.reason = "deadline";
  ASSERT_TRUE(store_->RecordParticipation(p).ok());
  absl::StatusOr<std::vector<ParticipationRecord>> ps = store_->Participations(run, 1);
  ASSERT_TRUE(ps.ok() && ps->size() == 1);
  EXPECT_EQ((*ps)[0].status, ParticipationStatus::kDropped);
  EXPECT_EQ((*ps)[0].reason, "deadline");
  EXPECT_TRUE(store_->RecordEvaluation(run, 1, "server", 0.7, 0.8, 100, 700, {}).ok());
  RawDb db(store_->db_path());
  EXPECT_EQ(db.QueryText("SELECT source || ':' || accuracy FROM evaluations"), "server:0.8");
}

TEST_F(StoreTest, EnrollRevokeTouchAndListClients) {
  ASSERT_TRUE(store_->EnrollClient("fp-a", "site-a", 10).ok());
  ASSERT_TRUE(store_->EnrollClient("fp-b", "site-b", 20).ok());
  ASSERT_TRUE(store_->EnrollClient("fp-a", "site-a", 30).ok());  // idempotent
  EXPECT_TRUE(*store_->IsEnrolled("fp-a"));
  EXPECT_FALSE(*store_->IsEnrolled("fp-unknown"));

  ASSERT_TRUE(store_->RevokeClient("fp-a", 40).ok());
  EXPECT_FALSE(*store_->IsEnrolled("fp-a"));
  EXPECT_EQ(store_->RevokeClient("fp-unknown", 40).code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(store_->TouchClient("fp-b", 50).ok());
  ASSERT_TRUE(store_->TouchClient("fp-b", 45).ok());  // never goes back in time
  EXPECT_EQ(store_->TouchClient("fp-unknown", 50).code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::vector<ClientRecord>> clients = store_->Clients();
  ASSERT_TRUE(clients.ok() && clients->size() == 2);
  EXPECT_EQ((*clients)[0].client_id, "fp-a");
  EXPECT_EQ((*clients)[0].enrolled_at_ms, 10);
  EXPECT_EQ((*clients)[0].revoked_at_ms, 40);
  EXPECT_EQ((*clients)[1].name, "site-b");
  EXPECT_EQ((*clients)[1].last_seen_ms, 50);

  ASSERT_TRUE(store_->EnrollClient("fp-a", "site-a", 60).ok());  // re-enrollment
  EXPECT_TRUE(*store_->IsEnrolled("fp-a"));
  clients = store_->Clients();
  ASSERT_TRUE(clients.ok() && clients->size() == 2);
  EXPECT_EQ((*clients)[1].client_id, "fp-a");
  EXPECT_EQ((*clients)[1].revoked_at_ms, 0);
  EXPECT_EQ((*clients)[1].enrolled_at_ms, 60);
}

TEST_F(StoreTest, AuditLogReturnsTheNewestOldestFirst) {
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(
        store_->Audit(Event(100 * i, i % 2 ? "fp-a" : "", absl::StrCat("reason ", i), i)).ok());
  }
  absl::StatusOr<std::vector<AuditRecord>> log = store_->AuditLog(3);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 3u);
  EXPECT_EQ((*log)[0].round, 3);
  EXPECT_EQ((*log)[1].round, 4);
  EXPECT_EQ((*log)[2].round, 5);
  EXPECT_LT((*log)[0].id, (*log)[2].id);
  EXPECT_EQ((*log)[2].at_ms, 500);
  EXPECT_EQ((*log)[2].client_id, "fp-a");
  EXPECT_EQ((*log)[2].detail, "reason 5");
  EXPECT_EQ(store_->AuditLog(100)->size(), 5u);
  EXPECT_TRUE(store_->AuditLog(0)->empty());
  EXPECT_EQ(store_->AuditLog(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, ConcurrentWritersAreSerialized) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < 25; ++i) {
        EXPECT_TRUE(store_->Audit(Event(i, "", "tick", t)).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(store_->AuditLog(1000)->size(), 100u);
}

TEST_F(StoreTest, CheckpointRoundTripsBitForBit) {
  // Big enough that reading and writing take several chunks.
  Model model = MakeModel(600'000, -3.5f);
  absl::StatusOr<std::string> sha = store_->WriteCheckpoint(model);
  ASSERT_TRUE(sha.ok()) << sha.status();
  EXPECT_EQ(*sha, model.Sha256Hex());
  const std::string path = store_->checkpoint_dir() + "/" + *sha + ".ckpt";
  ASSERT_TRUE(std::filesystem::exists(path));
  const std::string spec = model.spec().ToJson();
  EXPECT_EQ(std::filesystem::file_size(path), 16 + spec.size() + model.NumBytes());
  std::ifstream in(path, std::ios::binary);
  std::string header(16, '\0');
  in.read(header.data(), 16);
  EXPECT_EQ(header.substr(0, 8), "FLCKPT01");
  EXPECT_EQ(static_cast<unsigned char>(header[8]), spec.size() & 0xff);

  absl::StatusOr<Model> back = store_->ReadCheckpoint(*sha);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec(), model.spec());
  ASSERT_EQ(back->NumBytes(), model.NumBytes());
  EXPECT_EQ(std::memcmp(back->bytes().data(), model.bytes().data(), model.NumBytes()), 0);

  absl::StatusOr<std::string> again = store_->WriteCheckpoint(model);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *sha);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(store_->checkpoint_dir())) {
    ++files;
    EXPECT_EQ(entry.path().filename().string(), *sha + ".ckpt");
  }
  EXPECT_EQ(files, 1);
  RawDb db(store_->db_path());
  EXPECT_EQ(db.QueryText("SELECT count(*) FROM checkpoints"), "1");
  EXPECT_EQ(db.QueryText("SELECT path FROM checkpoints"), "checkpoints/" + *sha + ".ckpt");
}

TEST_F(StoreTest, CorruptCheckpointIsDataLoss) {
  std::string sha = NewCheckpoint(2.0f);
  const std::string path = store_->checkpoint_dir() + "/" + sha + ".ckpt";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-5, std::ios::end);
    c = static_cast<char>(c ^ 0x01);
    f.write(&c, 1);
  }
  absl::Status s = store_->ReadCheckpoint(sha).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(sha + ".ckpt"), absl::string_view::npos) << s;

  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  s = store_->ReadCheckpoint(sha).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;

  std::ofstream(path, std::ios::binary) << "NOTACKPT and some more bytes";
  s = store_->ReadCheckpoint(sha).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST_F(StoreTest, MissingCheckpointIsNotFound) {
  absl::Status s = store_->ReadCheckpoint(std::string(64, '0')).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(store_->ReadCheckpoint("../federation.db").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Runs, Evaluations, ParticipationCounts and OpenReadOnly (read by `fl admin`).

TEST_F(StoreTest, RunsListsEveryRunOldestFirst) {
  EXPECT_TRUE(store_->Runs()->empty());
  int64_t first = NewRun("first", 1000);
  int64_t second = NewRun("second", 2000);
  ASSERT_TRUE(store_->FinishRun(first, RunStatus::kFinished, "", 1500).ok());
  absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].run_id, first);
  EXPECT_EQ((*runs)[0].status, RunStatus::kFinished);
  EXPECT_EQ((*runs)[0].ended_at_ms, 1500);
  EXPECT_EQ((*runs)[1].run_id, second);
  EXPECT_EQ((*runs)[1].name, "second");
  EXPECT_EQ((*runs)[1].status, RunStatus::kRunning);
}

TEST_F(StoreTest, EvaluationsOfOneRunByRound) {
  int64_t run = NewRun("r", 1);
  int64_t other = NewRun("other", 2);
  ASSERT_TRUE(store_->RecordEvaluation(run, 2, "server", 0.4, 0.85, 100, 20, {}).ok());
  ASSERT_TRUE(store_->RecordEvaluation(run, 1, "server", 0.6, 0.75, 100, 10, {}).ok());
  ASSERT_TRUE(store_->RecordEvaluation(other, 1, "server", 9, 0.1, 1, 30, {}).ok());
  absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(run);
  ASSERT_TRUE(evals.ok()) << evals.status();
  ASSERT_EQ(evals->size(), 2u);
  EXPECT_EQ((*evals)[0].round, 1);
  EXPECT_EQ((*evals)[0].run_id, run);
  EXPECT_EQ((*evals)[0].source, "server");
  EXPECT_DOUBLE_EQ((*evals)[0].loss, 0.6);
  EXPECT_DOUBLE_EQ((*evals)[0].accuracy, 0.75);
  EXPECT_EQ((*evals)[0].num_examples, 100);
  EXPECT_EQ((*evals)[0].at_ms, 10);
  EXPECT_EQ((*evals)[1].round, 2);
  EXPECT_TRUE(store_->Evaluations(99)->empty());
}

TEST_F(StoreTest, EvaluationMetricsRoundTripAndNonFiniteOnesAreRefused) {
  int64_t run = NewRun("r", 1);
  ASSERT_TRUE(store_
                  ->RecordEvaluation(run, 1, "federated", 0.4, 0.85, 300, 20,
                                     {{"accuracy", 0.85}, {"auc", 0.9125}, {"f1", 1e-7}})
                  .ok());
  absl::Status nan = store_->RecordEvaluation(run, 2, "federated", 0.4, 0.85, 300, 30,
                                              {{"accuracy", 0.85}, {"auc", std::nan("")}});
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument) << nan;
  EXPECT_NE(nan.message().find("metric 'auc' is not finite"), absl::string_view::npos) << nan;
  Reopen();
  absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(run);
  ASSERT_TRUE(evals.ok()) << evals.status();
  ASSERT_EQ(evals->size(), 1u);  // the refused one left no row
  const std::map<std::string, double> expected = {
      {"accuracy", 0.85}, {"auc", 0.9125}, {"f1", 1e-7}};
  EXPECT_EQ((*evals)[0].metrics, expected);
  EXPECT_EQ((*evals)[0].source, "federated");
  EXPECT_EQ((*evals)[0].num_examples, 300);
  ASSERT_TRUE(store_->RecordEvaluation(run, 2, "server", 0.3, 0.9, 0, 40, {}).ok());
  EXPECT_TRUE(store_->Evaluations(run)->back().metrics.empty());
  RawDb db(store_->db_path());
  EXPECT_EQ(db.QueryText("SELECT metrics_json FROM evaluations WHERE round = 2"), "{}");

  // A row whose metrics are not a JSON object of numbers is reported, not silently dropped.
  ASSERT_EQ(db.Exec("UPDATE evaluations SET metrics_json = '{\"auc\": \"high\"}' "
                    "WHERE round = 2"),
            SQLITE_OK);
  absl::StatusOr<std::vector<EvaluationRecord>> bad = store_->Evaluations(run);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_NE(bad.status().message().find("metric 'auc' that is not a number"),
            absl::string_view::npos)
      << bad.status();
}

// A database as a server of schema version 1 left it: its evaluations migrate, read back with
// an empty metrics map beside their loss and accuracy, and new ones carry every metric.
TEST_F(StoreTest, AStoreOfSchemaOneMigratesAndOldEvaluationsHaveNoMetrics) {
  const std::string old_dir = dir_ + "/old";
  ASSERT_TRUE(std::filesystem::create_directories(old_dir));
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((old_dir + "/federation.db").c_str(), &raw), SQLITE_OK);
    std::unique_ptr<sqlite3, DbCloser> db(raw);
    absl::StatusOr<int> version = sqlite::MigrateTo(db.get(), 1);
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(*version, 1);
    ASSERT_EQ(sqlite3_exec(db.get(),
                           "INSERT INTO runs(run_id, name, config_json, model_spec_json, "
                           "initial_checkpoint, status, created_at_ms) "
                           "VALUES (1, 'old', '{}', '{}', 'init', 'running', 5);"
                           "INSERT INTO evaluations(run_id, round, source, loss, accuracy, "
                           "num_examples, at_ms) VALUES (1, 1, 'federated', 0.7, 0.6, 50, 9);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db.get());
    EXPECT_EQ(sqlite::MigrateTo(db.get(), 0).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // A reader does not migrate: it names the version and what to do.
  absl::StatusOr<std::unique_ptr<Store>> reader = Store::OpenReadOnly(old_dir);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition) << reader.status();
  EXPECT_NE(reader.status().message().find("schema version 1"), absl::string_view::npos)
      << reader.status();

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(old_dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->schema_version(), 10);
  ASSERT_TRUE((*store)
                  ->RecordEvaluation(1, 2, "federated", 0.5, 0.7, 60, 10,
                                     {{"accuracy", 0.7}, {"auc", 0.75}})
                  .ok());
  absl::StatusOr<std::vector<EvaluationRecord>> evals = (*store)->Evaluations(1);
  ASSERT_TRUE(evals.ok()) << evals.status();
  ASSERT_EQ(evals->size(), 2u);
  EXPECT_EQ((*evals)[0].round, 1);
  EXPECT_DOUBLE_EQ((*evals)[0].loss, 0.7);
  EXPECT_DOUBLE_EQ((*evals)[0].accuracy, 0.6);
  EXPECT_EQ((*evals)[0].num_examples, 50);
  EXPECT_TRUE((*evals)[0].metrics.empty());
  EXPECT_EQ((*evals)[1].metrics.at("auc"), 0.75);
  EXPECT_TRUE(Store::OpenReadOnly(old_dir).ok());
}

TEST_F(StoreTest, ParticipationCountsSumEveryAttemptPerClient) {
  int64_t run = NewRun("r", 1);
  int64_t other = NewRun("other", 2);
  std::string sha = NewCheckpoint(1.0f);
  // Run 1: round 1 attempt 0 fails with alice refused and bob dropped, attempt 1 commits with
  // both accepted; round 2 is still running with alice assigned. Run 2: bob accepted once.
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ParticipationRecord refused = Participation(run, 1, 0, "alice");
  refused.status = ParticipationStatus::kRefused;
  refused.reason = "NaN in update";
  ParticipationRecord dropped = Participation(run, 1, 0, "bob");
  dropped.status = ParticipationStatus::kDropped;
  ASSERT_TRUE(store_->RecordParticipation(refused).ok());
  ASSERT_TRUE(store_->RecordParticipation(dropped).ok());
  ASSERT_TRUE(store_->EndRound(run, 1, 0, RoundStatus::kFailed, "too few updates", 150).ok());
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 1)).ok());
  ASSERT_TRUE(Commit(run, 1, 1, sha).ok());
  ASSERT_TRUE(store_->BeginRound(Round(run, 2, 0)).ok());
  ASSERT_TRUE(store_->RecordParticipation(Participation(run, 2, 0, "alice")).ok());
  ASSERT_TRUE(store_->BeginRound(Round(other, 1, 0)).ok());
  ASSERT_TRUE(Commit(other, 1, 0, sha).ok());  // alice and bob accepted

  absl::StatusOr<std::vector<ParticipationCount>> all = store_->ParticipationCounts(std::nullopt);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  const ParticipationCount& alice = (*all)[0];
  EXPECT_EQ(alice.client_id, "alice");
  EXPECT_EQ(alice.accepted, 2);
  EXPECT_EQ(alice.refused, 1);
  EXPECT_EQ(alice.dropped, 0);
  EXPECT_EQ(alice.assigned, 1);
  EXPECT_EQ(alice.last_round_started_ms, 200);  // Round(..., 2, 0) starts at 200
  const ParticipationCount& bob = (*all)[1];
  EXPECT_EQ(bob.client_id, "bob");
  EXPECT_EQ(bob.accepted, 2);
  EXPECT_EQ(bob.dropped, 1);
  EXPECT_EQ(bob.refused, 0);
  EXPECT_EQ(bob.last_round_started_ms, 101);

  absl::StatusOr<std::vector<ParticipationCount>> one = store_->ParticipationCounts(other);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0].accepted, 1);
  EXPECT_EQ((*one)[0].refused, 0);
  EXPECT_EQ((*one)[0].assigned, 0);
  EXPECT_EQ((*one)[0].last_round_started_ms, 100);
  EXPECT_TRUE(store_->ParticipationCounts(99)->empty());
}

// The control API's queue: oldest first, each entry leaves the queue once (started or
// cancelled), a started one stays with its run; the listing puts what is queued first.
TEST_F(StoreTest, RunQueueStartsOldestFirstAndEachEntryLeavesOnce) {
  absl::StatusOr<std::unique_ptr<RunQueue>> queue = RunQueue::Open(store_->db_path());
  ASSERT_TRUE(queue.ok()) << queue.status();
  ASSERT_EQ((*queue)->Oldest()->has_value(), false);
  absl::StatusOr<int64_t> a = (*queue)->Enqueue("a", "[run]\nrounds = 2\n", "alice", 10);
  absl::StatusOr<int64_t> b = (*queue)->Enqueue("b", "", "bob", 20);
  absl::StatusOr<int64_t> c = (*queue)->Enqueue("c", "", "bob", 30);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((**(*queue)->Oldest()).queue_id, *a);
  ASSERT_TRUE((*queue)->Claim(*a).ok());
  EXPECT_EQ((**(*queue)->ClaimedWithoutRun()).queue_id, *a);
  ASSERT_TRUE((*queue)->SetRun(*a, 7).ok());
  EXPECT_FALSE((*queue)->ClaimedWithoutRun()->has_value());
  EXPECT_EQ((**(*queue)->Oldest()).queue_id, *b);
  ASSERT_TRUE((*queue)->Cancel(*b, "not needed").ok());
  EXPECT_EQ((*queue)->Cancel(*b, "again").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*queue)->Claim(*a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*queue)->Cancel(*a, "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((**(*queue)->Oldest()).queue_id, *c);

  absl::StatusOr<std::optional<QueuedRun>> of_run = (*queue)->ForRun(7);
  ASSERT_TRUE(of_run.ok() && of_run->has_value());
  EXPECT_EQ((*of_run)->name, "a");
  EXPECT_EQ((*of_run)->config_toml, "[run]\nrounds = 2\n");
  EXPECT_EQ((*of_run)->submitted_by, "alice");
  EXPECT_FALSE((*queue)->ForRun(8)->has_value());
  EXPECT_EQ((*queue)->Get(99).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::vector<QueuedRun>> all = (*queue)->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].name, "c");  // queued first, then the rest newest first
  EXPECT_EQ((*all)[1].name, "b");
  EXPECT_EQ((*all)[1].status, QueuedRun::Status::kCancelled);
  EXPECT_EQ((*all)[1].reason, "not needed");
  EXPECT_EQ((*all)[2].status, QueuedRun::Status::kStarted);

  // A claimed entry that could not start leaves with the reason; only a claimed one can.
  ASSERT_TRUE((*queue)->Claim(*c).ok());
  EXPECT_EQ((*queue)->Abandon(*b, "x").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*queue)->Abandon(*c, "could not start: bad model").ok());
  EXPECT_EQ((*queue)->Get(*c)->status, QueuedRun::Status::kCancelled);
  EXPECT_EQ((*queue)->Get(*c)->reason, "could not start: bad model");
  EXPECT_FALSE((*queue)->Oldest()->has_value());
}

// Retention: the last K committed rounds' models and every M-th stay, with the run's initial
// model; the rest leave the disk and the table; a checkpoint no round committed yet stays.
TEST_F(StoreTest, PruneCheckpointsKeepsTheLastRoundsEveryMthAndTheInitialModel) {
  const int64_t run = NewRun("r", 1);
  std::vector<std::string> sha = {""};  // sha[round]
  for (int round = 1; round <= 6; ++round) {
    sha.push_back(NewCheckpoint(static_cast<float>(round)));
    ASSERT_TRUE(store_->BeginRound(Round(run, round, 0)).ok());
    ASSERT_TRUE(Commit(run, round, 0, sha.back()).ok());
  }
  const std::string pending = NewCheckpoint(7.0f);  // written, its round not committed yet
  EXPECT_EQ(*store_->PruneCheckpoints(0, 0), 0) << "0 keeps everything";
  absl::StatusOr<int64_t> removed = store_->PruneCheckpoints(2, 3);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 3);  // rounds 1, 2 and 4
  for (int round : {1, 2, 4}) {
    EXPECT_FALSE(
        std::filesystem::exists(absl::StrCat(store_->checkpoint_dir(), "/", sha[round], ".ckpt")));
    EXPECT_FALSE(store_->ReadCheckpoint(sha[round]).ok()) << round;
  }
  for (int round : {3, 5, 6}) EXPECT_TRUE(store_->ReadCheckpoint(sha[round]).ok()) << round;
  EXPECT_TRUE(store_->ReadCheckpoint(pending).ok());
  EXPECT_EQ(*store_->PruneCheckpoints(2, 3), 0);
  RawDb db(store_->db_path());
  EXPECT_EQ(db.QueryText("SELECT COUNT(*) FROM checkpoints"), "4");  // 3, 5, 6 and pending
}

// A strategy's state is kept only for a running run's last committed round (the one a resume
// reads): a finished run keeps none, however many of its models it keeps.
TEST_F(StoreTest, PruneCheckpointsKeepsOnlyTheStateAResumeReads) {
  std::vector<std::string> states;
  for (int64_t run : {int64_t{1}, int64_t{2}}) {
    ASSERT_EQ(NewRun(absl::StrCat("run-", run), run), run);
    for (int round = 1; round <= 3; ++round) {
      ASSERT_TRUE(store_->BeginRound(Round(run, round, 0)).ok());
      states.push_back(NewCheckpoint(100.f * run + round));
      ASSERT_TRUE(Commit(run, round, 0, NewCheckpoint(10.f * run + round), states.back()).ok());
    }
    if (run == 1) {
      ASSERT_TRUE(store_->FinishRun(run, RunStatus::kFinished, "", 1000).ok());
    }
  }
  // A state that does not fit its round is refused at commit, as a model is.
  ASSERT_TRUE(store_->BeginRound(Round(2, 4, 0)).ok());
  EXPECT_EQ(Commit(2, 4, 0, NewCheckpoint(99.f), std::string(64, 'a')).code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<int64_t> removed = store_->PruneCheckpoints(10, 0);  // every model kept
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 5);  // run 1's three states, run 2's first two
  for (size_t i = 0; i < states.size(); ++i) {
    EXPECT_EQ(store_->ReadCheckpoint(states[i]).ok(), i == 5) << "state " << i;
  }
  absl::StatusOr<std::optional<RoundRecord>> last = store_->LastCommittedRound(2);
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->state_checkpoint, states[5]);
}

TEST_F(StoreTest, RunAuditLogHasOneRunsRecordsAfterAnId) {
  for (int i = 0; i < 5; ++i) {
    AuditRecord r;
    r.at_ms = i;
    r.event = absl::StrCat("e", i);
    r.run_id = i % 2 == 0 ? 1 : 2;
    ASSERT_TRUE(store_->Audit(r).ok());
  }
  absl::StatusOr<std::vector<AuditRecord>> first = store_->RunAuditLog(1, 0, 100);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 3u);
  EXPECT_EQ((*first)[2].event, "e4");
  absl::StatusOr<std::vector<AuditRecord>> after = store_->RunAuditLog(1, (*first)[0].id, 1);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].event, "e2");
}

TEST_F(StoreTest, OpenReadOnlyRefusesAMissingDatabaseAndCreatesNothing) {
  const std::string missing = dir_ + "/nothing-here";
  absl::StatusOr<std::unique_ptr<Store>> ro = Store::OpenReadOnly(missing);
  EXPECT_EQ(ro.status().code(), absl::StatusCode::kNotFound) << ro.status();
  EXPECT_NE(ro.status().message().find(missing + "/federation.db"), absl::string_view::npos)
      << ro.status();
  EXPECT_FALSE(std::filesystem::exists(missing));

  // An empty directory stays empty.
  const std::string empty = dir_ + "/empty";
  ASSERT_TRUE(std::filesystem::create_directory(empty));
  EXPECT_EQ(Store::OpenReadOnly(empty).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(std::filesystem::is_empty(empty));

  // A file that is not a federation database is refused, and not migrated.
  const std::string foreign = dir_ + "/foreign";
  ASSERT_TRUE(std::filesystem::create_directory(foreign));
  {
    RawDb raw(foreign + "/federation.db");  // SQLITE_OPEN_READWRITE without CREATE: no file
    EXPECT_FALSE(raw.ok());
  }
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open((foreign + "/federation.db").c_str(), &handle), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(handle, "CREATE TABLE t(x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(handle);
  ro = Store::OpenReadOnly(foreign);
  EXPECT_EQ(ro.status().code(), absl::StatusCode::kFailedPrecondition) << ro.status();
  RawDb check(foreign + "/federation.db");
  EXPECT_EQ(check.QueryText("SELECT count(*) FROM sqlite_master WHERE name = 'schema_version'"),
            "0");
  EXPECT_FALSE(std::filesystem::exists(foreign + "/checkpoints"));
}

TEST_F(StoreTest, OpenReadOnlyReadsWhileAWriterCommitsAndRefusesWrites) {
  int64_t run = NewRun("r", 1);
  std::string sha = NewCheckpoint(1.0f);
  ASSERT_TRUE(store_->BeginRound(Round(run, 1, 0)).ok());
  ASSERT_TRUE(Commit(run, 1, 0, sha).ok());

  absl::StatusOr<std::unique_ptr<Store>> ro = Store::OpenReadOnly(dir_);
  ASSERT_TRUE(ro.ok()) << ro.status();
  Store& reader = **ro;
  EXPECT_TRUE(reader.read_only());
  EXPECT_FALSE(store_->read_only());
  EXPECT_EQ(reader.schema_version(), 10);
  EXPECT_EQ(reader.db_path(), store_->db_path());

  // The writer keeps committing rounds while the reader reads; every read succeeds and sees a
  // prefix of the commits, never a round without its participations.
  std::thread writer([&] {
    for (int32_t round = 2; round <= 30; ++round) {
      ASSERT_TRUE(store_->BeginRound(Round(run, round, 0)).ok());
      ASSERT_TRUE(Commit(run, round, 0, sha).ok());
      ASSERT_TRUE(store_->Audit(Event(round, "", "tick", round)).ok());
    }
  });
  size_t last_seen = 0;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::vector<RoundRecord>> rounds = reader.Rounds(run);
    ASSERT_TRUE(rounds.ok()) << rounds.status();
    ASSERT_GE(rounds->size(), last_seen);
    last_seen = rounds->size();
    for (const RoundRecord& r : *rounds) {
      if (r.status != RoundStatus::kCommitted) continue;
      absl::StatusOr<std::vector<ParticipationRecord>> ps = reader.Participations(run, r.round);
      ASSERT_TRUE(ps.ok()) << ps.status();
      EXPECT_EQ(ps->size(), 2u) << "round " << r.round;
    }
    ASSERT_TRUE(reader.ParticipationCounts(std::nullopt).ok());
    ASSERT_TRUE(reader.AuditLog(10).ok());
  }
  writer.join();
  EXPECT_EQ(reader.Rounds(run)->size(), 30u);
  EXPECT_EQ(reader.Runs()->size(), 1u);
  EXPECT_EQ(reader.ParticipationCounts(run)->at(0).accepted, 30);
  absl::StatusOr<Model> model = reader.ReadCheckpoint(sha);
  EXPECT_TRUE(model.ok()) << model.status();

  // Every write is refused before it touches a row or a file.
  const size_t checkpoint_files =
      std::distance(std::filesystem::directory_iterator(reader.checkpoint_dir()), {});
  std::vector<absl::Status> writes = {
      reader.CreateRun(RunRecord()).status(),
      reader.FinishRun(run, RunStatus::kFinished, "", 5),
      reader.BeginRound(Round(run, 31, 0)),
      reader.EndRound(run, 30, 0, RoundStatus::kAborted, "", 5),
      reader.AbortInFlightRounds(run, 5).status(),
      reader.RecordParticipation(Participation(run, 1, 0, "carol")),
      reader.EnrollClient("fp-x", "x", 5),
      reader.RevokeClient("fp-x", 5),
      reader.TouchClient("fp-x", 5),
      reader.RecordEvaluation(run, 1, "server", 0, 0, 0, 5, {}),
      reader.WriteCheckpoint(MakeModel(4, 7.0f)).status(),
      reader.Audit(Event(1, "", "x", 1)),
  };
  for (const absl::Status& s : writes) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("read-only"), absl::string_view::npos) << s;
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(reader.checkpoint_dir()), {}),
            static_cast<std::ptrdiff_t>(checkpoint_files));
  EXPECT_EQ(store_->Runs()->size(), 1u);
  EXPECT_EQ(store_->AuditLog(100)->size(), 29u);
}

TEST_F(StoreTest, OpenCanLeaveTemporaryCheckpointFilesAlone) {
  const std::string temp = store_->checkpoint_dir() + "/abc.ckpt.tmp.123456";
  std::ofstream(temp) << "in progress";
  absl::StatusOr<std::unique_ptr<Store>> beside =
      Store::Open(dir_, StoreOpenOptions{.remove_stale_temp_files = false});
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_TRUE(std::filesystem::exists(temp));
  Reopen();  // the default, as at a server's start, removes it
  EXPECT_FALSE(std::filesystem::exists(temp));
}

}  // namespace
}  // namespace fl::server
