#include "cli/report_command.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_util.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "fl/simulation/report.h"
#include "fl/simulation/run_report.h"

namespace fl::cli {
namespace {

constexpr char kDbFile[] = "federation.db";  // the name Store gives its database
constexpr char kWhatToGive[] = "give a server's data directory or the federation.db file in it";

absl::StatusOr<std::unique_ptr<server::Store>> OpenStore(const std::string& data_dir) {
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  if (store.ok()) return store;
  const std::string message(store.status().message());
  const std::string db = absl::StrCat(data_dir, "/", kDbFile);
  if (absl::IsNotFound(store.status())) {
    return absl::NotFoundError(absl::StrCat(message, "; ", kWhatToGive));
  }
  if (absl::IsDataLoss(store.status())) {
    return absl::DataLossError(
        absl::StrCat(db, " is not a federation database (not an SQLite file: ", message, ")"));
  }
  return store.status();
}

// The run to report: `wanted`, or the newest when 0. NOT_FOUND when the store has none, or no
// run `wanted` (listing those it has).
absl::StatusOr<int64_t> ChooseRun(server::Store& store, int64_t wanted) {
  absl::StatusOr<std::vector<server::RunRecord>> runs = store.Runs();
  if (!runs.ok()) return runs.status();
  if (runs->empty()) {
    return absl::NotFoundError(absl::StrCat(store.db_path(), " has no run yet: nothing to report"));
  }
  if (wanted == 0) return simulation::NewestRunId(store);
  std::vector<int64_t> ids;
  for (const server::RunRecord& r : *runs) {
    if (r.run_id == wanted) return wanted;
    ids.push_back(r.run_id);
  }
  return absl::NotFoundError(absl::StrCat("no run ", wanted, " in ", store.db_path(),
                                          "; its runs are ", absl::StrJoin(ids, ", ")));
}

std::string OutPrefix(const ReportArgs& a, const std::string& data_dir, int64_t run_id) {
  if (a.out.empty()) return absl::StrCat(data_dir, "/report-run-", run_id);
  // A directory (existing, or named with a trailing '/'): the default names, in it.
  std::error_code ec;
  if (absl::EndsWith(a.out, "/") || std::filesystem::is_directory(a.out, ec)) {
    std::string dir = a.out;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    std::filesystem::create_directories(dir, ec);  // a new directory named with a trailing '/'
    return absl::StrCat(dir == "/" ? "" : dir, "/report-run-", run_id);
  }
  for (const char* ext : {".html", ".csv", ".json"}) {
    if (absl::EndsWith(a.out, ext) && a.out.size() > std::string(ext).size()) {
      return a.out.substr(0, a.out.size() - std::string(ext).size());
    }
  }
  return a.out;
}

// Writes the formats asked for; the paths written, in order.
absl::StatusOr<std::vector<std::string>> Write(const simulation::RunReport& report,
                                               const std::string& prefix,
                                               const std::string& format) {
  if (format == "all") {
    if (absl::Status s = simulation::WriteReportFiles(report, prefix); !s.ok()) return s;
    return std::vector<std::string>{prefix + ".html", prefix + ".csv", prefix + ".json"};
  }
  std::string path = absl::StrCat(prefix, ".", format);
  const std::string contents = format == "html"  ? simulation::RenderHtmlReport(report)
                               : format == "csv" ? simulation::RoundsCsv(report)
                                                 : simulation::RoundsJson(report);
  if (absl::Status s = fl::WriteFileAtomic(path, contents); !s.ok()) return s;
  return std::vector<std::string>{std::move(path)};
}

}  // namespace

CLI::App* AddReportCommand(CLI::App& app, ReportArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write a run's report (HTML page, rounds CSV, JSON) from a server's or a simulation's "
      "store, also while the server runs");
  cmd->add_option("path", a.path, "A server's data directory, or the federation.db file in it")
      ->required();
  cmd->add_option("--run", a.run_id, "Run id (default: the newest run)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", a.out,
                  "Write <PREFIX>.html, .csv and .json (default: <data dir>/report-run-<run id>; "
                  "a directory: report-run-<run id> in it)");
  cmd->add_option("--format", a.format, "html, csv, json, or all three")
      ->capture_default_str()
      ->check(CLI::IsMember({"html", "csv", "json", "all"}));
  return cmd;
}

int RunReport(const ReportArgs& a) {
  absl::StatusOr<std::string> data_dir = DataDirOf(a.path);
  if (!data_dir.ok()) return Fail(data_dir.status());
  absl::StatusOr<std::unique_ptr<server::Store>> store = OpenStore(*data_dir);
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<int64_t> run_id = ChooseRun(**store, a.run_id);
  if (!run_id.ok()) return Fail(run_id.status());
  absl::StatusOr<simulation::RunReport> report = simulation::ReportFromStore(**store, *run_id);
  if (!report.ok()) return Fail(report.status());
  report->generated_by = absl::StrCat("fl report ", (*store)->db_path());

  const std::string prefix = OutPrefix(a, *data_dir, *run_id);
  absl::StatusOr<std::vector<std::string>> written = Write(*report, prefix, a.format);
  if (!written.ok()) {
    if (!a.out.empty()) return Fail(written.status());
    return Fail(absl::Status(written.status().code(),
                             absl::StrCat(written.status().message(),
                                          "; write the report elsewhere with --out PREFIX")));
  }
  int committed = 0;
  for (const simulation::ReportRound& r : report->rounds) committed += r.committed ? 1 : 0;
  std::printf("run %lld (%s, %s): %d rounds committed of %zu attempts\n",
              static_cast<long long>(*run_id), report->title.c_str(), report->status.c_str(),
              committed, report->rounds.size());
  for (const std::string& path : *written) std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace fl::cli
