#include "jit/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <regex>
#include <mutex>
#include <shared_mutex>

#include "common/error.h"
#include "common/files.h"
#include "common/sha256.h"

#define MOEJIT_CHECK_NVRTC(call)                                                                      \
  do {                                                                                                 \
    nvrtcResult moejit_nvrtc_status = (call);                                                          \
    if (moejit_nvrtc_status != NVRTC_SUCCESS)                                                          \
      ::moejit::throw_at(::moejit::Phase::Compile, __FILE__, __LINE__,                                 \
                         ::fmt::format("{} failed: {}", #call, nvrtcGetErrorString(moejit_nvrtc_status))); \
  } while (0)

namespace moejit {

nlohmann::json ResourceUsage::to_json() const {
  return {{"registers", registers},         {"stack_bytes", stack_bytes},
          {"spill_store_bytes", spill_store_bytes}, {"spill_load_bytes", spill_load_bytes},
          {"static_shared_bytes", static_shared_bytes}, {"barriers", barriers}};
}

ResourceUsage ResourceUsage::from_json(const nlohmann::json& j) {
  ResourceUsage r;
  r.registers = j.at("registers").get<int>();
  r.stack_bytes = j.at("stack_bytes").get<int>();
  r.spill_store_bytes = j.at("spill_store_bytes").get<int>();
  r.spill_load_bytes = j.at("spill_load_bytes").get<int>();
  r.static_shared_bytes = j.at("static_shared_bytes").get<int>();
  r.barriers = j.at("barriers").get<int>();
  return r;
}

std::vector<std::string> nvrtc_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "-std=c++20", "--ptxas-options=--verbose", "-DMOEJIT_NVRTC=1"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  MOEJIT_CHECK_NVRTC(nvrtcVersion(&major, &minor));
  return fmt::format("{}.{}", major, minor);
}

std::vector<int> nvrtc_supported_archs() {
  int n = 0;
  MOEJIT_CHECK_NVRTC(nvrtcGetNumSupportedArchs(&n));
  std::vector<int> archs(static_cast<std::size_t>(n));
  MOEJIT_CHECK_NVRTC(nvrtcGetSupportedArchs(archs.data()));
  return archs;
}

ResourceUsage parse_ptxas_resources(const std::string& log, const std::string& lowered_name) {
  ResourceUsage r;
  // ptxas prints a "Compiling entry function" / "Function properties" block per function; the
  // lines after the entry's header, up to the next function, describe it.
  const std::string header = "Function properties for " + lowered_name;
  auto pos = log.find(header);
  if (pos == std::string::npos) return r;
  auto end = log.find("Compiling entry function", pos);
  std::string block = log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  std::smatch m;
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_store_bytes = std::stoi(m[2]);
    r.spill_load_bytes = std::stoi(m[3]);
  }
  if (std::regex_search(block, m, std::regex(R"(Used (\d+) registers)"))) r.registers = std::stoi(m[1]);
  if (std::regex_search(block, m, std::regex(R"(used (\d+) barriers)"))) r.barriers = std::stoi(m[1]);
  if (std::regex_search(block, m, std::regex(R"((\d+) bytes smem)"))) r.static_shared_bytes = std::stoi(m[1]);
  return r;
}

namespace {

// ptxas' verbose report reaches the NVRTC log of the program being compiled, but with many
// programs compiling at once (compile_all) a program's log was seen without its own report (an H200
// machine, 16 threads). Compiles share this lock; a compile whose report is missing repeats alone.
std::shared_mutex g_compile_exclusive;

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    nvrtcDestroyProgram(p);
    delete p;
  }
};

void check_arch_supported(const std::string& arch) {
  std::smatch m;
  static const std::regex kNum(R"(sm_(\d+)[af]?)");
  if (!std::regex_match(arch, m, kNum)) return;  // validate_arch reports the spelling
  int number = std::stoi(m[1]);
  auto archs = nvrtc_supported_archs();
  if (std::find(archs.begin(), archs.end(), number) == archs.end()) {
    std::vector<std::string> names;
    for (int a : archs) names.push_back(fmt::format("sm_{}", a));
    throw Error(Phase::Validate, fmt::format("arch {} is not supported by NVRTC {} (supported: {})", arch,
                                             nvrtc_version(), fmt::join(names, ", ")));
  }
}

std::string save_failed_source(const RenderedKernel& k, const std::filesystem::path& dir,
                               const std::vector<std::string>& options) {
  if (dir.empty()) return {};
  try {
    std::filesystem::create_directories(dir);
    auto path = dir / fmt::format("{}-{}.cu", k.spec.family, sha256_hex(k.source).substr(0, 12));
    write_file_synced(path, fmt::format("// NVRTC options: {}\n{}", fmt::join(options, " "), k.source));
    return path.string();
  } catch (const std::exception&) {
    return {};  // the compile error matters more than a failure to save its source
  }
}


CompileOutput compile_once(const RenderedKernel& kernel, const TemplateStore& templates, const CudaHeaders& cuda,
                           const std::filesystem::path& failed_source_dir) {
  auto start = std::chrono::steady_clock::now();
  CompileOutput out;
  out.options = nvrtc_options(kernel.spec.arch);
  out.options.push_back("--include-path=" + cuda.include_dir.string());

  std::vector<const char*> header_texts, header_names;
  for (const auto& path : kernel.template_paths) {
    header_texts.push_back(templates.text(path).c_str());
    header_names.push_back(path.c_str());
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram{});
  MOEJIT_CHECK_NVRTC(nvrtcCreateProgram(prog.get(), kernel.source.c_str(), kernel.source_name.c_str(),
                                        static_cast<int>(header_texts.size()), header_texts.data(),
                                        header_names.data()));
  for (const auto& e : kernel.entries) MOEJIT_CHECK_NVRTC(nvrtcAddNameExpression(*prog, e.name_expression.c_str()));

  std::vector<const char*> option_ptrs;
  for (const auto& o : out.options) option_ptrs.push_back(o.c_str());
  nvrtcResult status = nvrtcCompileProgram(*prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());

  std::size_t log_size = 0;
  MOEJIT_CHECK_NVRTC(nvrtcGetProgramLogSize(*prog, &log_size));
  out.log.resize(log_size);
  MOEJIT_CHECK_NVRTC(nvrtcGetProgramLog(*prog, out.log.data()));
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();

  if (status != NVRTC_SUCCESS) {
    ErrorDetails details{out.log, out.options, save_failed_source(kernel, failed_source_dir, out.options)};
    throw Error(Phase::Compile,
                fmt::format("NVRTC failed to compile {}: {}", kernel.spec.to_string(), nvrtcGetErrorString(status)),
                std::move(details));
  }

  std::size_t size = 0;
  MOEJIT_CHECK_NVRTC(nvrtcGetPTXSize(*prog, &size));
  out.ptx.resize(size);
  MOEJIT_CHECK_NVRTC(nvrtcGetPTX(*prog, out.ptx.data()));
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  MOEJIT_CHECK_NVRTC(nvrtcGetCUBINSize(*prog, &size));
  out.cubin.resize(size);
  MOEJIT_CHECK_NVRTC(nvrtcGetCUBIN(*prog, out.cubin.data()));

  for (const auto& e : kernel.entries) {
    const char* lowered = nullptr;
    MOEJIT_CHECK_NVRTC(nvrtcGetLoweredName(*prog, e.name_expression.c_str(), &lowered));
    CompiledEntry entry{e.name, e.name_expression, lowered, {}};
    entry.resources = parse_ptxas_resources(out.log, entry.lowered_name);
    out.entries.push_back(std::move(entry));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

CompileOutput nvrtc_compile(const RenderedKernel& kernel, const TemplateStore& templates, const CudaHeaders& cuda,
                            const std::filesystem::path& failed_source_dir) {
  check_arch_supported(kernel.spec.arch);
  auto report_complete = [](const CompileOutput& out) {
    for (const auto& e : out.entries)
      if (e.resources.registers < 0) return false;
    return true;
  };
  {
    std::shared_lock lock(g_compile_exclusive);
    CompileOutput out = compile_once(kernel, templates, cuda, failed_source_dir);
    if (report_complete(out)) return out;
  }
  std::unique_lock lock(g_compile_exclusive);
  return compile_once(kernel, templates, cuda, failed_source_dir);
}

}  // namespace moejit
