// The reports of `fl admin`. Enrollment and revocation are in enroll.cc.
#include "server/admin/admin.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/admin/format.h"

namespace fl::server::admin {
namespace {

using internal::CsvLine;
using internal::CsvText;
using internal::FormatTime;
using internal::MetricsSummary;
using internal::ParseMetrics;
using internal::TextTable;
using Json = nlohmann::ordered_json;  // fields in the documented order

std::string DumpJson(const Json& j) {
  // Text from clients may not be valid UTF-8; replacing it keeps dump() from throwing.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string ShortId(const std::string& client_id) {
  if (client_id.empty()) return "-";
  return client_id.substr(0, kTableIdDigits);
}

std::optional<int64_t> DurationMs(const RoundRecord& r) {
  if (r.ended_at_ms == 0) return std::nullopt;
  return r.ended_at_ms - r.started_at_ms;
}

// The configured number of rounds of a run, when its configuration says.
std::optional<int64_t> ConfiguredRounds(const RunRecord& run) {
  Json j = Json::parse(run.config_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto it = j.find("num_rounds");
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

// The run's federated evaluation of each round ("loss" and every metric by name), for the rows of
// the round's committed attempt. A row from before schema version 2 has only its accuracy column.
using EvalByRound = std::map<int32_t, std::map<std::string, double>>;
EvalByRound FederatedEvaluations(const std::vector<EvaluationRecord>& evaluations) {
  EvalByRound out;
  for (const EvaluationRecord& e : evaluations) {
    if (e.source != "federated") continue;
    std::map<std::string, double> values = e.metrics;
    if (values.empty()) values["accuracy"] = e.accuracy;
    values["loss"] = e.loss;
    out[e.round] = std::move(values);  // the newest, should a round have been evaluated twice
  }
  return out;
}

// Whether any round ran with differential privacy (then the epsilon spent is shown).
// Whether the attempt's epsilon is known: a committed round's, or an attempt whose release was
// counted. A running attempt whose masks are coming off already records its sampling rate (so a
// restart can count the release) but has spent nothing yet that the store shows.
bool SpentKnown(const RoundRecord& r) {
  return r.dp_sampling_rate > 0 && (r.status == RoundStatus::kCommitted || r.dp_epsilon > 0);
}

bool AnyPrivacy(const std::vector<RoundRecord>& rounds) {
  for (const RoundRecord& r : rounds) {
    if (SpentKnown(r)) return true;
  }
  return false;
}

bool AnyServerEpsilon(const std::vector<RoundRecord>& rounds) {
  return std::any_of(rounds.begin(), rounds.end(),
                     [](const RoundRecord& r) { return r.dp_epsilon_server > 0; });
}

// Whether any round ran with secure aggregation (then who took part in each stage is shown).
bool AnySecAgg(const std::vector<RoundRecord>& rounds) {
  for (const RoundRecord& r : rounds) {
    if (!r.secagg_json.empty()) return true;
  }
  return false;
}

// "10 > 10 > 9 > 9 > 9": the clients left after each secure stage (keys, shares, masked input,
// the survivors' signatures, unmasking), from the round's secagg_json (rounds recorded before the
// signatures have four); "-" for a round without it.
std::string SecAggSummary(const RoundRecord& r) {
  if (r.secagg_json.empty()) return "-";
  Json j = Json::parse(r.secagg_json, nullptr, false);
  if (!j.is_object()) return "?";
  std::string out;
  for (const char* key : {"u1", "u2", "u3", "signed", "u4"}) {
    const bool old_record = std::string_view(key) == "signed" && !j.contains(key);
    if (old_record) continue;
    if (!j.contains(key) || !j[key].is_number_integer()) break;
    absl::StrAppend(&out, out.empty() ? "" : ">", j[key].get<int64_t>());
  }
  return out.empty() ? "-" : out;
}

const std::map<std::string, double>* EvaluationOf(const RoundRecord& r, const EvalByRound& evals) {
  if (r.status != RoundStatus::kCommitted) return nullptr;
  auto it = evals.find(r.round);
  return it == evals.end() ? nullptr : &it->second;
}

std::string RoundsTable(const RunRecord& run, const std::vector<RoundRecord>& rounds,
                        const EvalByRound& evals) {
  // The EVALUATION column (the federated evaluation's loss and metrics) only when there is one.
  const bool with_eval = !evals.empty();
  // The EPSILON column (spent by the run up to the round) only with differential privacy, and
  // EPS_SERVER (the most exposed site's against the server) with distributed DP.
  const bool with_dp = AnyPrivacy(rounds);
  const bool with_server = AnyServerEpsilon(rounds);
  // The SECAGG column (clients left after each secure stage) only with secure aggregation.
  const bool with_secagg = AnySecAgg(rounds);
  std::vector<std::string> header = {"ROUND",    "ATTEMPT",     "STATUS", "SAMPLED",
                                     "REPORTED", "DURATION_MS", "METRICS"};
  if (with_dp) header.push_back("EPSILON");
  if (with_server) header.push_back("EPS_SERVER");
  if (with_secagg) header.push_back("SECAGG_U1>U2>U3>SIGNED>U4");
  if (with_eval) header.push_back("EVALUATION");
  header.push_back("REASON");
  TextTable table(std::move(header));
  for (const RoundRecord& r : rounds) {
    std::optional<int64_t> duration = DurationMs(r);
    std::vector<std::string> row = {absl::StrCat(r.round),
                                    absl::StrCat(r.attempt),
                                    ToString(r.status),
                                    absl::StrCat(r.num_sampled),
                                    absl::StrCat(r.num_reported),
                                    duration ? absl::StrCat(*duration) : "-",
                                    MetricsSummary(ParseMetrics(r.metrics_json))};
    if (with_dp) {
      row.push_back(SpentKnown(r) ? internal::FormatDouble(r.dp_epsilon) : "-");
    }
    if (with_server) {
      row.push_back(r.dp_epsilon_server > 0 ? internal::FormatDouble(r.dp_epsilon_server) : "-");
    }
    if (with_secagg) row.push_back(SecAggSummary(r));
    if (with_eval) {
      const std::map<std::string, double>* eval = EvaluationOf(r, evals);
      row.push_back(eval == nullptr ? "-" : MetricsSummary(*eval));
    }
    row.push_back(r.reason);
    table.AddRow(std::move(row));
  }
  return absl::StrCat("Run ", run.run_id, " '", internal::TableText(run.name), "' (",
                      ToString(run.status), "), ", rounds.size(), " attempts\n", table.Render());
}

std::string RoundsCsv(const std::vector<RoundRecord>& rounds, const EvalByRound& evals) {
  std::set<std::string> metric_names;
  std::vector<std::map<std::string, double>> metrics;
  for (const RoundRecord& r : rounds) {
    metrics.push_back(ParseMetrics(r.metrics_json));
    for (const auto& [name, value] : metrics.back()) metric_names.insert(name);
  }
  std::set<std::string> eval_names;
  for (const auto& [round, values] : evals) {
    for (const auto& [name, value] : values) eval_names.insert(name);
  }
  std::vector<std::string> header = {"run_id",        "round",       "attempt",     "status",
                                     "started_at_ms", "ended_at_ms", "duration_ms", "num_sampled",
                                     "num_reported",  "checkpoint",  "reason"};
  const bool with_dp = AnyPrivacy(rounds);
  if (with_dp) {
    header.push_back("dp_sampling_rate");
    header.push_back("dp_epsilon");
    header.push_back("dp_epsilon_server");
  }
  const bool with_secagg = AnySecAgg(rounds);
  if (with_secagg) header.push_back("secagg_u1_u2_u3_signed_u4");
  for (const std::string& name : metric_names) header.push_back(CsvText("metric_" + name));
  for (const std::string& name : eval_names) header.push_back(CsvText("eval_" + name));
  std::string out = CsvLine(header);
  for (size_t i = 0; i < rounds.size(); ++i) {
    const RoundRecord& r = rounds[i];
    std::optional<int64_t> duration = DurationMs(r);
    std::vector<std::string> row = {absl::StrCat(r.run_id),
                                    absl::StrCat(r.round),
                                    absl::StrCat(r.attempt),
                                    ToString(r.status),
                                    absl::StrCat(r.started_at_ms),
                                    absl::StrCat(r.ended_at_ms),
                                    duration ? absl::StrCat(*duration) : "",
                                    absl::StrCat(r.num_sampled),
                                    absl::StrCat(r.num_reported),
                                    CsvText(r.checkpoint),
                                    CsvText(r.reason)};
    if (with_dp && SpentKnown(r)) {
      row.push_back(internal::FormatDouble(r.dp_sampling_rate));
      row.push_back(internal::FormatDouble(r.dp_epsilon));
      row.push_back(r.dp_epsilon_server > 0 ? internal::FormatDouble(r.dp_epsilon_server) : "");
    } else if (with_dp) {
      row.push_back("");
      row.push_back("");
      row.push_back("");
    }
    if (with_secagg) row.push_back(r.secagg_json.empty() ? "" : SecAggSummary(r));
    for (const std::string& name : metric_names) {
      auto it = metrics[i].find(name);
      row.push_back(it == metrics[i].end() ? "" : internal::FormatDouble(it->second));
    }
    const std::map<std::string, double>* eval = EvaluationOf(r, evals);
    for (const std::string& name : eval_names) {
      if (eval == nullptr || eval->count(name) == 0) {
        row.push_back("");
      } else {
        row.push_back(internal::FormatDouble(eval->at(name)));
      }
    }
    absl::StrAppend(&out, CsvLine(row));
  }
  return out;
}

Json RoundsJson(const RunRecord& run, const std::vector<RoundRecord>& rounds,
                const std::vector<EvaluationRecord>& evaluations) {
  Json out = {{"run",
               {{"run_id", run.run_id},
                {"name", run.name},
                {"status", ToString(run.status)},
                {"reason", run.reason},
                {"created_at_ms", run.created_at_ms},
                {"ended_at_ms", run.ended_at_ms}}},
              {"rounds", Json::array()},
              {"evaluations", Json::array()}};
  for (const RoundRecord& r : rounds) {
    std::optional<int64_t> duration = DurationMs(r);
    Json metrics = Json::object();
    for (const auto& [name, value] : ParseMetrics(r.metrics_json)) metrics[name] = value;
    out["rounds"].push_back({{"run_id", r.run_id},
                             {"round", r.round},
                             {"attempt", r.attempt},
                             {"status", ToString(r.status)},
                             {"started_at_ms", r.started_at_ms},
                             {"ended_at_ms", r.ended_at_ms},
                             {"duration_ms", duration ? Json(*duration) : Json(nullptr)},
                             {"num_sampled", r.num_sampled},
                             {"num_reported", r.num_reported},
                             {"checkpoint", r.checkpoint},
                             {"reason", r.reason},
                             {"metrics", std::move(metrics)}});
    if (SpentKnown(r)) {
      out["rounds"].back()["dp_sampling_rate"] = r.dp_sampling_rate;
      out["rounds"].back()["dp_epsilon"] = r.dp_epsilon;
      if (r.dp_epsilon_server > 0) {
        out["rounds"].back()["dp_epsilon_server"] = r.dp_epsilon_server;
      }
    }
    if (!r.secagg_json.empty()) {
      Json secagg = Json::parse(r.secagg_json, nullptr, false);
      if (secagg.is_object()) out["rounds"].back()["secure_aggregation"] = std::move(secagg);
    }
  }
  for (const EvaluationRecord& e : evaluations) {
    Json metrics = Json::object();
    for (const auto& [name, value] : e.metrics) metrics[name] = value;
    out["evaluations"].push_back({{"round", e.round},
                                  {"source", e.source},
                                  {"loss", e.loss},
                                  {"accuracy", e.accuracy},
                                  {"num_examples", e.num_examples},
                                  {"at_ms", e.at_ms},
                                  {"metrics", std::move(metrics)}});
  }
  return out;
}

// A client row of ClientsReport: the enrollment (absent for an identity that was never enrolled)
// and the participation counts (zero when never sampled).
struct ClientRow {
  ClientRecord client;
  bool enrolled_ever = true;
  ParticipationCount counts;
};

const char* ClientStatus(const ClientRow& row) {
  if (!row.enrolled_ever) return "not_enrolled";
  return row.client.revoked_at_ms != 0 ? "revoked" : "enrolled";
}

}  // namespace

absl::StatusOr<Format> ParseFormat(absl::string_view name) {
  if (name == "table") return Format::kTable;
  if (name == "csv") return Format::kCsv;
  if (name == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", name, "': choose table, csv or json"));
}

absl::StatusOr<RunRecord> ResolveRun(Store& store, std::optional<int64_t> run_id) {
  if (run_id.has_value()) return store.GetRun(*run_id);
  absl::StatusOr<std::vector<RunRecord>> runs = store.Runs();
  if (!runs.ok()) return runs.status();
  if (runs->empty()) {
    return absl::NotFoundError(absl::StrCat("no run yet in ", store.db_path()));
  }
  return std::move(runs->back());
}

namespace {

// One run's line of StatusReport.
struct RunStatusLine {
  const RunRecord* run = nullptr;
  int committed = 0;
  std::optional<int64_t> configured;
  int64_t attempts = 0;
  const RoundRecord* last_attempt = nullptr;   // the newest attempt, if any
  std::map<std::string, double> last_metrics;  // of the last committed round
};

std::string LastAttemptText(const RoundRecord* r) {
  if (r == nullptr) return "-";
  return r->attempt == 0
             ? absl::StrCat("round ", r->round, " ", ToString(r->status))
             : absl::StrCat("round ", r->round, " attempt ", r->attempt, " ", ToString(r->status));
}

}  // namespace

absl::StatusOr<std::string> StatusReport(Store& store, int64_t now_ms, Format format) {
  absl::StatusOr<std::vector<RunRecord>> runs = store.Runs();
  if (!runs.ok()) return runs.status();
  std::vector<std::vector<RoundRecord>> rounds_of;  // kept alive for the lines' pointers
  rounds_of.reserve(runs->size());
  std::vector<RunStatusLine> lines;
  for (const RunRecord& run : *runs) {
    absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds(run.run_id);
    if (!rounds.ok()) return rounds.status();
    rounds_of.push_back(*std::move(rounds));
    const std::vector<RoundRecord>& rs = rounds_of.back();
    RunStatusLine line{.run = &run, .configured = ConfiguredRounds(run)};
    const RoundRecord* last_committed = nullptr;
    for (const RoundRecord& r : rs) {
      if (r.status != RoundStatus::kCommitted) continue;
      ++line.committed;
      if (last_committed == nullptr || r.round > last_committed->round) last_committed = &r;
    }
    line.attempts = static_cast<int64_t>(rs.size());
    // Rounds() is ordered by round, then attempt: the last row is the newest attempt.
    if (!rs.empty()) line.last_attempt = &rs.back();
    if (last_committed != nullptr) line.last_metrics = ParseMetrics(last_committed->metrics_json);
    lines.push_back(std::move(line));
  }
  absl::StatusOr<std::vector<ClientRecord>> clients = store.Clients();
  if (!clients.ok()) return clients.status();
  int enrolled = 0, revoked = 0, recent = 0;
  for (const ClientRecord& c : *clients) {
    (c.revoked_at_ms == 0 ? enrolled : revoked) += 1;
    if (c.last_seen_ms != 0 && now_ms - c.last_seen_ms <= kRecentlySeenMs) ++recent;
  }

  switch (format) {
    case Format::kTable: {
      std::string out =
          absl::StrCat("Database ", store.db_path(), " (schema ", store.schema_version(),
                       "), read at ", FormatTime(now_ms), "\n\n");
      if (lines.empty()) {
        absl::StrAppend(&out, "No run yet.\n");
      } else {
        TextTable table({"RUN", "NAME", "STATUS", "CREATED", "COMMITTED", "ATTEMPTS",
                         "LAST_ATTEMPT", "LAST_METRICS", "REASON"});
        for (const RunStatusLine& l : lines) {
          table.AddRow(
              {absl::StrCat(l.run->run_id), l.run->name, ToString(l.run->status),
               FormatTime(l.run->created_at_ms),
               absl::StrCat(l.committed, "/", l.configured ? absl::StrCat(*l.configured) : "?"),
               absl::StrCat(l.attempts), LastAttemptText(l.last_attempt),
               l.last_metrics.empty() ? "-" : MetricsSummary(l.last_metrics), l.run->reason});
        }
        absl::StrAppend(&out, table.Render());
      }
      absl::StrAppend(&out, "\nClients: ", enrolled, " enrolled, ", revoked, " revoked, ", recent,
                      " seen in the last ", kRecentlySeenMs / 60000, " minutes\n");
      return out;
    }
    case Format::kCsv: {  // one row per run; the client counts are the same on every row
      std::string out =
          CsvLine({"run_id", "name", "status", "created_at_ms", "rounds_committed",
                   "rounds_configured", "attempts", "last_attempt", "last_metrics", "reason",
                   "clients_enrolled", "clients_revoked", "clients_seen_recently"});
      for (const RunStatusLine& l : lines) {
        absl::StrAppend(
            &out,
            CsvLine({absl::StrCat(l.run->run_id), CsvText(l.run->name), ToString(l.run->status),
                     absl::StrCat(l.run->created_at_ms), absl::StrCat(l.committed),
                     l.configured ? absl::StrCat(*l.configured) : "", absl::StrCat(l.attempts),
                     LastAttemptText(l.last_attempt), CsvText(MetricsSummary(l.last_metrics)),
                     CsvText(l.run->reason), absl::StrCat(enrolled), absl::StrCat(revoked),
                     absl::StrCat(recent)}));
      }
      return out;
    }
    case Format::kJson: {
      Json j;
      j["database"] = store.db_path();
      j["schema_version"] = store.schema_version();
      j["read_at_ms"] = now_ms;
      j["runs"] = Json::array();
      for (const RunStatusLine& l : lines) {
        Json r;
        r["run_id"] = l.run->run_id;
        r["name"] = l.run->name;
        r["status"] = ToString(l.run->status);
        r["created_at_ms"] = l.run->created_at_ms;
        r["rounds_committed"] = l.committed;
        r["rounds_configured"] = l.configured ? Json(*l.configured) : Json(nullptr);
        r["attempts"] = l.attempts;
        if (l.last_attempt != nullptr) {
          r["last_attempt"] = {{"round", l.last_attempt->round},
                               {"attempt", l.last_attempt->attempt},
                               {"status", ToString(l.last_attempt->status)}};
        } else {
          r["last_attempt"] = nullptr;
        }
        r["last_metrics"] = Json::object();
        for (const auto& [k, v] : l.last_metrics) r["last_metrics"][k] = v;
        r["reason"] = l.run->reason;
        j["runs"].push_back(std::move(r));
      }
      j["clients"] = {{"enrolled", enrolled},
                      {"revoked", revoked},
                      {"seen_recently", recent},
                      {"recent_window_ms", kRecentlySeenMs}};
      return DumpJson(j);
    }
  }
  return absl::InvalidArgumentError("unknown format");
}

absl::StatusOr<std::string> RoundsReport(Store& store, std::optional<int64_t> run_id,
                                         Format format) {
  absl::StatusOr<RunRecord> run = ResolveRun(store, run_id);
  if (!run.ok()) return run.status();
  absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds(run->run_id);
  if (!rounds.ok()) return rounds.status();
  absl::StatusOr<std::vector<EvaluationRecord>> evaluations = store.Evaluations(run->run_id);
  if (!evaluations.ok()) return evaluations.status();
  switch (format) {
    case Format::kTable:
      return RoundsTable(*run, *rounds, FederatedEvaluations(*evaluations));
    case Format::kCsv:
      return RoundsCsv(*rounds, FederatedEvaluations(*evaluations));
    case Format::kJson:
      return DumpJson(RoundsJson(*run, *rounds, *evaluations));
  }
  return absl::InvalidArgumentError("unknown format");
}

absl::StatusOr<std::string> ClientsReport(Store& store, Format format) {
  absl::StatusOr<std::vector<ClientRecord>> clients = store.Clients();
  if (!clients.ok()) return clients.status();
  absl::StatusOr<std::vector<ParticipationCount>> counts = store.ParticipationCounts(std::nullopt);
  if (!counts.ok()) return counts.status();

  std::vector<ClientRow> rows;
  std::map<std::string, size_t> index;
  for (ClientRecord& c : *clients) {
    index[c.client_id] = rows.size();
    ClientRow& row = rows.emplace_back();
    row.client = std::move(c);
    row.counts.client_id = row.client.client_id;
  }
  for (ParticipationCount& p : *counts) {
    auto it = index.find(p.client_id);
    if (it != index.end()) {
      rows[it->second].counts = std::move(p);
      continue;
    }
    ClientRow& row = rows.emplace_back();
    row.client.client_id = p.client_id;
    row.enrolled_ever = false;
    row.counts = std::move(p);
  }

  if (format == Format::kTable) {
    TextTable table({"CLIENT", "NAME", "STATUS", "ENROLLED", "LAST_SEEN", "ACCEPTED", "REFUSED",
                     "DROPPED", "CERT_EXPIRES"});
    for (const ClientRow& row : rows) {
      table.AddRow({ShortId(row.client.client_id), row.client.name.empty() ? "-" : row.client.name,
                    ClientStatus(row), FormatTime(row.client.enrolled_at_ms),
                    FormatTime(row.client.last_seen_ms, "never"), absl::StrCat(row.counts.accepted),
                    absl::StrCat(row.counts.refused), absl::StrCat(row.counts.dropped),
                    FormatTime(row.client.cert_not_after_ms)});
    }
    return table.Render();
  }
  if (format == Format::kCsv) {
    std::string out = CsvLine({"client_id", "name", "status", "enrolled_at_ms", "revoked_at_ms",
                               "last_seen_ms", "assigned", "accepted", "refused", "dropped",
                               "last_round_started_ms", "cert_not_after_ms"});
    for (const ClientRow& row : rows) {
      absl::StrAppend(
          &out,
          CsvLine({CsvText(row.client.client_id), CsvText(row.client.name), ClientStatus(row),
                   absl::StrCat(row.client.enrolled_at_ms), absl::StrCat(row.client.revoked_at_ms),
                   absl::StrCat(row.client.last_seen_ms), absl::StrCat(row.counts.assigned),
                   absl::StrCat(row.counts.accepted), absl::StrCat(row.counts.refused),
                   absl::StrCat(row.counts.dropped), absl::StrCat(row.counts.last_round_started_ms),
                   absl::StrCat(row.client.cert_not_after_ms)}));
    }
    return out;
  }
  Json out = Json::array();
  for (const ClientRow& row : rows) {
    out.push_back({{"client_id", row.client.client_id},
                   {"name", row.client.name},
                   {"status", ClientStatus(row)},
                   {"enrolled_at_ms", row.client.enrolled_at_ms},
                   {"revoked_at_ms", row.client.revoked_at_ms},
                   {"last_seen_ms", row.client.last_seen_ms},
                   {"assigned", row.counts.assigned},
                   {"accepted", row.counts.accepted},
                   {"refused", row.counts.refused},
                   {"dropped", row.counts.dropped},
                   {"last_round_started_ms", row.counts.last_round_started_ms},
                   {"cert_not_after_ms", row.client.cert_not_after_ms}});
  }
  return DumpJson(out);
}

absl::StatusOr<std::string> AuditReport(Store& store, int limit, Format format) {
  absl::StatusOr<std::vector<AuditRecord>> log = store.AuditLog(limit);
  if (!log.ok()) return log.status();
  if (format == Format::kTable) {
    TextTable table({"ID", "TIME", "EVENT", "CLIENT", "RUN", "ROUND", "DETAIL"});
    for (const AuditRecord& r : *log) {
      table.AddRow({absl::StrCat(r.id), FormatTime(r.at_ms), r.event, ShortId(r.client_id),
                    r.run_id ? absl::StrCat(r.run_id) : "-", r.round ? absl::StrCat(r.round) : "-",
                    r.detail});
    }
    return table.Render();
  }
  if (format == Format::kCsv) {
    std::string out = CsvLine({"id", "at_ms", "event", "client_id", "run_id", "round", "detail"});
    for (const AuditRecord& r : *log) {
      absl::StrAppend(&out, CsvLine({absl::StrCat(r.id), absl::StrCat(r.at_ms), CsvText(r.event),
                                     CsvText(r.client_id), absl::StrCat(r.run_id),
                                     absl::StrCat(r.round), CsvText(r.detail)}));
    }
    return out;
  }
  Json out = Json::array();
  for (const AuditRecord& r : *log) {
    out.push_back({{"id", r.id},
                   {"at_ms", r.at_ms},
                   {"event", r.event},
                   {"client_id", r.client_id},
                   {"run_id", r.run_id},
                   {"round", r.round},
                   {"detail", r.detail}});
  }
  return DumpJson(out);
}

}  // namespace fl::server::admin
