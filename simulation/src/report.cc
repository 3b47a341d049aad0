#include "fl/simulation/report.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/file_util.h"
#include "nlohmann/json.hpp"
#include "simulation/internal/report_columns.h"

namespace fl::simulation {

namespace {

using Json = nlohmann::ordered_json;

// The shortest decimal that reads back as `v`; "" for a non-finite value.
std::string ShortestDouble(double v) {
  if (!std::isfinite(v)) return "";
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  if (ec != std::errc()) return "";
  return std::string(buffer, end);
}

// RFC 4180: quoted when it holds a comma, a quote, CR or LF; quotes doubled.
std::string CsvField(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    line += CsvField(fields[i]);
  }
  line += "\r\n";
  return line;
}

std::string OptionalDouble(const std::map<std::string, double>& values, const std::string& key) {
  const auto it = values.find(key);
  return it == values.end() ? "" : ShortestDouble(it->second);
}

// nlohmann writes NaN and infinities as null; spelled out here so that it does not depend on it.
Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json NumberMap(const std::map<std::string, double>& values) {
  Json out = Json::object();
  for (const auto& [name, v] : values) out[name] = Number(v);
  return out;
}

std::vector<std::string> SortedKeys(const RunReport& report,
                                    std::map<std::string, double> ReportRound::*member) {
  std::set<std::string> names;
  for (const ReportRound& round : report.rounds) {
    for (const auto& [name, v] : round.*member) names.insert(name);
  }
  return {names.begin(), names.end()};
}

}  // namespace

namespace internal {

std::vector<std::string> ReportMetricNames(const RunReport& report) {
  return SortedKeys(report, &ReportRound::metrics);
}

std::vector<std::string> ReportPhaseNames(const RunReport& report) {
  return SortedKeys(report, &ReportRound::phase_seconds);
}

}  // namespace internal

std::string RoundsCsv(const RunReport& report) {
  const std::vector<std::string> metrics = internal::ReportMetricNames(report);
  const std::vector<std::string> phases = internal::ReportPhaseNames(report);
  std::vector<std::string> header = {"round",       "attempt",      "committed",
                                     "num_sampled", "num_accepted", "duration_s",
                                     "bytes_down",  "bytes_up",     "reason"};
  header.insert(header.end(), metrics.begin(), metrics.end());
  for (const std::string& phase : phases) header.push_back("phase_seconds." + phase);
  std::string out = CsvLine(header);
  for (const ReportRound& round : report.rounds) {
    std::vector<std::string> fields = {absl::StrCat(round.round),
                                       absl::StrCat(round.attempt),
                                       round.committed ? "true" : "false",
                                       absl::StrCat(round.num_sampled),
                                       absl::StrCat(round.num_accepted),
                                       ShortestDouble(round.duration_s),
                                       absl::StrCat(round.bytes_down),
                                       absl::StrCat(round.bytes_up),
                                       round.reason};
    for (const std::string& name : metrics) fields.push_back(OptionalDouble(round.metrics, name));
    for (const std::string& name : phases) {
      fields.push_back(OptionalDouble(round.phase_seconds, name));
    }
    out += CsvLine(fields);
  }
  return out;
}

std::string RoundsJson(const RunReport& report) {
  Json json = {{"title", report.title},
               {"run_id", report.run_id},
               {"status", report.status},
               {"reason", report.reason},
               {"wall_seconds", Number(report.wall_seconds)},
               {"generated_by", report.generated_by}};
  Json configuration = Json::parse(report.configuration_json, nullptr, /*allow_exceptions=*/false);
  json["configuration"] =
      configuration.is_discarded() ? Json(report.configuration_json) : std::move(configuration);
  Json rounds = Json::array();
  for (const ReportRound& round : report.rounds) {
    rounds.push_back({{"round", round.round},
                      {"attempt", round.attempt},
                      {"committed", round.committed},
                      {"num_sampled", round.num_sampled},
                      {"num_accepted", round.num_accepted},
                      {"duration_s", Number(round.duration_s)},
                      {"bytes_down", round.bytes_down},
                      {"bytes_up", round.bytes_up},
                      {"reason", round.reason},
                      {"metrics", NumberMap(round.metrics)},
                      {"phase_seconds", NumberMap(round.phase_seconds)}});
  }
  json["rounds"] = std::move(rounds);
  Json parties = Json::array();
  for (const ReportPartitionParty& party : report.partition) {
    parties.push_back({{"examples", party.examples}, {"class_counts", party.class_counts}});
  }
  json["partition"] = {{"summary", report.partition_summary_text}, {"parties", std::move(parties)}};
  return json.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

absl::Status WriteReportFiles(const RunReport& report, const std::string& path_prefix) {
  if (path_prefix.empty()) {
    return absl::InvalidArgumentError("cannot write a report: the path prefix is empty");
  }
  const std::pair<const char*, std::string (*)(const RunReport&)> files[] = {
      {".html", &RenderHtmlReport}, {".csv", &RoundsCsv}, {".json", &RoundsJson}};
  for (const auto& [extension, render] : files) {
    const std::string path = path_prefix + extension;
    if (absl::Status s = WriteFileAtomic(path, render(report)); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("cannot write report file ", path, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fl::simulation
