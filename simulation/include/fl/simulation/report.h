// A run's report, rendered from plain data: one self-contained HTML page (inline CSS and SVG
// charts, nothing fetched), plus the rounds as CSV and the whole report as JSON. Pure rendering:
// the caller fills a RunReport (from a simulation's result or from a server's store) and these
// functions only format it. Thread-safe: nothing here keeps state.
//
// Conventions for every output:
//   - A "round attempt" is one ReportRound; rounds are listed in the order given (the caller
//     sorts them, normally by round then attempt).
//   - Metric columns are the union of the metric names of all rounds, sorted (byte order).
//   - Non-finite numbers (NaN, infinities) are skipped in charts, shown as "—" in the HTML
//     tables, written as an empty field in the CSV and as null in the JSON.
//   - Every string taken from the data (title, reasons, metric and phase names, configuration) is
//     HTML-escaped in the page; the page never contains a <script>.
#ifndef FL_SIMULATION_REPORT_H_
#define FL_SIMULATION_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fl::simulation {

// One round attempt.
struct ReportRound {
  int32_t round = 0;
  int32_t attempt = 0;
  bool committed = false;
  int32_t num_sampled = 0;   // sites asked to train
  int32_t num_accepted = 0;  // updates that went into the aggregate
  double duration_s = 0;
  // Named results of the round, e.g. test_accuracy, test_loss, train_loss, eval_accuracy. Names
  // ending in "accuracy" are drawn in the accuracy chart, names ending in "loss" in the loss chart.
  std::map<std::string, double> metrics;
  // Seconds spent per phase, e.g. train, aggregate, evaluate; may be empty. The time chart stacks
  // them, adds "other" for duration_s beyond their sum, and draws duration_s alone when empty.
  std::map<std::string, double> phase_seconds;
  int64_t bytes_down = 0;  // server to sites
  int64_t bytes_up = 0;    // sites to server
  std::string reason;      // why the attempt failed or was not committed; empty otherwise
};

// One party (site, simulated client) of the data partition.
struct ReportPartitionParty {
  int64_t examples = 0;
  std::vector<int64_t> class_counts;  // examples per class; empty when unknown
};

struct RunReport {
  std::string title;
  int64_t run_id = 0;
  std::string status;  // e.g. "finished", "failed", "running"
  std::string reason;  // why the run ended as it did; may be empty
  // The run's configuration, pretty-printed in the page when it parses as JSON, shown verbatim
  // otherwise; empty: "no data".
  std::string configuration_json;
  std::vector<ReportRound> rounds;
  // Empty: the page has no partition section and the JSON's partition.parties is [].
  std::vector<ReportPartitionParty> partition;
  std::string partition_summary_text;  // free text shown above the partition charts
  double wall_seconds = 0;             // the run's wall-clock time
  std::string generated_by;            // e.g. "fl sim 0.3"; shown in the page's footer
};

// The whole report as one HTML5 page (UTF-8). Sections, each a <figure> with a <figcaption>:
//   header: title, run id, status, reason, wall time, rounds committed of attempts;
//   results table: one row per round attempt (round, attempt, committed, sampled, accepted,
//     time, bytes down and up, the metric columns, reason);
//   #plot-accuracy, #plot-loss: line charts over the round number, one line per metric, one
//     point per round (its committed attempt, else its last attempt);
//   #plot-sites (sampled and accepted), #plot-bytes (down and up, grouped bars) and #plot-time
//     (stacked bars by phase): one bar group per round attempt, uncommitted attempts faded;
//   #plot-partition: examples per party, as bars sorted largest first, or as a histogram of
//     party sizes when there are more than kReportMaxPartyBars parties;
//   #plot-partition-classes: a heat strip of each party's class shares, for at most
//     kReportMaxHeatParties parties (the largest) and kReportMaxHeatClasses classes, the caption
//     saying when some are left out; both partition figures only when `partition` is not empty;
//   #plot-config: the configuration in a <pre>.
// A chart with nothing finite to draw is replaced by the text "no data".
std::string RenderHtmlReport(const RunReport& report);

// At most this many parties get a bar each in #plot-partition; more are drawn as a histogram.
inline constexpr int kReportMaxPartyBars = 200;
// Limits of the class heat strip in #plot-partition-classes.
inline constexpr int kReportMaxHeatParties = 100;
inline constexpr int kReportMaxHeatClasses = 100;

// The rounds as CSV (RFC 4180: CRLF line ends, fields with a comma, quote, CR or LF quoted, with
// quotes doubled). Header:
//   round,attempt,committed,num_sampled,num_accepted,duration_s,bytes_down,bytes_up,reason,
//   <metric names, sorted>,<"phase_seconds." + phase names, sorted>
// then one line per round attempt; committed is "true" or "false", doubles are written in the
// shortest form that reads back exactly, a missing or non-finite value is an empty field.
std::string RoundsCsv(const RunReport& report);

// The report as JSON (pretty-printed, 2 spaces):
//   {"title", "run_id", "status", "reason", "wall_seconds", "generated_by",
//    "configuration": <the parsed configuration when it is valid JSON, else the string>,
//    "rounds": [{"round", "attempt", "committed", "num_sampled", "num_accepted", "duration_s",
//                "bytes_down", "bytes_up", "reason", "metrics": {...}, "phase_seconds": {...}}],
//    "partition": {"summary": <partition_summary_text>,
//                  "parties": [{"examples", "class_counts": [...]}]}}
// Non-finite numbers are null; invalid UTF-8 in strings is replaced by U+FFFD.
std::string RoundsJson(const RunReport& report);

// Writes RenderHtmlReport, RoundsCsv and RoundsJson to <path_prefix>.html, .csv and .json, each
// atomically (a temporary file in the same directory, then a rename: a reader sees the old file
// or the new one, never a part). The files are written in that order and the first failure
// stops; files already written stay. Errors: INVALID_ARGUMENT for an empty prefix; otherwise the
// file system's error (NOT_FOUND for a missing directory, PERMISSION_DENIED, INTERNAL), its
// message naming the file that could not be written.
absl::Status WriteReportFiles(const RunReport& report, const std::string& path_prefix);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_REPORT_H_
