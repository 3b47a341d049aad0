// Store on SQLite: one connection in WAL mode behind one mutex, plus checkpoint files.
#include "server/store/sqlite_store.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "server/store/checkpoint_file.h"
#include "server/store/migrations.h"
#include "server/store/records.h"
#include "server/store/sqlite_util.h"

namespace fl::server {
namespace {

using sqlite::Statement;
using sqlite::Transaction;

std::string RoundName(int64_t run_id, int32_t round, int32_t attempt) {
  return absl::StrCat("round ", round, " attempt ", attempt, " of run ", run_id);
}

// Removes temporary checkpoint files a crash left behind; they never have a row.
void RemoveStaleTempFiles(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (absl::StrContains(entry.path().filename().string(), ".tmp.")) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

}  // namespace

namespace internal {

using sqlite::Statement;
using sqlite::Transaction;

absl::StatusOr<int64_t> SqliteStore::CreateRun(const RunRecord& run) {
  if (absl::Status s = CheckWritable("create a run"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "INSERT INTO runs(name, config_json, model_spec_json, initial_checkpoint, status, reason, "
      "created_at_ms, ended_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      "insert into runs");
  if (!st.ok()) return st.status();
  if (absl::Status s =
          st->Bind(run.name, run.config_json, run.model_spec_json, run.initial_checkpoint,
                   ToString(run.status), run.reason, run.created_at_ms, run.ended_at_ms)
              .Run();
      !s.ok()) {
    return s;
  }
  return sqlite3_last_insert_rowid(db_.get());
}

absl::StatusOr<std::optional<RunRecord>> SqliteStore::ActiveRun() {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectRuns, "WHERE status = 'running' ORDER BY run_id DESC LIMIT 1"),
              "select active run from runs");
  if (!st.ok()) return st.status();
  return sqlite::First(*st, ReadRun);
}

absl::StatusOr<RunRecord> SqliteStore::GetRun(int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectRuns, "WHERE run_id = ?"), "select from runs");
  if (!st.ok()) return st.status();
  absl::StatusOr<std::optional<RunRecord>> run = sqlite::First(st->Bind(run_id), ReadRun);
  if (!run.ok()) return run.status();
  if (!run->has_value()) return absl::NotFoundError(absl::StrCat("run ", run_id, " not found"));
  return **std::move(run);
}

absl::StatusOr<std::vector<RunRecord>> SqliteStore::Runs() {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectRuns, "ORDER BY run_id"), "select from runs");
  if (!st.ok()) return st.status();
  return sqlite::Collect(*st, ReadRun);
}

absl::StatusOr<std::string> SqliteStore::ClaimFeatureSchema(int64_t run_id,
                                                            const std::string& schema_json) {
  if (!schema_json.empty()) {
    if (absl::Status s = CheckWritable("record a run's feature schema"); !s.ok()) return s;
  }
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> claim = Prepare(
      "UPDATE runs SET feature_schema_json = ? WHERE run_id = ? AND feature_schema_json = ''",
      "update runs");
  if (!claim.ok()) return claim.status();
  if (!schema_json.empty()) {
    if (absl::Status s = claim->Bind(schema_json, run_id).Run(); !s.ok()) return s;
  }
  absl::StatusOr<Statement> read =
      Prepare("SELECT feature_schema_json FROM runs WHERE run_id = ?", "select from runs");
  if (!read.ok()) return read.status();
  absl::StatusOr<bool> row = read->Bind(run_id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("run ", run_id, " not found"));
  return read->Text(0);
}

absl::StatusOr<std::string> SqliteStore::FeatureStatistics(int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> read =
      Prepare("SELECT feature_stats_json FROM runs WHERE run_id = ?", "select from runs");
  if (!read.ok()) return read.status();
  absl::StatusOr<bool> row = read->Bind(run_id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("run ", run_id, " not found"));
  return read->Text(0);
}

absl::Status SqliteStore::ResetFeatureSchema(int64_t run_id) {
  if (absl::Status s = CheckWritable("reset a run's feature schema"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("UPDATE runs SET feature_schema_json = '' WHERE run_id = ?", "update runs");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(run_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) != 1) {
    return absl::NotFoundError(absl::StrCat("run ", run_id, " not found"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SetFeatureStatistics(int64_t run_id, const std::string& stats_json) {
  if (absl::Status s = CheckWritable("record a run's feature statistics"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("UPDATE runs SET feature_stats_json = ? WHERE run_id = ?", "update runs");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(stats_json, run_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) != 1) {
    return absl::NotFoundError(absl::StrCat("run ", run_id, " not found"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::FinishRun(int64_t run_id, RunStatus status, const std::string& reason,
                                    int64_t now_ms) {
  if (absl::Status s = CheckWritable("finish a run"); !s.ok()) return s;
  if (status == RunStatus::kRunning) {
    return absl::InvalidArgumentError("FinishRun needs a final status, not running");
  }
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE runs SET status = ?, reason = ?, ended_at_ms = ? "
      "WHERE run_id = ? AND status = 'running'",
      "update runs");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(ToString(status), reason, now_ms, run_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) == 1) return absl::OkStatus();
  absl::StatusOr<Statement> exists =
      Prepare("SELECT status FROM runs WHERE run_id = ?", "select from runs");
  if (!exists.ok()) return exists.status();
  absl::StatusOr<bool> row = exists->Bind(run_id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("run ", run_id, " not found"));
  return absl::FailedPreconditionError(
      absl::StrCat("run ", run_id, " is already ", exists->Text(0)));
}

absl::Status SqliteStore::BeginRound(const RoundRecord& round) {
  if (absl::Status s = CheckWritable("begin a round"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "INSERT INTO rounds(run_id, round, attempt, status, started_at_ms, num_sampled, "
      "metrics_json) VALUES (?, ?, ?, 'running', ?, ?, ?)",
      absl::StrCat("insert ", RoundName(round.run_id, round.round, round.attempt), " into rounds"));
  if (!st.ok()) return st.status();
  return st
      ->Bind(round.run_id, round.round, round.attempt, round.started_at_ms, round.num_sampled,
             round.metrics_json)
      .Run();
}

absl::StatusOr<std::optional<RoundStatus>> SqliteStore::AttemptStatus(int64_t run_id, int32_t round,
                                                                      int32_t attempt) {
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectRounds, "WHERE run_id = ? AND round = ? AND attempt = ?"),
              "select from rounds");
  if (!st.ok()) return st.status();
  absl::StatusOr<std::optional<RoundRecord>> r =
      sqlite::First(st->Bind(run_id, round, attempt), ReadRound);
  if (!r.ok()) return r.status();
  if (!r->has_value()) return std::nullopt;
  return (*r)->status;
}

absl::Status SqliteStore::CommitRound(const RoundRecord& round,
                                      const std::vector<ParticipationRecord>& participations) {
  if (absl::Status s = CheckWritable("commit a round"); !s.ok()) return s;
  for (const ParticipationRecord& p : participations) {
    if (p.run_id != round.run_id || p.round != round.round || p.attempt != round.attempt) {
      return absl::InvalidArgumentError(absl::StrCat(
          "participation of ", p.client_id, " belongs to ", RoundName(p.run_id, p.round, p.attempt),
          ", not to ", RoundName(round.run_id, round.round, round.attempt)));
    }
  }
  std::lock_guard lock(mu_);
  if (!durable_) return CommitRoundLocked(round, participations);
  if (absl::Status s = sqlite::Exec(db_.get(), "PRAGMA synchronous = FULL",
                                    "commit round (set synchronous=FULL)");
      !s.ok()) {
    return s;
  }
  absl::Status status = CommitRoundLocked(round, participations);
  // Failing to go back to NORMAL only costs speed (FULL is the safer mode), and the commit's
  // outcome is already decided, so it is not reported as the commit's failure.
  sqlite::Exec(db_.get(), "PRAGMA synchronous = NORMAL", "restore synchronous=NORMAL")
      .IgnoreError();
  return status;
}

absl::Status SqliteStore::CommitRoundLocked(
    const RoundRecord& round, const std::vector<ParticipationRecord>& participations) {
  const std::string name = RoundName(round.run_id, round.round, round.attempt);
  Transaction tx(db_.get(), absl::StrCat("commit ", name));
  if (!tx.status().ok()) return tx.status();

  absl::StatusOr<std::optional<RoundStatus>> current =
      AttemptStatus(round.run_id, round.round, round.attempt);
  if (!current.ok()) return current.status();
  if (!current->has_value()) return absl::NotFoundError(absl::StrCat(name, " not found"));
  if (**current != RoundStatus::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot commit ", name, ": it is ", ToString(**current), ", not running"));
  }
  absl::StatusOr<Statement> committed =
      Prepare("SELECT attempt FROM rounds WHERE run_id = ? AND round = ? AND status = 'committed'",
              "select committed attempt from rounds");
  if (!committed.ok()) return committed.status();
  absl::StatusOr<bool> row = committed->Bind(round.run_id, round.round).Step();
  if (!row.ok()) return row.status();
  if (*row) {
    return absl::FailedPreconditionError(absl::StrCat("cannot commit ", name, ": attempt ",
                                                      committed->Int(0),
                                                      " of that round is already committed"));
  }
  for (const std::string* sha : {&round.checkpoint, &round.state_checkpoint}) {
    if (sha->empty() && sha == &round.state_checkpoint) continue;  // a strategy without state
    absl::StatusOr<Statement> ckpt =
        Prepare("SELECT 1 FROM checkpoints WHERE sha256 = ?", "select from checkpoints");
    if (!ckpt.ok()) return ckpt.status();
    row = ckpt->Bind(*sha).Step();
    if (!row.ok()) return row.status();
    if (!*row) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot commit ", name, ": checkpoint '", *sha, "' has not been written"));
    }
  }

  absl::StatusOr<Statement> update = Prepare(
      "UPDATE rounds SET status = 'committed', ended_at_ms = ?, num_sampled = ?, "
      "num_reported = ?, checkpoint = ?, metrics_json = ?, reason = ?, dp_sampling_rate = ?, "
      "dp_epsilon = ?, dp_epsilon_server = ?, secagg_json = ?, state_checkpoint = ? "
      "WHERE run_id = ? AND round = ? AND attempt = ?",
      absl::StrCat("update rounds to commit ", name));
  if (!update.ok()) return update.status();
  if (absl::Status s =
          update
              ->Bind(round.ended_at_ms, round.num_sampled, round.num_reported, round.checkpoint,
                     round.metrics_json, round.reason, round.dp_sampling_rate, round.dp_epsilon,
                     round.dp_epsilon_server, round.secagg_json, round.state_checkpoint,
                     round.run_id, round.round, round.attempt)
              .Run();
      !s.ok()) {
    return s;
  }
  for (const ParticipationRecord& p : participations) {
    if (absl::Status s = InsertParticipation(db_.get(), p); !s.ok()) return s;
  }
  return tx.Commit();
}

absl::Status SqliteStore::EndRound(int64_t run_id, int32_t round, int32_t attempt,
                                   RoundStatus status, const std::string& reason, int64_t now_ms) {
  if (absl::Status s = CheckWritable("end a round"); !s.ok()) return s;
  if (status != RoundStatus::kAborted && status != RoundStatus::kFailed) {
    return absl::InvalidArgumentError(
        absl::StrCat("EndRound takes aborted or failed, not ", ToString(status)));
  }
  const std::string name = RoundName(run_id, round, attempt);
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE rounds SET status = ?, reason = ?, ended_at_ms = ? "
      "WHERE run_id = ? AND round = ? AND attempt = ? AND status = 'running'",
      absl::StrCat("update rounds to end ", name));
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(ToString(status), reason, now_ms, run_id, round, attempt).Run();
      !s.ok()) {
    return s;
  }
  if (sqlite3_changes(db_.get()) == 1) return absl::OkStatus();
  return UnchangedAttempt(run_id, round, attempt, "end");
}

absl::Status SqliteStore::SetRoundSecAgg(int64_t run_id, int32_t round, int32_t attempt,
                                         const std::string& secagg_json,
                                         const SpentPrivacy& spent) {
  if (absl::Status s = CheckWritable("record a round's secure aggregation"); !s.ok()) return s;
  const std::string name = RoundName(run_id, round, attempt);
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE rounds SET secagg_json = ?, dp_sampling_rate = ?, dp_epsilon = ?, "
      "dp_epsilon_server = ? "
      "WHERE run_id = ? AND round = ? AND attempt = ? AND status = 'running'",
      absl::StrCat("update rounds to record the secure aggregation of ", name));
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(secagg_json, spent.sampling_rate, spent.epsilon,
                                spent.epsilon_server, run_id, round, attempt)
                           .Run();
      !s.ok()) {
    return s;
  }
  if (sqlite3_changes(db_.get()) == 1) return absl::OkStatus();
  return UnchangedAttempt(run_id, round, attempt, "record the secure aggregation of");
}

absl::Status SqliteStore::SetAbortedRoundPrivacy(int64_t run_id, int32_t round, int32_t attempt,
                                                 const SpentPrivacy& spent) {
  if (absl::Status s = CheckWritable("record an aborted round's privacy"); !s.ok()) return s;
  const std::string name = RoundName(run_id, round, attempt);
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE rounds SET dp_sampling_rate = ?, dp_epsilon = ?, dp_epsilon_server = ? "
      "WHERE run_id = ? AND round = ? AND attempt = ? AND status = 'aborted'",
      absl::StrCat("update rounds to record the privacy ", name, " spent"));
  if (!st.ok()) return st.status();
  if (absl::Status s =
          st->Bind(spent.sampling_rate, spent.epsilon, spent.epsilon_server, run_id, round, attempt)
              .Run();
      !s.ok()) {
    return s;
  }
  if (sqlite3_changes(db_.get()) == 1) return absl::OkStatus();
  return UnchangedAttempt(run_id, round, attempt, "record the privacy spent as aborted by");
}

absl::Status SqliteStore::UnchangedAttempt(int64_t run_id, int32_t round, int32_t attempt,
                                           const std::string& action) {
  const std::string name = RoundName(run_id, round, attempt);
  absl::StatusOr<std::optional<RoundStatus>> current = AttemptStatus(run_id, round, attempt);
  if (!current.ok()) return current.status();
  if (!current->has_value()) return absl::NotFoundError(absl::StrCat(name, " not found"));
  return absl::FailedPreconditionError(
      absl::StrCat("cannot ", action, " ", name, ": it is ", ToString(**current)));
}

absl::StatusOr<int> SqliteStore::AbortInFlightRounds(int64_t run_id, int64_t now_ms) {
  if (absl::Status s = CheckWritable("abort rounds in flight"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE rounds SET status = 'aborted', reason = 'server restarted', ended_at_ms = ? "
      "WHERE run_id = ? AND status = 'running'",
      "update rounds to abort those in flight");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(now_ms, run_id).Run(); !s.ok()) return s;
  return sqlite3_changes(db_.get());
}

absl::StatusOr<std::vector<RoundRecord>> SqliteStore::Rounds(int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectRounds, "WHERE run_id = ? ORDER BY round, attempt"),
              "select from rounds");
  if (!st.ok()) return st.status();
  return sqlite::Collect(st->Bind(run_id), ReadRound);
}

absl::StatusOr<std::optional<RoundRecord>> SqliteStore::LastCommittedRound(int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectRounds,
                           "WHERE run_id = ? AND status = 'committed' ORDER BY round DESC LIMIT 1"),
              "select last committed round from rounds");
  if (!st.ok()) return st.status();
  return sqlite::First(st->Bind(run_id), ReadRound);
}

absl::Status SqliteStore::RecordParticipation(const ParticipationRecord& p) {
  if (absl::Status s = CheckWritable("record a participation"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  return InsertParticipation(db_.get(), p);
}

absl::StatusOr<std::vector<ParticipationRecord>> SqliteStore::Participations(int64_t run_id,
                                                                             int32_t round) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectParticipations,
                           "WHERE run_id = ? AND round = ? ORDER BY attempt, client_id"),
              "select from participations");
  if (!st.ok()) return st.status();
  return sqlite::Collect(st->Bind(run_id, round), ReadParticipation);
}

absl::StatusOr<std::vector<ParticipationCount>> SqliteStore::ParticipationCounts(
    std::optional<int64_t> run_id) {
  // Participations of an attempt always have its round row (foreign key), so the join only fails
  // to match for rows written with foreign keys off; those count with no start time.
  constexpr char kCounts[] =
      "SELECT p.client_id, "
      "SUM(p.status = 'assigned'), SUM(p.status = 'accepted'), SUM(p.status = 'refused'), "
      "SUM(p.status = 'dropped'), COALESCE(MAX(r.started_at_ms), 0) "
      "FROM participations p LEFT JOIN rounds r "
      "ON r.run_id = p.run_id AND r.round = p.round AND r.attempt = p.attempt ";
  constexpr char kGroup[] = "GROUP BY p.client_id ORDER BY p.client_id";
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      run_id.has_value() ? Prepare(absl::StrCat(kCounts, "WHERE p.run_id = ? ", kGroup),
                                   "count participations of one run")
                         : Prepare(absl::StrCat(kCounts, kGroup), "count participations");
  if (!st.ok()) return st.status();
  if (run_id.has_value()) st->Bind(*run_id);
  return sqlite::Collect(*st, [](const Statement& row) -> absl::StatusOr<ParticipationCount> {
    return ParticipationCount{.client_id = row.Text(0),
                              .assigned = row.Int(1),
                              .accepted = row.Int(2),
                              .refused = row.Int(3),
                              .dropped = row.Int(4),
                              .last_round_started_ms = row.Int(5)};
  });
}

absl::Status SqliteStore::EnrollClient(const std::string& client_id, const std::string& name,
                                       int64_t now_ms) {
  if (absl::Status s = CheckWritable("enroll a client"); !s.ok()) return s;
  if (client_id.empty()) return absl::InvalidArgumentError("cannot enroll an empty client id");
  std::lock_guard lock(mu_);
  // A client already enrolled keeps its enrollment time; a revoked one is enrolled anew.
  absl::StatusOr<Statement> st = Prepare(
      "INSERT INTO clients(client_id, name, enrolled_at_ms) VALUES (?, ?, ?) "
      "ON CONFLICT(client_id) DO UPDATE SET name = excluded.name, "
      "enrolled_at_ms = CASE WHEN revoked_at_ms != 0 THEN excluded.enrolled_at_ms "
      "ELSE enrolled_at_ms END, revoked_at_ms = 0",
      "insert into clients");
  if (!st.ok()) return st.status();
  return st->Bind(client_id, name, now_ms).Run();
}

absl::Status SqliteStore::RevokeClient(const std::string& client_id, int64_t now_ms) {
  if (absl::Status s = CheckWritable("revoke a client"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE clients SET revoked_at_ms = CASE WHEN revoked_at_ms = 0 THEN ? "
      "ELSE revoked_at_ms END WHERE client_id = ?",
      "update clients to revoke");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(now_ms, client_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("client ", client_id, " is not enrolled"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SqliteStore::IsEnrolled(const std::string& client_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("SELECT revoked_at_ms FROM clients WHERE client_id = ?", "select from clients");
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Bind(client_id).Step();
  if (!row.ok()) return row.status();
  return *row && st->Int(0) == 0;
}

absl::Status SqliteStore::TouchClient(const std::string& client_id, int64_t now_ms) {
  if (absl::Status s = CheckWritable("touch a client"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("UPDATE clients SET last_seen_ms = MAX(last_seen_ms, ?) WHERE client_id = ?",
              "update clients to touch");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(now_ms, client_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("client ", client_id, " is not enrolled"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::TouchClients(
    const std::vector<std::pair<std::string, int64_t>>& seen_ms) {
  if (seen_ms.empty()) return absl::OkStatus();
  if (absl::Status s = CheckWritable("touch clients"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  Transaction tx(db_.get(), "touch clients");
  if (!tx.status().ok()) return tx.status();
  for (const auto& [client_id, ms] : seen_ms) {
    absl::StatusOr<Statement> st =
        Prepare("UPDATE clients SET last_seen_ms = MAX(last_seen_ms, ?) WHERE client_id = ?",
                "update clients to touch");
    if (!st.ok()) return st.status();
    if (absl::Status s = st->Bind(ms, client_id).Run(); !s.ok()) return s;
  }
  return tx.Commit();
}

absl::StatusOr<std::optional<ClientRecord>> SqliteStore::Client(const std::string& client_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectClients, "WHERE client_id = ?"), "select from clients");
  if (!st.ok()) return st.status();
  absl::StatusOr<std::vector<ClientRecord>> found =
      sqlite::Collect(st->Bind(client_id), ReadClient);
  if (!found.ok()) return found.status();
  if (found->empty()) return std::nullopt;
  return std::move(found->front());
}

absl::Status SqliteStore::SetClientCertificateExpiry(const std::string& client_id,
                                                     int64_t not_after_ms) {
  if (absl::Status s = CheckWritable("record a certificate's expiry"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("UPDATE clients SET cert_not_after_ms = ? WHERE client_id = ?", "update clients");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(not_after_ms, client_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("client ", client_id, " is not enrolled"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ClientRecord>> SqliteStore::Clients() {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      absl::StrCat(kSelectClients, "ORDER BY enrolled_at_ms, client_id"), "select from clients");
  if (!st.ok()) return st.status();
  return sqlite::Collect(*st, ReadClient);
}

absl::Status SqliteStore::RecordEvaluation(int64_t run_id, int32_t round, const std::string& source,
                                           double loss, double accuracy, int64_t num_examples,
                                           int64_t now_ms,
                                           const std::map<std::string, double>& metrics) {
  if (absl::Status s = CheckWritable("record an evaluation"); !s.ok()) return s;
  absl::StatusOr<std::string> metrics_json = EvaluationMetricsJson(metrics);
  if (!metrics_json.ok()) return metrics_json.status();
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "INSERT INTO evaluations(run_id, round, source, loss, accuracy, num_examples, at_ms, "
      "metrics_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      "insert into evaluations");
  if (!st.ok()) return st.status();
  return st->Bind(run_id, round, source, loss, accuracy, num_examples, now_ms, *metrics_json).Run();
}

absl::StatusOr<std::vector<EvaluationRecord>> SqliteStore::Evaluations(int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectEvaluations, "WHERE run_id = ? ORDER BY round, id"),
              "select from evaluations");
  if (!st.ok()) return st.status();
  return sqlite::Collect(st->Bind(run_id), ReadEvaluation);
}

absl::Status SqliteStore::UpdateRunConfig(int64_t run_id, const std::string& config_json) {
  if (absl::Status s = CheckWritable("change a run's configuration"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare("UPDATE runs SET config_json = ? WHERE run_id = ?", "update a run's config_json");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(config_json, run_id).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("no run ", run_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AuditRecord>> SqliteStore::RunAuditLog(int64_t run_id, int64_t after_id,
                                                                  int limit) {
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectAudit, "WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?"),
              "select a run's audit_log");
  if (!st.ok()) return st.status();
  return sqlite::Collect(st->Bind(run_id, after_id, static_cast<int64_t>(limit)), ReadAudit);
}

absl::Status SqliteStore::Audit(const AuditRecord& record) {
  if (absl::Status s = CheckWritable("write to the audit log"); !s.ok()) return s;
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "INSERT INTO audit_log(at_ms, client_id, event, detail, run_id, round) "
      "VALUES (?, ?, ?, ?, ?, ?)",
      "insert into audit_log");
  if (!st.ok()) return st.status();
  return st
      ->Bind(record.at_ms, record.client_id, record.event, record.detail, record.run_id,
             record.round)
      .Run();
}

absl::StatusOr<std::vector<AuditRecord>> SqliteStore::AuditLog(int limit) {
  if (limit < 0) return absl::InvalidArgumentError("AuditLog limit must not be negative");
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st =
      Prepare(absl::StrCat(kSelectAudit,
                           "WHERE id IN (SELECT id FROM audit_log ORDER BY id DESC LIMIT ?) "
                           "ORDER BY id"),
              "select from audit_log");
  if (!st.ok()) return st.status();
  return sqlite::Collect(st->Bind(limit), ReadAudit);
}

}  // namespace internal

using internal::kCheckpointSubdir;
using internal::kDbFile;
using internal::SqliteStore;

absl::StatusOr<std::string> DataDirectoryOf(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st) || std::filesystem::is_directory(st)) return path;
  const std::filesystem::path file(path);
  if (std::filesystem::is_regular_file(st) && file.filename() == kDbFile) {
    return file.has_parent_path() ? file.parent_path().string() : std::string(".");
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path, " is a file but not a federation database (a server's is named ", kDbFile,
                   "); give a server's data directory or the federation.db file in it"));
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& data_dir,
                                                   const StoreOpenOptions& options) {
  const std::string checkpoints = absl::StrCat(data_dir, "/", kCheckpointSubdir);
  if (absl::Status s = MakeDirectories(checkpoints); !s.ok()) return s;
  if (options.remove_stale_temp_files) RemoveStaleTempFiles(checkpoints);
  absl::StatusOr<sqlite::DbPtr> db = sqlite::OpenDatabase(absl::StrCat(data_dir, "/", kDbFile));
  if (!db.ok()) return db.status();
  absl::StatusOr<int> version = sqlite::Migrate(db->get());
  if (!version.ok()) return version.status();
  if (!options.durable) {
    if (absl::Status s = sqlite::Exec(db->get(), "PRAGMA synchronous = OFF", "set synchronous=OFF");
        !s.ok()) {
      return s;
    }
  }
  return std::make_unique<SqliteStore>(data_dir, *std::move(db), *version, /*read_only=*/false,
                                       options.durable);
}

absl::StatusOr<std::unique_ptr<Store>> Store::OpenReadOnly(const std::string& data_dir) {
  const std::string path = absl::StrCat(data_dir, "/", kDbFile);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no federation database at ", path));
  }
  absl::StatusOr<sqlite::DbPtr> db = sqlite::OpenDatabaseReadOnly(path);
  if (!db.ok()) return db.status();
  absl::StatusOr<int> version = sqlite::SchemaVersion(db->get());
  if (!version.ok()) {
    if (absl::IsFailedPrecondition(version.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", std::string(version.status().message())));
    }
    return version.status();
  }
  if (*version != sqlite::LatestSchemaVersion()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is at schema version ", *version, " but this program reads version ",
                     sqlite::LatestSchemaVersion(),
                     *version < sqlite::LatestSchemaVersion()
                         ? "; start this version's server on it once to migrate it"
                         : "; use the newer program that wrote it"));
  }
  return std::make_unique<SqliteStore>(data_dir, *std::move(db), *version, /*read_only=*/true);
}

}  // namespace fl::server
