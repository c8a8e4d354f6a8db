#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "common/error.h"

namespace moejit {
namespace {
// The level is process-wide by nature (stderr is), so it is the one piece of shared state we allow.
std::atomic<int> g_level{static_cast<int>(LogLevel::Warn)};
std::mutex g_write_mutex;
}  // namespace

LogLevel parse_log_level(std::string_view text) {
  if (text == "error") return LogLevel::Error;
  if (text == "warn" || text == "warning") return LogLevel::Warn;
  if (text == "info") return LogLevel::Info;
  if (text == "debug") return LogLevel::Debug;
  throw Error(Phase::Validate,
              fmt::format("unknown log level '{}' (expected error, warn, info or debug)", text));
}

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_line(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard lock(g_write_mutex);
  fmt::print(stderr, "moejit {}: {}\n", kNames[static_cast<int>(level)], message);
}

}  // namespace moejit
