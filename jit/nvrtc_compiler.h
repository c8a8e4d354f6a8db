// NVRTC compile of a rendered kernel: options, in-memory template headers, name expressions ->
// lowered names, PTX + cubin, and a per-entry resource report parsed from ptxas' verbose output.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "jit/cuda_paths.h"
#include "jit/source_render.h"
#include "jit/template_store.h"

namespace moejit {

struct ResourceUsage {
  int registers = -1;  // -1 = unknown
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int static_shared_bytes = 0;
  int barriers = 0;
  nlohmann::json to_json() const;
  static ResourceUsage from_json(const nlohmann::json& j);
};

struct CompiledEntry {
  std::string name;
  std::string name_expression;
  std::string lowered_name;
  ResourceUsage resources;
};

struct CompileOutput {
  std::string ptx;
  std::string cubin;
  std::string log;
  std::vector<std::string> options;
  std::vector<CompiledEntry> entries;
  double seconds = 0;
};

// The NVRTC options for an arch. The include path is appended by nvrtc_compile; it is not part of
// the cache key (the CUDA headers' version is).
std::vector<std::string> nvrtc_options(const std::string& arch);

// Compiles; on failure saves the source into `failed_source_dir` (when non-empty) and throws
// Error(Compile) carrying the NVRTC log, the options and the saved path.
CompileOutput nvrtc_compile(const RenderedKernel& kernel, const TemplateStore& templates,
                            const CudaHeaders& cuda, const std::filesystem::path& failed_source_dir);

std::string nvrtc_version();               // "13.0"
std::vector<int> nvrtc_supported_archs();  // e.g. 75, 80, ..., 90, 100, 120

// Parses "ptxas info" lines for one lowered entry name.
ResourceUsage parse_ptxas_resources(const std::string& log, const std::string& lowered_name);

}  // namespace moejit
