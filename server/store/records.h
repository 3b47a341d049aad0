// Rows of the store's tables as the records of fl/server/store.h, private to the store: the column
// lists of the SELECTs and the readers that turn one result row into a record.
#ifndef FL_SERVER_STORE_RECORDS_H_
#define FL_SERVER_STORE_RECORDS_H_

#include <sqlite3.h>

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/server/store.h"
#include "server/store/sqlite_util.h"

namespace fl::server {

// Each SELECT ends with a space so that a WHERE clause can follow; each reader expects the
// columns in that order and returns DATA_LOSS for a status string it does not know.
inline constexpr char kSelectRuns[] =
    "SELECT run_id, name, config_json, model_spec_json, initial_checkpoint, status, reason, "
    "created_at_ms, ended_at_ms FROM runs ";
absl::StatusOr<RunRecord> ReadRun(const sqlite::Statement& st);

inline constexpr char kSelectRounds[] =
    "SELECT run_id, round, attempt, status, started_at_ms, ended_at_ms, num_sampled, "
    "num_reported, checkpoint, metrics_json, reason, dp_sampling_rate, dp_epsilon, secagg_json, "
    "state_checkpoint, dp_epsilon_server "
    "FROM rounds ";
absl::StatusOr<RoundRecord> ReadRound(const sqlite::Statement& st);

inline constexpr char kSelectParticipations[] =
    "SELECT run_id, round, attempt, client_id, task_id, status, num_examples, bytes_received, "
    "metrics_json, reason FROM participations ";
absl::StatusOr<ParticipationRecord> ReadParticipation(const sqlite::Statement& st);

inline constexpr char kSelectClients[] =
    "SELECT client_id, name, enrolled_at_ms, revoked_at_ms, last_seen_ms, cert_not_after_ms "
    "FROM clients ";
absl::StatusOr<ClientRecord> ReadClient(const sqlite::Statement& st);

inline constexpr char kSelectEvaluations[] =
    "SELECT id, run_id, round, source, loss, accuracy, num_examples, at_ms, metrics_json "
    "FROM evaluations ";
// DATA_LOSS when metrics_json is not a JSON object of numbers.
absl::StatusOr<EvaluationRecord> ReadEvaluation(const sqlite::Statement& st);

// An evaluation's metrics as the JSON object stored in evaluations.metrics_json ("{}" when empty).
// INVALID_ARGUMENT naming the metric when a value is not finite.
absl::StatusOr<std::string> EvaluationMetricsJson(const std::map<std::string, double>& metrics);

inline constexpr char kSelectAudit[] =
    "SELECT id, at_ms, client_id, event, detail, run_id, round FROM audit_log ";
absl::StatusOr<AuditRecord> ReadAudit(const sqlite::Statement& st);

// Inserts or replaces one participation (keyed by run, round, attempt and client).
absl::Status InsertParticipation(sqlite3* db, const ParticipationRecord& p);

}  // namespace fl::server

#endif  // FL_SERVER_STORE_RECORDS_H_
