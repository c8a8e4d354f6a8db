// moejit::Error: the one exception type of the library. Every failure carries the phase it happened
// in and, where they exist, the NVRTC log, the compile options and the path of the saved source, so
// an engine can log one structured record instead of parsing a message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace moejit {

enum class Phase { Validate, Render, Compile, Load, Launch, Cache, Tune, Driver };

const char* phase_name(Phase phase);

struct ErrorDetails {
  std::string nvrtc_log;
  std::vector<std::string> options;
  std::string saved_source_path;
};

class Error : public std::runtime_error {
 public:
  Error(Phase phase, std::string message, ErrorDetails details = {});

  Phase phase() const { return phase_; }
  const std::string& message() const { return message_; }
  const std::string& nvrtc_log() const { return details_.nvrtc_log; }
  const std::vector<std::string>& options() const { return details_.options; }
  const std::string& saved_source_path() const { return details_.saved_source_path; }

 private:
  Phase phase_;
  std::string message_;
  ErrorDetails details_;
};

// Throws Error(phase, "<file>:<line>: <message>").
[[noreturn]] void throw_at(Phase phase, const char* file, int line, const std::string& message);

}  // namespace moejit

#define MOEJIT_THROW(phase, ...) \
  ::moejit::throw_at(::moejit::Phase::phase, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// Validation helper: a clear error before anything runs.
#define MOEJIT_REQUIRE(cond, ...)                   \
  do {                                              \
    if (!(cond)) MOEJIT_THROW(Validate, __VA_ARGS__); \
  } while (0)
