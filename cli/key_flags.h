// Command-line flags made from configuration keys (common/internal/toml_keys.h): every key that
// names a flag (KeySpec::Flag) becomes an option of a CLI11 command, whose text is read and
// checked as the file's value would be (the same range checks, the same choices) and written into
// the same field. A flag, its key and the reference line are so declared once, in the key table;
// a flag given overrides the file (the file is applied first, and the help shows its values).
//
// A refused value stops the parse with the flag and the key's own message, e.g.
//   --norm-bound: key 'strategy.norm_bound' must be >= 0, got -1.0
// Limits as the file's: integers are signed 64-bit (a uint64 seed above 2^63 - 1 is refused).
//   --rounds: expects an integer, got 'ten'
#ifndef FL_CLI_KEY_FLAGS_H_
#define FL_CLI_KEY_FLAGS_H_

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/internal/toml_keys.h"

namespace fl::cli {

namespace key_flags_internal {

namespace tk = fl::toml_keys;

inline bool ParseInt(std::string_view text, int64_t& out) {
  if (text.size() > 1 && text.front() == '+') text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

inline bool ParseNumber(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(text.c_str(), &end);
  if (errno == ERANGE && std::abs(out) < 1) return false;  // underflow: not the value meant
  return end == text.c_str() + text.size();
}

// `node` applied to `key` as if a file had set it; a refusal throws the flag's error.
template <typename C>
void ApplyNode(const tk::KeySpec<C>& key, const toml::node& node, C& config) {
  absl::Status s = key.apply(node, key.flag, key.full_name(), config);
  if (!s.ok()) {
    // The key's message names the place as "<flag>:<line>: "; a flag has no line.
    std::string message(s.message());
    if (message.rfind(key.flag + ":", 0) == 0) {
      const size_t colon = message.find(": ", key.flag.size());
      if (colon != std::string::npos) message = message.substr(colon + 2);
    }
    throw ::CLI::ValidationError(key.flag, message);
  }
}

// One value of `kind` given as `text`, as the TOML node a file would hold; throws when the text is
// not one. Strings are taken as they are (any bytes: paths need not be UTF-8).
template <typename C>
std::unique_ptr<toml::node> Value(const tk::KeySpec<C>& key, tk::ValueKind kind,
                                  const std::string& text) {
  switch (kind) {
    case tk::ValueKind::kInt: {
      int64_t v = 0;
      if (!ParseInt(text, v)) {
        throw ::CLI::ValidationError(key.flag,
                                     absl::StrCat("expects an integer, got '", text, "'"));
      }
      return std::make_unique<toml::value<int64_t>>(v);
    }
    case tk::ValueKind::kNumber: {
      double v = 0;
      if (!ParseNumber(text, v)) {
        throw ::CLI::ValidationError(key.flag, absl::StrCat("expects a number, got '", text, "'"));
      }
      return std::make_unique<toml::value<double>>(v);
    }
    default:
      break;
  }
  return std::make_unique<toml::value<std::string>>(text);
}

// The key's value in `config` as --help shows it: a string without its TOML quotes.
template <typename C>
std::string Shown(const tk::KeySpec<C>& key, const C& config) {
  std::string text = key.format(config);
  if (key.kind == tk::ValueKind::kString && text.size() >= 2 && text.front() == '"') {
    text = text.substr(1, text.size() - 2);
  }
  return text;
}

}  // namespace key_flags_internal

// Adds to `cmd` the flag of every key in `keys` that has one, writing into `config` (which must
// outlive the parse). Returns the options by the key's full name ("strategy.norm_bound"), for
// callers that ask which were given or attach more (->each).
template <typename C>
std::map<std::string, ::CLI::Option*> AddKeyFlags(::CLI::App& cmd,
                                                  const std::vector<toml_keys::KeySpec<C>>& keys,
                                                  C& config) {
  namespace kf = key_flags_internal;
  namespace tk = fl::toml_keys;
  std::map<std::string, ::CLI::Option*> options;
  for (const tk::KeySpec<C>& key : keys) {
    if (key.flag.empty()) continue;
    const std::string help = key.flag_help.empty() ? key.doc : key.flag_help;
    ::CLI::Option* option = nullptr;
    switch (key.kind) {
      case tk::ValueKind::kBool: {
        // "--x" sets true, "--no-x" false; "--x=false" (count < 0) the opposite.
        const bool negated = key.flag.rfind("--no-", 0) == 0;
        option = cmd.add_flag_function(
            key.flag,
            [key, negated, &config](int64_t count) {
              const bool value = (count > 0) != negated;
              kf::ApplyNode(key, toml::value<bool>(value), config);
            },
            help);
        break;
      }
      case tk::ValueKind::kStrings:
      case tk::ValueKind::kInts:
        option = cmd.add_option_function<std::vector<std::string>>(
            key.flag,
            [key, &config](const std::vector<std::string>& texts) {
              toml::array values;
              for (const std::string& t : texts) {
                if (key.kind == tk::ValueKind::kInts) {
                  int64_t v = 0;
                  if (!kf::ParseInt(t, v)) {
                    throw ::CLI::ValidationError(key.flag,
                                                 absl::StrCat("expects integers, got '", t, "'"));
                  }
                  values.push_back(v);
                } else {
                  values.push_back(t);
                }
              }
              kf::ApplyNode(key, values, config);
            },
            help);
        option->default_str(kf::Shown(key, config));
        break;
      default:
        option = cmd.add_option_function<std::string>(
            key.flag,
            [key, &config](const std::string& text) {
              kf::ApplyNode(key, *kf::Value(key, key.kind, text), config);
            },
            help);
        option->default_str(kf::Shown(key, config));
        break;
    }
    switch (key.kind) {
      case tk::ValueKind::kInt:
        option->type_name("INT");
        break;
      case tk::ValueKind::kNumber:
        option->type_name("NUMBER");
        break;
      case tk::ValueKind::kInts:
        option->type_name("INT");
        break;
      default:
        break;
    }
    options[key.full_name()] = option;
  }
  return options;
}

}  // namespace fl::cli

#endif  // FL_CLI_KEY_FLAGS_H_
