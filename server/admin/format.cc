#include "server/admin/format.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace fl::server::admin::internal {
namespace {

// Code points, not bytes, so that a UTF-8 name does not widen its column.
size_t DisplayWidth(absl::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header) { AddRow(std::move(header)); }

void TextTable::AddRow(std::vector<std::string> cells) {
  const size_t columns = rows_.empty() ? cells.size() : rows_[0].size();
  cells.resize(columns);
  for (std::string& cell : cells) cell = TableText(cell);
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  std::vector<size_t> widths(rows_[0].size(), 0);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - DisplayWidth(row[i]) + 2, ' ');
    }
    // A last column that is empty in this row would leave trailing blanks.
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string TableText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", u));
    } else {
      out += c;
    }
  }
  return out;
}

std::string CsvLine(const std::vector<std::string>& cells) {
  return absl::StrCat(absl::StrJoin(cells, ","), "\n");
}

std::string CsvText(absl::string_view text) {
  const bool formula =
      !text.empty() && absl::string_view("=+-@\t\r").find(text[0]) != absl::string_view::npos;
  const std::string cell = formula ? absl::StrCat("'", text) : std::string(text);
  if (cell.find_first_of(",\"\r\n") == std::string::npos) return cell;
  std::string quoted = "\"";
  for (char c : cell) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

std::string FormatTime(int64_t ms, absl::string_view zero) {
  if (ms == 0) return std::string(zero);
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

std::string FormatDouble(double value) {
  char buffer[64];
  std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, r.ptr);
}

std::map<std::string, double> ParseMetrics(const std::string& metrics_json) {
  std::map<std::string, double> out;
  if (metrics_json.empty()) return out;
  nlohmann::json j = nlohmann::json::parse(metrics_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return out;
  for (const auto& [name, value] : j.items()) {
    if (value.is_number()) out[name] = value.get<double>();
  }
  return out;
}

std::string MetricsSummary(const std::map<std::string, double>& metrics) {
  if (metrics.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [name, value] : metrics) {
    parts.push_back(absl::StrFormat("%s=%.4g", name, value));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace fl::server::admin::internal
