// The Store on SQLite (internal to server/store): one connection in WAL mode behind one mutex,
// plus checkpoint files. sqlite_store.cc holds the tables, sqlite_checkpoints.cc the checkpoint
// files and their retention.
#ifndef FL_SERVER_STORE_SQLITE_STORE_H_
#define FL_SERVER_STORE_SQLITE_STORE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fl/server/store.h"
#include "server/store/sqlite_util.h"

namespace fl::server::internal {

inline constexpr char kDbFile[] = "federation.db";
inline constexpr char kCheckpointSubdir[] = "checkpoints";
// Held shared by `fl admin backup` while it copies checkpoints, taken exclusively (without
// waiting) by the retention policy, which skips a pass while a backup runs.
inline constexpr char kRetentionLockFile[] = "checkpoints/.retention.lock";

inline int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string data_dir, sqlite::DbPtr db, int version, bool read_only,
              bool durable = true)
      : data_dir_(std::move(data_dir)),
        schema_version_(version),
        read_only_(read_only),
        durable_(durable),
        db_(std::move(db)) {}

  std::string db_path() const override { return absl::StrCat(data_dir_, "/", kDbFile); }
  std::string checkpoint_dir() const override {
    return absl::StrCat(data_dir_, "/", kCheckpointSubdir);
  }
  int schema_version() const override { return schema_version_; }
  bool read_only() const override { return read_only_; }

  absl::StatusOr<int64_t> CreateRun(const RunRecord& run) override;
  absl::StatusOr<std::optional<RunRecord>> ActiveRun() override;
  absl::StatusOr<RunRecord> GetRun(int64_t run_id) override;
  absl::StatusOr<std::vector<RunRecord>> Runs() override;
  absl::Status FinishRun(int64_t run_id, RunStatus status, const std::string& reason,
                         int64_t now_ms) override;
  absl::StatusOr<std::string> ClaimFeatureSchema(int64_t run_id,
                                                 const std::string& schema_json) override;
  absl::StatusOr<std::string> FeatureStatistics(int64_t run_id) override;
  absl::Status ResetFeatureSchema(int64_t run_id) override;
  absl::Status SetFeatureStatistics(int64_t run_id, const std::string& stats_json) override;
  absl::Status BeginRound(const RoundRecord& round) override;
  absl::Status CommitRound(const RoundRecord& round,
                           const std::vector<ParticipationRecord>& participations) override;
  absl::Status EndRound(int64_t run_id, int32_t round, int32_t attempt, RoundStatus status,
                        const std::string& reason, int64_t now_ms) override;
  absl::Status SetRoundSecAgg(int64_t run_id, int32_t round, int32_t attempt,
                              const std::string& secagg_json, const SpentPrivacy& spent) override;
  absl::Status SetAbortedRoundPrivacy(int64_t run_id, int32_t round, int32_t attempt,
                                      const SpentPrivacy& spent) override;
  absl::StatusOr<int> AbortInFlightRounds(int64_t run_id, int64_t now_ms) override;
  absl::StatusOr<std::vector<RoundRecord>> Rounds(int64_t run_id) override;
  absl::StatusOr<std::optional<RoundRecord>> LastCommittedRound(int64_t run_id) override;
  absl::Status RecordParticipation(const ParticipationRecord& p) override;
  absl::StatusOr<std::vector<ParticipationRecord>> Participations(int64_t run_id,
                                                                  int32_t round) override;
  absl::StatusOr<std::vector<ParticipationCount>> ParticipationCounts(
      std::optional<int64_t> run_id) override;
  absl::Status EnrollClient(const std::string& client_id, const std::string& name,
                            int64_t now_ms) override;
  absl::Status RevokeClient(const std::string& client_id, int64_t now_ms) override;
  absl::StatusOr<bool> IsEnrolled(const std::string& client_id) override;
  absl::StatusOr<std::optional<ClientRecord>> Client(const std::string& client_id) override;
  absl::Status TouchClient(const std::string& client_id, int64_t now_ms) override;
  absl::Status TouchClients(const std::vector<std::pair<std::string, int64_t>>& seen_ms) override;
  absl::StatusOr<std::vector<ClientRecord>> Clients() override;
  absl::Status SetClientCertificateExpiry(const std::string& client_id,
                                          int64_t not_after_ms) override;
  absl::Status RevokeCertificate(const std::string& fingerprint, const std::string& name,
                                 int64_t now_ms) override;
  absl::StatusOr<std::optional<int64_t>> CertificateRevokedAt(
      const std::string& fingerprint) override;
  absl::Status RecordEvaluation(int64_t run_id, int32_t round, const std::string& source,
                                double loss, double accuracy, int64_t num_examples, int64_t now_ms,
                                const std::map<std::string, double>& metrics) override;
  absl::StatusOr<std::vector<EvaluationRecord>> Evaluations(int64_t run_id) override;
  absl::StatusOr<std::string> WriteCheckpoint(const Model& model) override;
  absl::StatusOr<Model> ReadCheckpoint(const std::string& sha256) override;
  absl::StatusOr<int64_t> PruneCheckpoints(int32_t keep_last, int32_t keep_every) override;
  absl::Status Audit(const AuditRecord& record) override;
  absl::StatusOr<std::vector<AuditRecord>> AuditLog(int limit) override;
  absl::Status UpdateRunConfig(int64_t run_id, const std::string& config_json) override;
  absl::StatusOr<std::vector<AuditRecord>> RunAuditLog(int64_t run_id, int64_t after_id,
                                                       int limit) override;

 private:
  // FAILED_PRECONDITION naming `what` when the store was opened read-only.
  absl::Status CheckWritable(absl::string_view what) const {
    if (!read_only_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot ", what, ": the store at ", data_dir_, " is open read-only"));
  }
  absl::StatusOr<sqlite::Statement> Prepare(absl::string_view sql, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return sqlite::Statement::Prepare(db_.get(), sql, what);
  }
  // The status of one attempt, or nullopt when there is no such attempt.
  absl::StatusOr<std::optional<RoundStatus>> AttemptStatus(int64_t run_id, int32_t round,
                                                           int32_t attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why an UPDATE of one attempt's row that requires a status changed nothing: NOT_FOUND when there
  // is no such attempt, else FAILED_PRECONDITION "cannot <action> <name>: it is <status>".
  absl::Status UnchangedAttempt(int64_t run_id, int32_t round, int32_t attempt,
                                const std::string& action) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CommitRoundLocked(const RoundRecord& round,
                                 const std::vector<ParticipationRecord>& participations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string data_dir_;
  const int schema_version_;
  const bool read_only_;
  const bool durable_;        // StoreOpenOptions::durable
  std::mutex checkpoint_mu_;  // checkpoint files: written or removed, one at a time; before mu_
  std::mutex mu_;
  sqlite::DbPtr db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fl::server::internal

#endif  // FL_SERVER_STORE_SQLITE_STORE_H_
