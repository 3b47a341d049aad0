// `fl report`: a run's report (HTML page, rounds CSV, JSON; fl/simulation/report.h) rendered
// from a server's store, a simulation's or a production server's alike, also while the server
// runs (the store is opened read-only). cli/main.cc registers it. Thread-compatible: one command
// per process.
#ifndef FL_CLI_REPORT_COMMAND_H_
#define FL_CLI_REPORT_COMMAND_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace fl::cli {

// `fl report PATH [--run N] [--out PREFIX] [--format html|csv|json|all]`.
struct ReportArgs {
  // A server's data directory, or the federation.db file in it.
  std::string path;
  int64_t run_id = 0;  // 0: the newest run
  // The files written are <out>.html, <out>.csv and <out>.json (a trailing .html, .csv or .json
  // given here is dropped first). Empty: <data directory>/report-run-<run id>.
  std::string out;
  std::string format = "all";  // html, csv, json, or all three
};

// Adds `fl report` to `app`, filling `a` when parsed.
CLI::App* AddReportCommand(CLI::App& app, ReportArgs& a);

// Runs the parsed command: writes the files, each atomically, and prints one line per file
// written. The process's exit code: 0, or 1 with a one-line error on stderr naming the path and
// the cause (no such path, not a federation database, no run yet, an unknown run id with the ids
// that exist, a file that could not be written).
int RunReport(const ReportArgs& a);

}  // namespace fl::cli

#endif  // FL_CLI_REPORT_COMMAND_H_
