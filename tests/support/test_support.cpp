#include "support/test_support.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>

#include "common/error.h"
#include "common/files.h"

namespace moejit::test {

ScratchDir::ScratchDir(const std::string& tag)
    : path_(std::filesystem::temp_directory_path() / unique_name("moejit-test-" + tag + "-")) {
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Options test_options(const std::filesystem::path& cache_dir) {
  Options o;
  // MOEJIT_TEMPLATE_DIR alone of the environment: the suites then check a template copy (a patch
  // under trial on the GPU machine) with the same binaries, as moejit_bench times it.
  if (const char* dir = std::getenv("MOEJIT_TEMPLATE_DIR"); dir != nullptr && *dir != '\0') o.template_dir = dir;
  o.cache_dir = cache_dir;
  o.disk_cache = !cache_dir.empty();
  o.log_level = LogLevel::Error;
  return o;
}

bool gpu_or_skip(Runtime& rt, const char* test_name) {
  std::string why;
  if (rt.gpu_available(&why)) return true;
  fmt::print("SKIPPED: no GPU — {} ({})\n", test_name, why);
  return false;
}

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) text.append(buffer, n);
  int status = ::pclose(pipe);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string layer_check_error(const MoeLayer& layer, const MoeForwardArgs& args) {
  try {
    layer.check(args);
  } catch (const Error& e) {
    return e.phase() == Phase::Validate ? std::string(e.what()) : "wrong phase: " + std::string(e.what());
  }
  return "";
}

}  // namespace moejit::test
