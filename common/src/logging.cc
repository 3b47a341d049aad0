#include "fl/common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace fl {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("FL_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& Format() {
  static std::atomic<int> format{[] {
    const char* env = std::getenv("FL_LOG_FORMAT");
    return static_cast<int>(env != nullptr && std::strcmp(env, "json") == 0 ? LogFormat::kJson
                                                                            : LogFormat::kText);
  }()};
  return format;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

bool IsControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

// A value as is, or quoted with `"` and `\` escaped and every control character written as an
// escape (\n, \r, \t, \xNN): a client's text (its name, a decline reason) can neither start a
// new line nor reach a terminal as an escape sequence.
// The length of a UTF-8 sequence at `at` that a terminal may act on: a C1 control (U+0080 to
// U+009F, C2 80..9F; U+009B is CSI) or a bidirectional override or isolate (U+202A to U+202E,
// U+2066 to U+2069); 0 for anything else.
size_t ActiveSequence(std::string_view v, size_t at) {
  auto byte = [&](size_t i) { return i < v.size() ? static_cast<unsigned char>(v[i]) : 0u; };
  if (byte(at) == 0xc2 && byte(at + 1) >= 0x80 && byte(at + 1) <= 0x9f) return 2;
  if (byte(at) == 0xe2 && byte(at + 1) == 0x80 && byte(at + 2) >= 0xaa && byte(at + 2) <= 0xae) {
    return 3;
  }
  if (byte(at) == 0xe2 && byte(at + 1) == 0x81 && byte(at + 2) >= 0xa6 && byte(at + 2) <= 0xa9) {
    return 3;
  }
  return 0;
}

void AppendValue(std::string& line, std::string_view value) {
  bool quote = value.empty() || value.find_first_of(" \"=") != std::string_view::npos;
  for (size_t i = 0; i < value.size(); ++i) {
    quote = quote || IsControl(value[i]) || ActiveSequence(value, i) > 0;
  }
  if (!quote) {
    line.append(value);
    return;
  }
  line.push_back('"');
  for (size_t i = 0; i < value.size(); ++i) {
    if (const size_t n = ActiveSequence(value, i); n > 0) {
      // As \xNN escapes of its bytes, like a C0 control: inert, and still readable.
      static constexpr char kHex[] = "0123456789abcdef";
      for (size_t k = 0; k < n; ++k) {
        const auto u = static_cast<unsigned char>(value[i + k]);
        line.append("\\x");
        line.push_back(kHex[u >> 4]);
        line.push_back(kHex[u & 0xf]);
      }
      i += n - 1;
      continue;
    }
    const char c = value[i];
    switch (c) {
      case '"':
      case '\\':
        line.push_back('\\');
        line.push_back(c);
        break;
      case '\n':
        line.append("\\n");
        break;
      case '\r':
        line.append("\\r");
        break;
      case '\t':
        line.append("\\t");
        break;
      default:
        if (IsControl(c)) {
          static constexpr char kHex[] = "0123456789abcdef";
          const auto u = static_cast<unsigned char>(c);
          line.append("\\x");
          line.push_back(kHex[u >> 4]);
          line.push_back(kHex[u & 0xf]);
        } else {
          line.push_back(c);
        }
    }
  }
  line.push_back('"');
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
void SetLogFormat(LogFormat format) { Format().store(static_cast<int>(format)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= Level().load(); }

namespace {

// Guards the sink's pointer only: a line is written without it.
std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}

std::shared_ptr<const LogSink>& Sink() {
  // Never destroyed: threads may log during exit.
  static auto* sink = new std::shared_ptr<const LogSink>();
  return *sink;
}

}  // namespace

void LogEvent(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line;
  if (Format().load() == static_cast<int>(LogFormat::kJson)) {
    nlohmann::ordered_json j;
    j["ts"] = ts;
    j["level"] = LevelName(level);
    j["event"] = std::string(event);
    for (const LogField& f : fields) j[std::string(f.first)] = f.second;
    // ASCII only: every character past it (C1 controls, bidi overrides) as a \\u escape; and
    // DEL, which JSON leaves raw.
    line = j.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
    line = absl::StrReplaceAll(line, {{"\x7f", "\\u007f"}});
    line.push_back('\n');
  } else {
    line = ts;
    line.push_back(' ');
    line.append(LevelName(level));
    line.push_back(' ');
    line.append(event);
    for (const LogField& f : fields) {
      line.push_back(' ');
      line.append(f.first);
      line.push_back('=');
      AppendValue(line, f.second);
    }
    line.push_back('\n');
  }
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(SinkMutex());
    sink = Sink();
  }
  if (sink != nullptr) {
    (*sink)(level, std::string_view(line).substr(0, line.size() - 1));
    return;
  }
  static std::mutex mu;  // whole lines on stderr
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void SetLogSink(LogSink sink) {
  std::shared_ptr<const LogSink> next =
      sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard<std::mutex> lock(SinkMutex());
  Sink().swap(next);
}

}  // namespace fl
