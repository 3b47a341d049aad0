#include "fl/common/crash_point.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "fl/common/logging.h"

namespace fl {
namespace {

struct Armed {
  std::string name;
  int remaining = 0;  // hits left before the crash
};

Armed& Point() {
  static Armed armed = [] {
    Armed a;
    const char* env = std::getenv("FL_CRASH_POINT");
    if (env == nullptr || *env == '\0') return a;
    std::string spec(env);
    size_t at = spec.find('@');
    a.name = spec.substr(0, at);
    a.remaining = at == std::string::npos ? 1 : std::max(1, std::atoi(spec.c_str() + at + 1));
    return a;
  }();
  return armed;
}

}  // namespace

void CrashPoint(const char* name) {
  Armed& armed = Point();
  if (armed.name.empty() || armed.name != name) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (--armed.remaining > 0) return;
  LogEvent(LogLevel::kWarn, "crash_point", {{"point", name}});
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace fl
