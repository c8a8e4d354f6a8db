#include "jit/cuda_paths.h"

#include <cstdlib>
#include <regex>
#include <sstream>
#include <vector>

#include "common/error.h"
#include "common/files.h"

#ifndef MOEJIT_BUILD_CUDA_HOME
#define MOEJIT_BUILD_CUDA_HOME "/usr/local/cuda"
#endif

namespace moejit {

namespace {
int read_cuda_version(const std::filesystem::path& include_dir) {
  std::string text;
  if (!try_read_file(include_dir / "cuda.h", text)) return 0;
  std::smatch m;
  static const std::regex kVersion(R"(#define\s+CUDA_VERSION\s+(\d+))");
  return std::regex_search(text, m, kVersion) ? std::stoi(m[1].str()) : 0;
}
}  // namespace

CudaHeaders find_cuda_headers(const std::filesystem::path& preferred) {
  std::vector<std::pair<std::string, std::filesystem::path>> candidates;
  if (!preferred.empty()) candidates.push_back({"MOEJIT_CUDA_HOME", preferred});
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) candidates.push_back({fmt::format("${}", var), v});
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      std::error_code ec;
      auto nvcc = std::filesystem::path(dir) / "nvcc";
      if (!dir.empty() && std::filesystem::exists(nvcc, ec)) {
        auto real = std::filesystem::canonical(nvcc, ec);
        candidates.push_back({"nvcc on $PATH", (ec ? nvcc : real).parent_path().parent_path()});
        break;
      }
    }
  }
  candidates.push_back({"default", "/usr/local/cuda"});
  candidates.push_back({"build-time toolkit", MOEJIT_BUILD_CUDA_HOME});

  std::string searched;
  for (const auto& [why, root] : candidates) {
    auto include = root / "include";
    std::error_code ec;
    if (std::filesystem::exists(include / "cuda_fp16.h", ec)) return {include, read_cuda_version(include)};
    searched += fmt::format("\n  {} ({}): no cuda_fp16.h", include.string(), why);
  }
  throw Error(Phase::Compile, "CUDA headers not found; NVRTC needs the toolkit's include directory. Set "
                              "MOEJIT_CUDA_HOME or CUDA_HOME. Searched:" + searched);
}

}  // namespace moejit
