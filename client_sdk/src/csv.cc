// LoadCsv: the header's columns mapped onto label, features and ignored columns, then the rows
// parsed under the missing-value policy. Records come from internal::CsvReader.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client_sdk/src/csv_reader.h"
#include "fl/client/dataset.h"

namespace fl::client {
namespace {

// This abseil build has its own string_view type, which StrCat takes but std::string_view is not.
absl::string_view Sv(std::string_view s) { return {s.data(), s.size()}; }

// The delimiter as one would write it in a file or on a command line.
std::string ShowChar(char c) {
  switch (c) {
    case '\t':
      return "\\t";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    default:
      break;
  }
  if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
    return hex;
  }
  return std::string(1, c);
}

bool UsableDelimiter(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u <= 0x20 && c != '\t') return false;  // NUL, CR, LF, space, other controls
  if (u >= 0x7f) return false;               // DEL and UTF-8 bytes
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return false;
  return c != '"' && c != '.' && c != '+' && c != '-';
}

// Empty, or NA, N/A, NaN, null, ? in any case (see CsvOptions).
bool IsMissing(std::string_view v) {
  if (v.empty()) return true;
  for (const char* m : {"na", "n/a", "nan", "null", "?"}) {
    if (absl::EqualsIgnoreCase(Sv(v), m)) return true;
  }
  return false;
}

// Parses the whole of `text` as a finite double into `out`: nullopt on success, else the reason.
std::optional<std::string> ParseFinite(std::string_view text, double* out) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  if (ec == std::errc::result_out_of_range) return absl::StrCat("out of range: '", Sv(text), "'");
  if (ec != std::errc() || ptr != end) return absl::StrCat("not a number: '", Sv(text), "'");
  if (std::isnan(*out)) return absl::StrCat("NaN is not allowed: '", Sv(text), "'");
  if (std::isinf(*out)) return absl::StrCat("infinity is not allowed: '", Sv(text), "'");
  return std::nullopt;
}

std::string MissingRefused(std::string_view v, bool label) {
  const std::string what = v.empty() ? "empty value" : absl::StrCat("missing value '", Sv(v), "'");
  if (label) {
    return absl::StrCat(what, " in the label column: a class is never imputed; ",
                        "missing_values = drop_row skips such rows");
  }
  return absl::StrCat(what, " is refused: missing_values = drop_row skips such rows, impute ",
                      "replaces the value");
}

// Where each of the header's columns goes: the label, feature slot k, or nowhere.
struct Layout {
  size_t label = 0;
  size_t key = std::numeric_limits<size_t>::max();  // CsvOptions::key_column's; max: none
  std::vector<int64_t> slot;  // per column: feature index, or -1 when ignored
  std::vector<std::string> feature_names;
};

absl::StatusOr<Layout> MapColumns(const std::string& path, const std::vector<std::string>& names,
                                  const std::string& raw_header, const CsvOptions& o) {
  auto refuse = [&path](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": row 1: ", parts...));
  };
  const std::string columns = absl::StrCat("(columns: ", absl::StrJoin(names, ", "), ")");
  if (names.size() == 1) {
    for (char other : {',', ';', '\t', '|'}) {
      if (other != o.delimiter && raw_header.find(other) != std::string::npos) {
        return refuse("the header has 1 column; it looks '", ShowChar(other),
                      "'-separated: set data.delimiter (CsvOptions::delimiter)");
      }
    }
  }
  auto find = [&names](const std::string& name, size_t from = 0) {
    return static_cast<size_t>(
        std::find(names.begin() + static_cast<ptrdiff_t>(from), names.end(), name) - names.begin());
  };
  Layout layout;
  layout.label = find(o.label_column);
  if (layout.label == names.size()) {
    return refuse("no label column named '", o.label_column, "' ", columns);
  }
  if (find(o.label_column, layout.label + 1) != names.size()) {
    return refuse("label column '", o.label_column, "' appears twice");
  }
  if (!o.key_column.empty()) {
    layout.key = find(o.key_column);
    if (layout.key == names.size()) {
      return refuse("no key column named '", o.key_column, "' ", columns);
    }
  }
  for (const auto* list : {&o.drop_columns, &o.feature_columns}) {
    for (const std::string& name : *list) {
      if (find(name) == names.size()) {
        return refuse(list == &o.drop_columns ? "drop_columns" : "feature_columns", " names '",
                      name, "', which is not in the header ", columns);
      }
    }
  }
  // A feature column must be one column: refuse a name the header holds twice.
  auto add_feature = [&](size_t c) -> absl::Status {
    if (const size_t again = find(names[c], c + 1); again != names.size()) {
      return refuse("column '", names[c], "' appears twice in the header (columns ", c + 1, " and ",
                    again + 1, "); rename or drop one");
    }
    layout.slot[c] = static_cast<int64_t>(layout.feature_names.size());
    layout.feature_names.push_back(names[c]);
    return absl::OkStatus();
  };
  layout.slot.assign(names.size(), -1);
  if (!o.feature_columns.empty()) {
    for (const std::string& name : o.feature_columns) {
      if (absl::Status s = add_feature(find(name)); !s.ok()) return s;
    }
    return layout;
  }
  for (size_t c = 0; c < names.size(); ++c) {
    if (c == layout.label || c == layout.key) continue;
    if (std::find(o.drop_columns.begin(), o.drop_columns.end(), names[c]) != o.drop_columns.end()) {
      continue;
    }
    if (names[c].empty()) {
      return refuse("column ", c + 1, " has no name (a row index?): name it in the header, or ",
                    "list \"\" in drop_columns");
    }
    if (absl::Status s = add_feature(c); !s.ok()) return s;
  }
  if (layout.feature_names.empty()) {
    return refuse("no feature columns besides '", o.label_column, "'",
                  o.drop_columns.empty() ? "" : " and drop_columns");
  }
  return layout;
}

}  // namespace

absl::Status ValidateCsvOptions(const CsvOptions& o) {
  if (!UsableDelimiter(o.delimiter)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delimiter '", ShowChar(o.delimiter), "' cannot separate CSV fields (not a quote, line ",
        "break, space, digit, letter, '.', '+', '-' or non-ASCII byte): use ',', ';', '\\t' or ",
        "'|'"));
  }
  if (o.label_column.empty()) return absl::InvalidArgumentError("label_column must not be empty");
  for (const std::string& name : o.drop_columns) {
    if (name == o.label_column) {
      return absl::InvalidArgumentError(absl::StrCat("drop_columns names the label column '", name,
                                                     "' (the label is never a feature)"));
    }
  }
  for (size_t i = 0; i < o.feature_columns.size(); ++i) {
    const std::string& name = o.feature_columns[i];
    if (name == o.label_column) {
      return absl::InvalidArgumentError(absl::StrCat("feature_columns names the label column '",
                                                     name, "': the label cannot be a feature"));
    }
    if (std::find(o.feature_columns.begin() + static_cast<ptrdiff_t>(i) + 1,
                  o.feature_columns.end(), name) != o.feature_columns.end()) {
      return absl::InvalidArgumentError(absl::StrCat("feature_columns names '", name, "' twice"));
    }
    if (std::find(o.drop_columns.begin(), o.drop_columns.end(), name) != o.drop_columns.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature_columns and drop_columns both name '", name, "'"));
    }
  }
  if (!std::isfinite(o.impute_value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("impute_value must be finite, got ", o.impute_value));
  }
  if (o.num_classes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 0, got ", o.num_classes));
  }
  if (!o.key_column.empty()) {
    const bool in_features = std::find(o.feature_columns.begin(), o.feature_columns.end(),
                                       o.key_column) != o.feature_columns.end();
    if (o.key_column == o.label_column || in_features) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key_column '", o.key_column, "' is also ", in_features ? "a feature" : "the label",
          " column: the key splits the rows and is never trained on"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadCsv(const std::string& path, std::string_view label_column,
                                int32_t num_classes) {
  CsvOptions options;
  options.label_column = std::string(label_column);
  options.num_classes = num_classes;
  return LoadCsv(path, options);
}

absl::StatusOr<Dataset> LoadCsv(const std::string& path, const CsvOptions& o) {
  if (absl::Status s = ValidateCsvOptions(o); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  absl::StatusOr<internal::CsvReader> reader = internal::CsvReader::Open(path, o.delimiter);
  if (!reader.ok()) return reader.status();
  std::vector<std::string> names;
  absl::StatusOr<bool> more = reader->Next(names);
  if (!more.ok()) return more.status();
  if (!*more) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, expected a header row"));
  }
  absl::StatusOr<Layout> layout = MapColumns(path, names, reader->raw(), o);
  if (!layout.ok()) return layout.status();
  const size_t num_fields = names.size();

  Dataset d;
  d.num_features = static_cast<int64_t>(layout->feature_names.size());
  d.feature_names = layout->feature_names;
  std::vector<float> row_values(layout->feature_names.size());
  std::vector<std::string> fields;
  int64_t max_label = -1;
  while (true) {
    more = reader->Next(fields);
    if (!more.ok()) return more.status();
    if (!*more) break;
    const int64_t row = reader->row();
    if (fields.size() != num_fields) {
      // Name the first column without a value, or the first value without a column.
      const std::string where =
          fields.size() < num_fields
              ? absl::StrCat("column '", names[fields.size()], "' and after are missing")
              : absl::StrCat("value ", num_fields + 1, " ('", fields[num_fields],
                             "') is past the last column '", names.back(), "'");
      return absl::InvalidArgumentError(absl::StrCat(path, ": row ", row, ": expected ", num_fields,
                                                     " fields, found ", fields.size(), ": ",
                                                     where));
    }
    bool drop = false;
    int64_t imputed = 0;
    int32_t label = 0;
    if (layout->key < num_fields && IsMissing(fields[layout->key])) {
      if (o.missing_values != MissingValues::kDropRow) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": row ", row, ", column '",
                                                       names[layout->key], "': the key is missing",
                                                       " (every row needs one to be split by it)"));
      }
      drop = true;
    }
    for (size_t c = 0; c < num_fields; ++c) {
      const bool is_label = c == layout->label;
      const int64_t slot = layout->slot[c];
      if (!is_label && slot < 0) continue;  // dropped or not selected: not read
      const std::string& text = fields[c];
      double value = 0;
      std::optional<std::string> error;
      if (IsMissing(text)) {
        if (o.missing_values == MissingValues::kDropRow) {
          drop = true;
          continue;
        }
        if (is_label || o.missing_values == MissingValues::kRefuse) {
          error = MissingRefused(text, is_label);
        } else {
          value = o.impute_value;
          ++imputed;
        }
      } else {
        error = ParseFinite(text, &value);
      }
      if (!error && is_label) {
        if (value < 0 || value != std::floor(value)) {
          error = absl::StrCat("label must be a non-negative integer: '", text, "'");
        } else if (value >= std::numeric_limits<int32_t>::max()) {
          error = absl::StrCat("label is too large: '", text, "'");
        } else if (o.num_classes > 0 && value >= o.num_classes) {
          error = absl::StrCat("label ", text, " is outside the model's ", o.num_classes,
                               " classes [0, ", o.num_classes, ")");
        }
      }
      if (!error && !is_label && std::abs(value) > std::numeric_limits<float>::max()) {
        error = absl::StrCat("out of range for float32: '", text, "'");
      }
      if (error) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": row ", row, ", column '", names[c], "': ", *error));
      }
      if (is_label) {
        label = static_cast<int32_t>(value);
      } else {
        row_values[static_cast<size_t>(slot)] = static_cast<float>(value);
      }
    }
    if (drop) {
      ++d.dropped_rows;
      continue;
    }
    d.imputed_values += imputed;
    d.features.insert(d.features.end(), row_values.begin(), row_values.end());
    d.labels.push_back(label);
    if (layout->key < num_fields) d.keys.push_back(fields[layout->key]);
    max_label = std::max<int64_t>(max_label, label);
  }
  if (d.labels.empty()) {
    if (d.dropped_rows > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": no data rows left: all ", d.dropped_rows,
                       " rows have a missing value and were dropped (missing_values = drop_row)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": no data rows after the header"));
  }
  d.num_classes = o.num_classes > 0 ? o.num_classes : static_cast<int32_t>(max_label + 1);
  return d;
}

}  // namespace fl::client
