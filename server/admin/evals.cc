// `fl admin evals`: a run's evaluation rows, the sites' own beside their mean.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/admin/admin.h"
#include "server/admin/format.h"

namespace fl::server::admin {

using internal::CsvLine;
using internal::CsvText;
using internal::FormatDouble;
using internal::MetricsSummary;
using internal::TextTable;

absl::StatusOr<std::string> EvalsReport(Store& store, std::optional<int64_t> run_id,
                                        std::optional<int32_t> round, Format format) {
  absl::StatusOr<RunRecord> run = ResolveRun(store, run_id);
  if (!run.ok()) return run.status();
  absl::StatusOr<std::vector<EvaluationRecord>> all = store.Evaluations(run->run_id);
  if (!all.ok()) return all.status();
  absl::StatusOr<std::vector<ClientRecord>> clients = store.Clients();
  if (!clients.ok()) return clients.status();
  std::map<std::string, std::string> name_of;
  for (const ClientRecord& c : *clients) name_of[c.client_id] = c.name;

  struct Row {
    const EvaluationRecord* e;
    std::string source;     // server, federated, or site:<name>
    std::string client_id;  // a site's row only
  };
  std::vector<Row> rows;
  for (const EvaluationRecord& e : *all) {
    if (round.has_value() && e.round != *round) continue;
    Row row{&e, e.source, ""};
    if (absl::StartsWith(e.source, kSiteEvaluationSource)) {
      row.client_id = e.source.substr(sizeof(kSiteEvaluationSource) - 1);
      auto it = name_of.find(row.client_id);
      row.source = absl::StrCat(kSiteEvaluationSource,
                                it != name_of.end() ? it->second : row.client_id.substr(0, 16));
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty() && round.has_value()) {
    return absl::NotFoundError(absl::StrCat("run ", run->run_id, " has no evaluation of round ",
                                            *round, "; fl admin rounds shows which rounds have"));
  }
  if (format == Format::kTable) {
    std::string out = absl::StrCat("Run ", run->run_id, " (", run->name, ")\n\n");
    TextTable table({"ROUND", "SOURCE", "EXAMPLES", "LOSS", "METRICS"});
    for (const Row& r : rows) {
      table.AddRow({absl::StrCat(r.e->round), r.source, absl::StrCat(r.e->num_examples),
                    FormatDouble(r.e->loss), MetricsSummary(r.e->metrics)});
    }
    return absl::StrCat(out, table.Render());
  }
  if (format == Format::kCsv) {
    std::string out = CsvLine({"run_id", "round", "source", "client_id", "num_examples", "loss",
                               "metrics_json", "at_ms"});
    for (const Row& r : rows) {
      absl::StrAppend(
          &out,
          CsvLine({absl::StrCat(run->run_id), absl::StrCat(r.e->round), CsvText(r.source),
                   CsvText(r.client_id), absl::StrCat(r.e->num_examples), FormatDouble(r.e->loss),
                   CsvText(nlohmann::json(r.e->metrics).dump()), absl::StrCat(r.e->at_ms)}));
    }
    return out;
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    out.push_back({{"run_id", run->run_id},
                   {"round", r.e->round},
                   {"source", r.source},
                   {"client_id", r.client_id},
                   {"num_examples", r.e->num_examples},
                   {"loss", r.e->loss},
                   {"metrics", r.e->metrics},
                   {"at_ms", r.e->at_ms}});
  }
  return out.dump(2) + "\n";
}

}  // namespace fl::server::admin
