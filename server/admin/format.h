// Output helpers of the admin reports, private to server/admin: an aligned text table, CSV rows,
// UTC times and the metrics of a round. Text that may come from a client (refusal reasons, audit
// details, names) is made safe for the target here: control characters are escaped in tables so
// that a reason cannot move the terminal's cursor, and CSV text cells that a spreadsheet would
// run as a formula get a leading apostrophe.
#ifndef FL_SERVER_ADMIN_FORMAT_H_
#define FL_SERVER_ADMIN_FORMAT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fl::server::admin::internal {

// Columns separated by two spaces, each as wide as its widest cell (counted in UTF-8 code
// points); the last column is not padded. Cells are escaped with TableText.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  // A row with fewer cells than the header is padded with empty cells; extra cells are dropped.
  void AddRow(std::vector<std::string> cells);
  size_t num_rows() const { return rows_.size(); }
  // The header line and one line per row, each ending in '\n'.
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

// `text` with control characters (and DEL) written as \n, \t, \r or \xNN, and a backslash doubled.
std::string TableText(absl::string_view text);

// One CSV line from already-formatted cells (numbers as they are, text through CsvText), joined
// by commas and ending in '\n'.
std::string CsvLine(const std::vector<std::string>& cells);
// A text cell: quoted when it holds a comma, quote, CR or LF (quotes doubled), and prefixed with
// an apostrophe when it starts with '=', '+', '-', '@', tab or CR.
std::string CsvText(absl::string_view text);

// "2024-05-01 12:34:56Z" (UTC), or `zero` when `ms` is 0.
std::string FormatTime(int64_t ms, absl::string_view zero = "-");
// A double in the shortest form that reads back the same ("0.5", "1e-07", "nan").
std::string FormatDouble(double value);

// The numeric entries of a metrics JSON object, by name. Empty for "" and for text that is not a
// JSON object; entries whose value is not a number are left out.
std::map<std::string, double> ParseMetrics(const std::string& metrics_json);
// "name=value name=value" by name, values with 4 significant digits; "-" when empty.
std::string MetricsSummary(const std::map<std::string, double>& metrics);

}  // namespace fl::server::admin::internal

#endif  // FL_SERVER_ADMIN_FORMAT_H_
