#include "common/options.h"

#include <charconv>
#include <cstdlib>
#include <thread>

#include "common/error.h"

namespace moejit {
namespace {
std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}
}  // namespace

std::int64_t parse_int(const std::string& text, const std::string& what) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw Error(Phase::Validate, fmt::format("{}: '{}' is not an integer", what, text));
  return value;
}

bool parse_bool(const std::string& text, const std::string& what) {
  if (text == "1" || text == "true" || text == "on" || text == "yes") return true;
  if (text == "0" || text == "false" || text == "off" || text == "no") return false;
  throw Error(Phase::Validate, fmt::format("{}: '{}' is not a boolean (use 1/0)", what, text));
}

Options Options::from_env() {
  Options o;
  if (auto v = env("MOEJIT_CACHE_DIR")) {
    o.cache_dir = *v;
  } else if (auto xdg = env("XDG_CACHE_HOME")) {
    o.cache_dir = std::filesystem::path(*xdg) / "moejit";
  } else if (auto home = env("HOME")) {
    o.cache_dir = std::filesystem::path(*home) / ".cache" / "moejit";
  }
  if (auto v = env("MOEJIT_CACHE")) o.disk_cache = parse_bool(*v, "MOEJIT_CACHE");
  if (auto v = env("MOEJIT_CACHE_MAX_MB")) {
    auto mb = parse_int(*v, "MOEJIT_CACHE_MAX_MB");
    if (mb <= 0) throw Error(Phase::Validate, "MOEJIT_CACHE_MAX_MB must be positive");
    o.cache_max_bytes = static_cast<std::uint64_t>(mb) << 20;
  }
  if (auto v = env("MOEJIT_TEMPLATE_DIR")) o.template_dir = *v;
  if (auto v = env("MOEJIT_CUDA_HOME")) o.cuda_home = *v;
  if (auto v = env("MOEJIT_LOG")) o.log_level = parse_log_level(*v);
  if (auto v = env("MOEJIT_COMPILE_THREADS")) {
    auto n = parse_int(*v, "MOEJIT_COMPILE_THREADS");
    if (n < 0 || n > 1024) throw Error(Phase::Validate, "MOEJIT_COMPILE_THREADS must be in [0, 1024]");
    o.compile_threads = static_cast<int>(n);
  }
  if (auto v = env("MOEJIT_TUNE")) o.tune_on_first_use = parse_bool(*v, "MOEJIT_TUNE");
  if (auto v = env("MOEJIT_TUNED_DB")) o.tuned_db = *v;
  if (auto v = env("MOEJIT_TUNED_DBS")) o.use_tuned_dbs = parse_bool(*v, "MOEJIT_TUNED_DBS");
  if (auto v = env("MOEJIT_WORK_QUEUE")) o.work_queue = parse_bool(*v, "MOEJIT_WORK_QUEUE") ? 1 : 0;
  if (auto v = env("MOEJIT_TILE_HANDOVER")) o.tile_handover = parse_bool(*v, "MOEJIT_TILE_HANDOVER") ? 1 : 0;
  return o;
}

}  // namespace moejit
