// A small logger: one level (MOEJIT_LOG = error|warn|info|debug, default warn), lines to stderr.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace moejit {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel parse_log_level(std::string_view text);  // throws Error(Validate) on an unknown level
void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (static_cast<int>(level) <= static_cast<int>(log_level()))
    log_line(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace moejit
