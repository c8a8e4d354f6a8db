// moejit inspect: what a kernel spec renders and compiles to, without a GPU.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/files.h"
#include "jit/families.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit inspect <family> [--param name=value]... [--arch ARCH] [--emit WHAT]
       moejit inspect --list

Renders the kernel family's source for the given parameters and, for ptx/resources/sass, compiles it
with NVRTC (through the cache). No GPU needed.

  --param name=value   a template parameter (repeatable); --list shows each family's parameters
  --arch ARCH          target arch: sm_80, sm_90a, sm_100a, ... (default sm_90a)
  --emit WHAT          source (default) | ptx | resources | sass | spec | key
  --cache-dir DIR      kernel cache directory (default $MOEJIT_CACHE_DIR or ~/.cache/moejit)
  --list               list kernel families and their parameters

example: moejit inspect routing_sort --param top_k=6 --arch sm_90a --emit source
)";

void print_families() {
  for (const auto& f : families()) {
    fmt::print("{} — {} (template {})\n", f.name, f.doc, f.header);
    for (const auto& p : f.params) {
      std::string def = p.derived ? "derived" : p.default_value ? "default " + param_to_string(*p.default_value) : "required";
      std::string range = p.kind == ParamKind::Int && !p.derived ? fmt::format(" [{}, {}]", p.min, p.max) : "";
      fmt::print("  {:<16} {:<16} {}{} ({})\n", p.name, p.template_name, p.doc, range, def);
    }
  }
}

std::filesystem::path find_tool(const std::string& name, const Options& options) {
  std::vector<std::filesystem::path> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    std::size_t start = 0;
    while (start <= all.size()) {
      auto end = all.find(':', start);
      if (end == std::string::npos) end = all.size();
      if (end > start) dirs.emplace_back(all.substr(start, end - start));
      start = end + 1;
    }
  }
  if (!options.cuda_home.empty()) dirs.push_back(options.cuda_home / "bin");
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var)) dirs.push_back(std::filesystem::path(v) / "bin");
  dirs.emplace_back("/usr/local/cuda/bin");
  for (const auto& d : dirs) {
    std::error_code ec;
    if (std::filesystem::exists(d / name, ec)) return d / name;
  }
  return {};
}

int emit_sass(const CompiledKernel& k, const Options& options) {
  auto tool = find_tool("cuobjdump", options);
  std::string command_prefix;
  if (!tool.empty()) {
    command_prefix = tool.string() + " --dump-sass ";
  } else if (auto nvdisasm = find_tool("nvdisasm", options); !nvdisasm.empty()) {
    command_prefix = nvdisasm.string() + " --print-code ";
  } else {
    fmt::print(stderr, "moejit inspect: --emit sass needs cuobjdump or nvdisasm (CUDA toolkit), and neither was found "
                       "on $PATH, $CUDA_HOME/bin or /usr/local/cuda/bin. --emit ptx works without them.\n");
    return kExitFailure;
  }
  auto path = std::filesystem::temp_directory_path() / (unique_name("moejit-") + ".cubin");
  write_file_synced(path, k.entry->cubin);
  std::string command = command_prefix + "'" + path.string() + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::filesystem::remove(path);
    fmt::print(stderr, "moejit inspect: cannot run {}\n", command);
    return kExitFailure;
  }
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) std::fwrite(buffer, 1, n, stdout);
  int status = ::pclose(pipe);
  std::filesystem::remove(path);
  return status == 0 ? kExitOk : kExitFailure;
}

void print_resources(const CompiledKernel& k) {
  fmt::print("kernel set: {}\n", k.spec.to_string());
  fmt::print("cache key:  {} ({})\n", k.key, k.cache_hit ? "cache hit" : "compiled now");
  fmt::print("compile:    {:.3f} s   cubin {} bytes   ptx {} bytes\n", k.compile_seconds, k.entry->cubin.size(),
             k.entry->ptx.size());
  // The entry column as wide as the longest entry name (gemv2_many_span: 15).
  std::size_t width = 10;
  for (const auto& e : k.entries) width = std::max(width, e.name.size());
  fmt::print("{:<{}} {:>9} {:>10} {:>12} {:>11} {:>9} {:>8}  {}\n", "entry", width, "registers", "stack B",
             "spill st/ld B", "static smem", "barriers", "", "lowered name");
  for (const auto& e : k.entries) {
    const auto& r = e.resources;
    // -1: ptxas' report did not reach the NVRTC log (seen on the GPU machine); the driver's report
    // (Kernel::resources) is authoritative there.
    const std::string regs = r.registers < 0 ? "n/a" : std::to_string(r.registers);
    fmt::print("{:<{}} {:>9} {:>10} {:>6}/{:<6} {:>11} {:>9} {:>8}  {}\n", e.name, width, regs, r.stack_bytes,
               r.spill_store_bytes, r.spill_load_bytes, r.static_shared_bytes, r.barriers, "", e.lowered_name);
  }
}
}  // namespace

int cmd_inspect(const std::vector<std::string>& argv) {
  Args args = parse_args(argv, {"param", "arch", "emit", "cache-dir"}, {"help", "list"});
  if (args.has("help")) {
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  if (args.has("list")) {
    print_families();
    return kExitOk;
  }
  if (args.positional.size() != 1) throw UsageError("expected one kernel family (moejit inspect --list shows them)");
  std::map<std::string, std::string> params;
  for (const auto& p : args.all("param")) {
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("--param expects name=value, got '" + p + "'");
    params[p.substr(0, eq)] = p.substr(eq + 1);
  }
  const std::string emit = args.get("emit", "source");
  static const std::set<std::string> kEmits = {"source", "ptx", "resources", "sass", "spec", "key"};
  if (!kEmits.count(emit)) throw UsageError("--emit must be source, ptx, resources, sass, spec or key");

  KernelSpec spec = make_spec(args.positional[0], args.get("arch", "sm_90a"), params);
  Options options = options_from(args);
  Runtime rt(options);
  if (emit == "spec") {
    fmt::print("{}\n", spec.to_json().dump(2));
    return kExitOk;
  }
  RenderedKernel rendered = rt.render(spec);
  if (emit == "source") {
    fmt::print("{}", rendered.source);
    return kExitOk;
  }
  if (emit == "key") {
    fmt::print("{}\n", rt.cache_key(rendered));
    return kExitOk;
  }
  auto compiled = rt.compile(spec);
  if (emit == "ptx") fmt::print("{}", compiled->entry->ptx);
  if (emit == "resources") print_resources(*compiled);
  if (emit == "sass") return emit_sass(*compiled, options);
  return kExitOk;
}

}  // namespace moejit::cli
