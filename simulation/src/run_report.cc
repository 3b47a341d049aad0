#include "fl/simulation/run_report.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/common/model.h"
#include "nlohmann/json.hpp"

namespace fl::simulation {
namespace {

using server::EvaluationRecord;
using server::ParticipationRecord;
using server::ParticipationStatus;
using server::RoundRecord;
using server::RoundStatus;
using server::RunRecord;
using server::RunStatus;

double Seconds(int64_t from_ms, int64_t to_ms) {
  return static_cast<double>(to_ms - from_ms) / 1000.0;
}

// The numbers of a metrics JSON object; nothing when it does not parse or is not an object.
void AddNumbers(const std::string& metrics_json, std::map<std::string, double>& out) {
  const nlohmann::json m = nlohmann::json::parse(metrics_json, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return;
  for (const auto& [name, value] : m.items()) {
    if (value.is_number()) out[name] = value.get<double>();
  }
}

// The global model's float32 size, or 0 when the spec does not parse.
int64_t ModelBytes(const std::string& model_spec_json) {
  absl::StatusOr<ModelSpec> spec = ModelSpec::FromJson(model_spec_json);
  return spec.ok() ? spec->NumBytes() : 0;
}

// Each round's newest federated evaluation, as "eval_<name>" metrics.
std::map<int32_t, std::map<std::string, double>> FederatedEvaluations(
    const std::vector<EvaluationRecord>& evaluations) {
  std::map<int32_t, std::map<std::string, double>> out;
  for (const EvaluationRecord& e : evaluations) {
    if (e.source != "federated") continue;
    std::map<std::string, double> values;
    for (const auto& [name, value] : e.metrics) values["eval_" + name] = value;
    // Rows from before schema version 2 have only the accuracy column.
    if (e.metrics.empty()) values["eval_accuracy"] = e.accuracy;
    values["eval_loss"] = e.loss;
    out[e.round] = std::move(values);
  }
  return out;
}

}  // namespace

absl::StatusOr<RunReport> ReportFromStore(server::Store& store, int64_t run_id, int64_t now_ms) {
  absl::StatusOr<RunRecord> run = store.GetRun(run_id);
  if (!run.ok()) {
    if (absl::IsNotFound(run.status())) {
      return absl::NotFoundError(absl::StrCat("no run ", run_id, " in ", store.db_path()));
    }
    return run.status();
  }
  absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds(run_id);
  if (!rounds.ok()) return rounds.status();
  absl::StatusOr<std::vector<EvaluationRecord>> evaluations = store.Evaluations(run_id);
  if (!evaluations.ok()) return evaluations.status();
  const std::map<int32_t, std::map<std::string, double>> eval_by_round =
      FederatedEvaluations(*evaluations);

  RunReport report;
  report.title = run->name.empty() ? absl::StrCat("run ", run_id) : run->name;
  report.run_id = run_id;
  report.status = server::ToString(run->status);
  report.reason = run->reason;
  report.configuration_json = run->config_json;
  const bool run_ended = run->status != RunStatus::kRunning && run->ended_at_ms > 0;
  report.wall_seconds = Seconds(run->created_at_ms, run_ended ? run->ended_at_ms : now_ms);

  const int64_t model_bytes = ModelBytes(run->model_spec_json);
  // Participations(run, round) holds every attempt's: read each round once.
  int32_t participations_round = -1;
  std::vector<ParticipationRecord> participations;
  for (const RoundRecord& r : *rounds) {
    if (r.round != participations_round) {
      absl::StatusOr<std::vector<ParticipationRecord>> read = store.Participations(run_id, r.round);
      if (!read.ok()) return read.status();
      participations = *std::move(read);
      participations_round = r.round;
    }
    ReportRound out;
    out.round = r.round;
    out.attempt = r.attempt;
    out.committed = r.status == RoundStatus::kCommitted;
    out.num_sampled = r.num_sampled;
    int32_t accepted = 0;
    int64_t handed_a_task = 0;
    for (const ParticipationRecord& p : participations) {
      if (p.attempt != r.attempt) continue;
      ++handed_a_task;
      out.bytes_up += p.bytes_received;
      if (p.status == ParticipationStatus::kAccepted) ++accepted;
    }
    out.num_accepted = out.committed ? r.num_reported : accepted;
    out.bytes_down = model_bytes * handed_a_task;
    const bool running = r.status == RoundStatus::kRunning;
    out.duration_s = Seconds(r.started_at_ms, running ? now_ms : r.ended_at_ms);
    AddNumbers(r.metrics_json, out.metrics);
    if (r.dp_epsilon > 0) out.metrics["dp_epsilon"] = r.dp_epsilon;
    if (r.dp_epsilon_server > 0) out.metrics["dp_epsilon_server"] = r.dp_epsilon_server;
    if (out.committed) {
      if (auto it = eval_by_round.find(r.round); it != eval_by_round.end()) {
        for (const auto& [name, value] : it->second) out.metrics[name] = value;
      }
    }
    out.reason = running && r.reason.empty() ? "still running" : r.reason;
    report.rounds.push_back(std::move(out));
  }
  return report;
}

absl::StatusOr<RunReport> ReportFromStore(server::Store& store, int64_t run_id) {
  return ReportFromStore(store, run_id, absl::ToUnixMillis(absl::Now()));
}

absl::StatusOr<int64_t> NewestRunId(server::Store& store) {
  absl::StatusOr<std::vector<RunRecord>> runs = store.Runs();
  if (!runs.ok()) return runs.status();
  if (runs->empty()) return absl::NotFoundError(absl::StrCat("no run yet in ", store.db_path()));
  int64_t newest = runs->front().run_id;
  for (const RunRecord& r : *runs) newest = std::max(newest, r.run_id);
  return newest;
}

}  // namespace fl::simulation
