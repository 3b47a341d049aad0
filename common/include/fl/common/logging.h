// Structured logging: one event per line on stderr, either logfmt-style
//   2026-12-03T01:02:03.456Z info round_committed run=1 round=3
// or one JSON object per line
//   {"ts":"2026-12-03T01:02:03.456Z","level":"info","event":"round_committed","run":"1",...}
//
// Thread-safe. Level and format are process-wide: FL_LOG_LEVEL=debug|info|warn|error and
// FL_LOG_FORMAT=text|json in the environment set them at start; SetLogLevel / SetLogFormat
// change them later.
#ifndef FL_COMMON_LOGGING_H_
#define FL_COMMON_LOGGING_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace fl {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

enum class LogFormat { kText, kJson };

void SetLogLevel(LogLevel level);
void SetLogFormat(LogFormat format);
bool LogEnabled(LogLevel level);

using LogField = std::pair<std::string_view, std::string>;

// Writes one line. Values with spaces or quotes are quoted.
void LogEvent(LogLevel level, std::string_view event, std::initializer_list<LogField> fields = {});

// Where lines go instead of stderr (the Python SDK hands them to Python's logging): `sink` is
// called with each line (without its newline), from the thread that logged, with no lock of this
// module held (so a sink may wait for a lock of its own, such as Python's GIL, without
// deadlocking a thread that holds that lock and logs); calls may overlap. An empty function
// restores stderr; a call of the previous sink already under way finishes with it.
using LogSink = std::function<void(LogLevel level, std::string_view line)>;
void SetLogSink(LogSink sink);

}  // namespace fl

#endif  // FL_COMMON_LOGGING_H_
