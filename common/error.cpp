#include "common/error.h"

#include <fmt/format.h>

namespace moejit {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Validate: return "validate";
    case Phase::Render: return "render";
    case Phase::Compile: return "compile";
    case Phase::Load: return "load";
    case Phase::Launch: return "launch";
    case Phase::Cache: return "cache";
    case Phase::Tune: return "tune";
    case Phase::Driver: return "driver";
  }
  return "unknown";
}

namespace {
std::string compose(Phase phase, const std::string& message, const ErrorDetails& d) {
  std::string text = fmt::format("moejit [{}]: {}", phase_name(phase), message);
  if (!d.saved_source_path.empty()) text += fmt::format("\n  source saved at: {}", d.saved_source_path);
  if (!d.options.empty()) text += fmt::format("\n  options: {}", fmt::join(d.options, " "));
  if (!d.nvrtc_log.empty()) text += fmt::format("\n  NVRTC log:\n{}", d.nvrtc_log);
  return text;
}
}  // namespace

Error::Error(Phase phase, std::string message, ErrorDetails details)
    : std::runtime_error(compose(phase, message, details)),
      phase_(phase),
      message_(std::move(message)),
      details_(std::move(details)) {}

void throw_at(Phase phase, const char* file, int line, const std::string& message) {
  // Keep only the path below the repository root: the message is for users, not for our build tree.
  std::string where = file;
  for (const char* top : {"/common/", "/jit/", "/cache/", "/runtime/", "/autotune/", "/tools/"}) {
    if (auto pos = where.rfind(top); pos != std::string::npos) {
      where = where.substr(pos + 1);
      break;
    }
  }
  throw Error(phase, fmt::format("{} ({}:{})", message, where, line));
}

}  // namespace moejit
