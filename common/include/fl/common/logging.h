// Structured logging: one event per line, "ts level event key=value ...", on stderr.
//
// Thread-safe. The level is process-wide (default kInfo); FL_LOG_LEVEL=debug|info|warn|error in
// the environment sets it at start.
#ifndef FL_COMMON_LOGGING_H_
#define FL_COMMON_LOGGING_H_

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace fl {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

using LogField = std::pair<std::string_view, std::string>;

// Writes one line. Values with spaces or quotes are quoted.
void LogEvent(LogLevel level, std::string_view event, std::initializer_list<LogField> fields = {});

}  // namespace fl

#endif  // FL_COMMON_LOGGING_H_
