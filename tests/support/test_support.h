// Helpers shared by the CPU and GPU tests: scratch directories, runtimes with a private cache,
// and the visible skip of GPU tests on machines without one.
#pragma once

#include <filesystem>
#include <string>

#include "runtime/moe_layer.h"
#include "runtime/runtime.h"

namespace moejit::test {

// A fresh directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Options with a cache at `cache_dir` (empty = in-memory) and embedded templates.
Options test_options(const std::filesystem::path& cache_dir);

// True when a GPU is usable; otherwise prints "SKIPPED: no GPU (<why>)" once per test case.
bool gpu_or_skip(Runtime& rt, const char* test_name);

// What MoeLayer::check says of `args`: "" when accepted, else the message of its Error (whose phase
// must be Validate: anything else is returned prefixed with "wrong phase: ").
std::string layer_check_error(const MoeLayer& layer, const MoeForwardArgs& args);

// Runs a shell command, returns its exit status; output into *output when given.
int run_command(const std::string& command, std::string* output = nullptr);

}  // namespace moejit::test
