// Table-driven TOML configuration files, read with toml++: one table of keys drives parsing, the
// reference file and the effective configuration, so that the three always agree.
//
// A program describes its file as TableSpecs (the [tables], in print order) and KeySpec<Config>s
// (one per key, made with IntKey, FloatKey, ...), then calls ApplyTomlFile to read a file over a
// Config and TomlFromConfig to write one (ParseTomlFile and ApplyTomlTable are its two halves, for
// a program that also checks what spans keys against the parsed file). Every error names the
// file, the line and the full key:
//   site.toml:7: unknown key 'data.pathh'
//   site.toml:3: key 'model.classes' must be an integer, got a string
//   site.toml:5: key 'data.test_fraction' must be in [0, 1), got 1.5
// and a TOML syntax error gives file:line:column and the parser's description. When a file has
// several problems, the first in the file is reported.
//
// Header-only (templates over the Config type); internal to the repository: a target outside
// common/ that includes it ("common/internal/toml_keys.h") names `INTERNAL common` and links
// tomlplusplus::tomlplusplus. Thread-safe: nothing
// here keeps state.
#ifndef FL_COMMON_INTERNAL_TOML_KEYS_H_
#define FL_COMMON_INTERNAL_TOML_KEYS_H_

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "fl/common/file_util.h"
#include "toml++/toml.h"

namespace fl::toml_keys {

// What kind of value a key holds (for a flag: how its text becomes the key's TOML value).
enum class ValueKind { kInt, kNumber, kString, kBool, kStrings, kInts };

// One key of a file: where it lives, what it means, how it is read and written, and the
// command-line flag that sets it too (cli/key_flags.h), so that the flag, the key and the
// reference are declared once.
template <typename Config>
struct KeySpec {
  std::string table;
  std::string name;
  std::string doc;
  // Reads `node` (the value of key `full_key` in `file`) into `config`.
  std::function<absl::Status(const toml::node& node, const std::string& file,
                             const std::string& full_key, Config& config)>
      apply;
  // The key's value in `config`, as TOML.
  std::function<std::string(const Config& config)> format;
  ValueKind kind = ValueKind::kString;
  // The flag that sets this key ("--norm-bound"; for a boolean key "--x" sets true and "--no-x"
  // false), and what --help says of it (empty: `doc`); no flag: the key is file-only.
  std::string flag;
  std::string flag_help;

  // This key, set by `name` on the command line too.
  KeySpec Flag(std::string name, std::string help = "") && {
    flag = std::move(name);
    flag_help = std::move(help);
    return std::move(*this);
  }
  std::string full_name() const { return table + "." + name; }
};

// A key without its reader and writer yet (the builders below add them).
template <typename Config>
KeySpec<Config> NewKey(std::string table, std::string name, std::string doc, ValueKind kind) {
  KeySpec<Config> k;
  k.table = std::move(table);
  k.name = std::move(name);
  k.doc = std::move(doc);
  k.kind = kind;
  return k;
}

struct TableSpec {
  std::string name;
  std::string doc;
};

inline absl::Status ErrorAt(const std::string& file, const toml::source_region& where,
                            const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", where.begin.line, ": ", message));
}

inline const char* TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

inline absl::Status WrongType(const toml::node& node, const std::string& file,
                              const std::string& full_key, const char* expected) {
  return ErrorAt(file, node.source(),
                 absl::StrCat("key '", full_key, "' must be ", expected, ", got ", TypeName(node)));
}

// The shortest text that reads back as `v`, always with a '.' or an exponent so that TOML reads
// it as a float ("600.0", "0.05", "inf", "nan").
template <typename Float>
std::string FormatFloat(Float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string.
inline std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned char>(c));
          out += esc;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The accessors below are generic lambdas `[](auto& c) -> auto& { return c.<field>; }`, so one
// accessor serves both reading (const) and writing.

// An integer in [min, max] (max defaults to the largest value of Int).
template <typename Config, typename Int, typename Field>
KeySpec<Config> IntKey(std::string table, std::string name, std::string doc, int64_t min,
                       Field field, int64_t max = std::numeric_limits<int64_t>::max()) {
  constexpr int64_t kTypeMax =
      std::cmp_less(std::numeric_limits<Int>::max(), std::numeric_limits<int64_t>::max())
          ? static_cast<int64_t>(std::numeric_limits<Int>::max())
          : std::numeric_limits<int64_t>::max();
  max = std::min(max, kTypeMax);
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kInt);
  k.apply = [field, min, max](const toml::node& node, const std::string& file,
                              const std::string& full_key, Config& config) {
    const toml::value<int64_t>* v = node.as_integer();
    if (v == nullptr) return WrongType(node, file, full_key, "an integer");
    const int64_t x = v->get();
    if (x < min || x > max) {
      return ErrorAt(
          file, node.source(),
          absl::StrCat("key '", full_key, "' must be ",
                       x < min ? absl::StrCat(">= ", min) : absl::StrCat("<= ", max), ", got ", x));
    }
    field(config) = static_cast<Int>(x);
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) { return absl::StrCat(field(config)); };
  return k;
}

enum class Range { kPositive, kNonNegative, kFraction, kHalfOpenFraction, kOpenFraction, kAny };

// Reads a number (a TOML float, or an integer) that must be finite and in `range`.
inline absl::StatusOr<double> ReadNumber(const toml::node& node, const std::string& file,
                                         const std::string& full_key, Range range) {
  double x = 0;
  if (const toml::value<double>* f = node.as_floating_point()) {
    x = f->get();
  } else if (const toml::value<int64_t>* i = node.as_integer()) {
    x = static_cast<double>(i->get());
  } else {
    return WrongType(node, file, full_key, "a number");
  }
  const char* want = nullptr;
  switch (range) {
    case Range::kPositive:
      if (!(x > 0)) want = "> 0";
      break;
    case Range::kNonNegative:
      if (!(x >= 0)) want = ">= 0";
      break;
    case Range::kFraction:
      if (!(x > 0 && x <= 1)) want = "in (0, 1]";
      break;
    case Range::kHalfOpenFraction:
      if (!(x >= 0 && x < 1)) want = "in [0, 1)";
      break;
    case Range::kOpenFraction:
      if (!(x > 0 && x < 1)) want = "in (0, 1)";
      break;
    case Range::kAny:
      break;
  }
  if (want == nullptr && !std::isfinite(x)) want = "finite";
  if (want != nullptr) {
    return ErrorAt(file, node.source(),
                   absl::StrCat("key '", full_key, "' must be ", want, ", got ", FormatFloat(x)));
  }
  return x;
}

template <typename Config, typename Field>
KeySpec<Config> FloatKey(std::string table, std::string name, std::string doc, Range range,
                         Field field) {
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kNumber);
  k.apply = [field, range](const toml::node& node, const std::string& file,
                           const std::string& full_key, Config& config) -> absl::Status {
    absl::StatusOr<double> x = ReadNumber(node, file, full_key, range);
    if (!x.ok()) return x.status();
    using Float = std::remove_reference_t<decltype(field(config))>;
    // Checked again as the field's type holds it: a double past a float's range (1e39) or under
    // its least value (1e-127 > 0 becomes 0) would pass the check above and break it.
    // Past this, a float rounds to infinity (FLT_MAX plus half its last step); the conversion is
    // only made once the value is known to fit.
    constexpr double kFloatOverflow = 0x1.ffffffp+127;
    const bool overflows =
        std::is_same_v<Float, float> ? std::fabs(*x) >= kFloatOverflow : false;
    if (overflows || (*x != 0 && static_cast<Float>(*x) == 0)) {
      return ErrorAt(file, node.source(),
                     absl::StrCat("key '", full_key, "' is ", FormatFloat(*x),
                                  ", out of the range a ", sizeof(Float) * 8,
                                  "-bit float holds"));
    }
    field(config) = static_cast<Float>(*x);
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) { return FormatFloat(field(config)); };
  return k;
}

// An absl::Duration, written in seconds.
template <typename Config, typename Field>
KeySpec<Config> SecondsKey(std::string table, std::string name, std::string doc, Range range,
                           Field field) {
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kNumber);
  k.apply = [field, range](const toml::node& node, const std::string& file,
                           const std::string& full_key, Config& config) -> absl::Status {
    absl::StatusOr<double> x = ReadNumber(node, file, full_key, range);
    if (!x.ok()) return x.status();
    // A duration has a nanosecond floor and a ceiling of about 292 years: 1e-12 would be zero
    // (past a check for > 0) and 1e300 infinite.
    constexpr double kMaxSeconds = 1e9;  // 31 years
    if (std::fabs(*x) > kMaxSeconds || (*x != 0 && std::fabs(*x) < 1e-9)) {
      return ErrorAt(file, node.source(),
                     absl::StrCat("key '", full_key, "' is ", FormatFloat(*x),
                                  " seconds; a duration must be 0 or between 1e-9 and 1e9"));
    }
    field(config) = absl::Seconds(*x);
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) {
    return FormatFloat(absl::ToDoubleSeconds(field(config)));
  };
  return k;
}

// A string; when `choices` is not empty, one of them.
template <typename Config, typename Field>
KeySpec<Config> StringKey(std::string table, std::string name, std::string doc, bool may_be_empty,
                          Field field, std::vector<std::string> choices = {}) {
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kString);
  k.apply = [field, may_be_empty, choices](const toml::node& node, const std::string& file,
                                           const std::string& full_key, Config& config) {
    const toml::value<std::string>* v = node.as_string();
    if (v == nullptr) return WrongType(node, file, full_key, "a string");
    if (!may_be_empty && v->get().empty()) {
      return ErrorAt(file, node.source(), absl::StrCat("key '", full_key, "' must not be empty"));
    }
    if (!choices.empty() && std::find(choices.begin(), choices.end(), v->get()) == choices.end()) {
      return ErrorAt(file, node.source(),
                     absl::StrCat("key '", full_key, "' must be one of ",
                                  absl::StrJoin(choices, ", "), ", got ", Quote(v->get())));
    }
    field(config) = v->get();
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) { return Quote(field(config)); };
  return k;
}

template <typename Config, typename Field>
KeySpec<Config> BoolKey(std::string table, std::string name, std::string doc, Field field) {
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kBool);
  k.apply = [field](const toml::node& node, const std::string& file, const std::string& full_key,
                    Config& config) {
    const toml::value<bool>* v = node.as_boolean();
    if (v == nullptr) return WrongType(node, file, full_key, "a boolean");
    field(config) = v->get();
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) {
    return std::string(field(config) ? "true" : "false");
  };
  return k;
}

template <typename Config, typename Field>
KeySpec<Config> StringArrayKey(std::string table, std::string name, std::string doc, Field field) {
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kStrings);
  k.apply = [field](const toml::node& node, const std::string& file, const std::string& full_key,
                    Config& config) {
    const toml::array* array = node.as_array();
    if (array == nullptr) return WrongType(node, file, full_key, "an array of strings");
    std::vector<std::string> values;
    for (size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = *array->get(i);
      const toml::value<std::string>* v = element.as_string();
      if (v == nullptr) {
        return WrongType(element, file, absl::StrCat(full_key, "[", i, "]"), "a string");
      }
      values.push_back(v->get());
    }
    field(config) = std::move(values);
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) {
    std::vector<std::string> quoted;
    for (const std::string& s : field(config)) quoted.push_back(Quote(s));
    return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
  };
  return k;
}

// An array of integers, each >= `min`; when `may_be_empty` is false, with at least one.
template <typename Config, typename Field>
KeySpec<Config> IntArrayKey(std::string table, std::string name, std::string doc, int64_t min,
                            Field field, bool may_be_empty = true) {
  KeySpec<Config> k =
      NewKey<Config>(std::move(table), std::move(name), std::move(doc), ValueKind::kInts);
  k.apply = [field, min, may_be_empty](const toml::node& node, const std::string& file,
                                       const std::string& full_key, Config& config) {
    const toml::array* array = node.as_array();
    if (array == nullptr || (!may_be_empty && array->empty())) {
      return WrongType(node, file, full_key,
                       may_be_empty ? "an array of integers" : "a non-empty array of integers");
    }
    std::vector<int64_t> values;
    for (size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = *array->get(i);
      const std::string element_key = absl::StrCat(full_key, "[", i, "]");
      const toml::value<int64_t>* v = element.as_integer();
      if (v == nullptr) return WrongType(element, file, element_key, "an integer");
      if (v->get() < min) {
        return ErrorAt(
            file, element.source(),
            absl::StrCat("key '", element_key, "' must be >= ", min, ", got ", v->get()));
      }
      values.push_back(v->get());
    }
    field(config).assign(values.begin(), values.end());
    return absl::OkStatus();
  };
  k.format = [field](const Config& config) {
    return absl::StrCat("[", absl::StrJoin(field(config), ", "), "]");
  };
  return k;
}

// Reads and parses the TOML file at `path`. NOT_FOUND (naming the path) when the file does not
// exist, another error of ReadFile when it cannot be read, INVALID_ARGUMENT with
// path:line:column and the parser's description for a syntax error.
// TOML text that errors call `name` (a path, or e.g. "run file").
inline absl::StatusOr<toml::table> ParseTomlText(const std::string& text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ":", e.source().begin.line, ":",
                                                   e.source().begin.column, ": ",
                                                   std::string(e.description())));
  }
}

inline absl::StatusOr<toml::table> ParseTomlFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseTomlText(*text, path);
}

// Applies each key that `root` (parsed from the file at `path`, which errors name) sets to
// `config`; keys it does not set keep their value. INVALID_ARGUMENT for an unknown table or key,
// a value of the wrong type or out of range (the first such problem in the file). On error
// `config` may have been partly written.
template <typename Config>
absl::Status ApplyTomlTable(const std::string& path, const toml::table& root,
                            const std::vector<TableSpec>& tables,
                            const std::vector<KeySpec<Config>>& keys, Config& config) {
  // toml++'s tables iterate in key order, not file order: keep the first problem in the file.
  struct Problem {
    toml::source_position at;
    absl::Status status;
  };
  std::optional<Problem> first;
  auto note = [&first](const toml::source_region& where, absl::Status status) {
    if (!first || where.begin < first->at) first = Problem{where.begin, std::move(status)};
  };
  for (auto&& [table_key, table_node] : root) {
    const std::string table(table_key.str());
    const bool known = std::any_of(tables.begin(), tables.end(),
                                   [&](const TableSpec& t) { return t.name == table; });
    if (!known) {
      note(table_key.source(),
           ErrorAt(path, table_key.source(),
                   absl::StrCat(table_node.is_table() ? "unknown table '" : "unknown key '", table,
                                "'")));
      continue;
    }
    const toml::table* entries = table_node.as_table();
    if (entries == nullptr) {
      note(table_node.source(), WrongType(table_node, path, table, "a table"));
      continue;
    }
    for (auto&& [key, node] : *entries) {
      const std::string name(key.str());
      const std::string full_key = absl::StrCat(table, ".", name);
      auto spec = std::find_if(keys.begin(), keys.end(), [&](const KeySpec<Config>& k) {
        return k.table == table && k.name == name;
      });
      if (spec == keys.end()) {
        note(key.source(),
             ErrorAt(path, key.source(), absl::StrCat("unknown key '", full_key, "'")));
        continue;
      }
      if (absl::Status s = spec->apply(node, path, full_key, config); !s.ok()) {
        note(node.source(), std::move(s));
      }
    }
  }
  return first ? first->status : absl::OkStatus();
}

// ParseTomlFile, then ApplyTomlTable: reads the file at `path` over `config`, with the errors of
// both.
template <typename Config>
absl::Status ApplyTomlFile(const std::string& path, const std::vector<TableSpec>& tables,
                           const std::vector<KeySpec<Config>>& keys, Config& config) {
  absl::StatusOr<toml::table> root = ParseTomlFile(path);
  if (!root.ok()) return root.status();
  return ApplyTomlTable(path, *root, tables, keys, config);
}

// `config` as a TOML file that ApplyTomlFile reads back to the same values: every table with its
// comment, every key with a one-line comment (naming its flag too when `with_flags`: the
// reference).
template <typename Config>
std::string TomlFromConfig(const std::vector<TableSpec>& tables,
                           const std::vector<KeySpec<Config>>& keys, const Config& config,
                           bool with_flags = false) {
  std::string out;
  for (const TableSpec& table : tables) {
    if (!out.empty()) out += "\n";
    absl::StrAppend(&out, "# ", table.doc, "\n[", table.name, "]\n");
    for (const KeySpec<Config>& k : keys) {
      if (k.table != table.name) continue;
      const bool flag = with_flags && !k.flag.empty();
      absl::StrAppend(&out, "# ", k.doc, flag ? absl::StrCat(" Flag: ", k.flag, ".") : "", "\n",
                      k.name, " = ", k.format(config), "\n");
    }
  }
  return out;
}

}  // namespace fl::toml_keys

#endif  // FL_COMMON_INTERNAL_TOML_KEYS_H_
