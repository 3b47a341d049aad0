#include "server/store/records.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace fl::server {

const char* ToString(RunStatus s) {
  switch (s) {
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kFinished:
      return "finished";
    case RunStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

const char* ToString(RoundStatus s) {
  switch (s) {
    case RoundStatus::kRunning:
      return "running";
    case RoundStatus::kCommitted:
      return "committed";
    case RoundStatus::kAborted:
      return "aborted";
    case RoundStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

const char* ToString(ParticipationStatus s) {
  switch (s) {
    case ParticipationStatus::kAssigned:
      return "assigned";
    case ParticipationStatus::kAccepted:
      return "accepted";
    case ParticipationStatus::kRefused:
      return "refused";
    case ParticipationStatus::kDropped:
      return "dropped";
  }
  return "unknown";
}

using sqlite::Statement;

namespace {

template <typename E, size_t N>
absl::StatusOr<E> ParseStatus(absl::string_view text, const std::array<E, N>& all,
                              absl::string_view table) {
  for (E e : all) {
    if (text == ToString(e)) return e;
  }
  return absl::DataLossError(absl::StrCat(table, " holds an unknown status '", text, "'"));
}

}  // namespace

absl::StatusOr<RunRecord> ReadRun(const Statement& st) {
  RunRecord r{.run_id = st.Int(0),
              .name = st.Text(1),
              .config_json = st.Text(2),
              .model_spec_json = st.Text(3),
              .initial_checkpoint = st.Text(4),
              .reason = st.Text(6),
              .created_at_ms = st.Int(7),
              .ended_at_ms = st.Int(8)};
  absl::StatusOr<RunStatus> status = ParseStatus(
      st.Text(5), std::array{RunStatus::kRunning, RunStatus::kFinished, RunStatus::kFailed},
      "runs");
  if (!status.ok()) return status.status();
  r.status = *status;
  return r;
}

absl::StatusOr<RoundRecord> ReadRound(const Statement& st) {
  RoundRecord r{.run_id = st.Int(0),
                .round = static_cast<int32_t>(st.Int(1)),
                .attempt = static_cast<int32_t>(st.Int(2)),
                .started_at_ms = st.Int(4),
                .ended_at_ms = st.Int(5),
                .num_sampled = static_cast<int32_t>(st.Int(6)),
                .num_reported = static_cast<int32_t>(st.Int(7)),
                .checkpoint = st.Text(8),
                .metrics_json = st.Text(9),
                .reason = st.Text(10),
                .dp_sampling_rate = st.Double(11),
                .dp_epsilon = st.Double(12),
                .dp_epsilon_server = st.Double(15),
                .secagg_json = st.Text(13),
                .state_checkpoint = st.Text(14)};
  absl::StatusOr<RoundStatus> status =
      ParseStatus(st.Text(3),
                  std::array{RoundStatus::kRunning, RoundStatus::kCommitted, RoundStatus::kAborted,
                             RoundStatus::kFailed},
                  "rounds");
  if (!status.ok()) return status.status();
  r.status = *status;
  return r;
}

absl::StatusOr<ParticipationRecord> ReadParticipation(const Statement& st) {
  ParticipationRecord p{.run_id = st.Int(0),
                        .round = static_cast<int32_t>(st.Int(1)),
                        .attempt = static_cast<int32_t>(st.Int(2)),
                        .client_id = st.Text(3),
                        .task_id = st.Text(4),
                        .num_examples = st.Int(6),
                        .bytes_received = st.Int(7),
                        .metrics_json = st.Text(8),
                        .reason = st.Text(9)};
  absl::StatusOr<ParticipationStatus> status =
      ParseStatus(st.Text(5),
                  std::array{ParticipationStatus::kAssigned, ParticipationStatus::kAccepted,
                             ParticipationStatus::kRefused, ParticipationStatus::kDropped},
                  "participations");
  if (!status.ok()) return status.status();
  p.status = *status;
  return p;
}

absl::StatusOr<ClientRecord> ReadClient(const Statement& st) {
  return ClientRecord{.client_id = st.Text(0),
                      .name = st.Text(1),
                      .enrolled_at_ms = st.Int(2),
                      .revoked_at_ms = st.Int(3),
                      .last_seen_ms = st.Int(4),
                      .cert_not_after_ms = st.Int(5)};
}

absl::StatusOr<EvaluationRecord> ReadEvaluation(const Statement& st) {
  EvaluationRecord e{.id = st.Int(0),
                     .run_id = st.Int(1),
                     .round = static_cast<int32_t>(st.Int(2)),
                     .source = st.Text(3),
                     .loss = st.Double(4),
                     .accuracy = st.Double(5),
                     .num_examples = st.Int(6),
                     .at_ms = st.Int(7),
                     .metrics = {}};
  const std::string text = st.Text(8);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::DataLossError(absl::StrCat(
        "evaluations row ", e.id, " holds metrics_json that is not a JSON object: '", text, "'"));
  }
  for (const auto& [name, value] : j.items()) {
    if (!value.is_number()) {
      return absl::DataLossError(absl::StrCat("evaluations row ", e.id, " holds metric '", name,
                                              "' that is not a number: ", value.dump()));
    }
    e.metrics[name] = value.get<double>();
  }
  return e;
}

absl::StatusOr<std::string> EvaluationMetricsJson(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : metrics) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("evaluation metric '", name, "' is not finite (", value, ")"));
    }
    j[name] = value;
  }
  return j.dump();
}

absl::StatusOr<AuditRecord> ReadAudit(const Statement& st) {
  return AuditRecord{.id = st.Int(0),
                     .at_ms = st.Int(1),
                     .client_id = st.Text(2),
                     .event = st.Text(3),
                     .detail = st.Text(4),
                     .run_id = st.Int(5),
                     .round = static_cast<int32_t>(st.Int(6))};
}

absl::Status InsertParticipation(sqlite3* db, const ParticipationRecord& p) {
  absl::StatusOr<Statement> st = Statement::Prepare(
      db,
      "INSERT OR REPLACE INTO participations(run_id, round, attempt, client_id, task_id, status, "
      "num_examples, bytes_received, metrics_json, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "insert into participations");
  if (!st.ok()) return st.status();
  return st
      ->Bind(p.run_id, p.round, p.attempt, p.client_id, p.task_id, ToString(p.status),
             p.num_examples, p.bytes_received, p.metrics_json, p.reason)
      .Run();
}

}  // namespace fl::server
