// moejit compile: compile kernels ahead into the cache. No GPU needed.
#include <fmt/format.h>

#include <chrono>

#include "common/files.h"
#include "jit/families.h"
#include "jit/moe_names.h"
#include "runtime/moe_layer.h"
#include "runtime/model_config.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit compile --spec spec.json [--arch ARCH]...
       moejit compile --model config.json [--arch ARCH]... [--max-tokens M] [--quant FORMAT]

Compiles kernels ahead of time into the kernel cache (in parallel; MOEJIT_COMPILE_THREADS).

  --spec FILE      a kernel spec {"family":..., "arch":..., "params":{...}}, a list of them,
                   or {"kernels": [...]}
  --model FILE     a Hugging Face config.json: every kernel an MoE layer of that model needs
                   (routing, expert GEMMs for every tile config up to --max-tokens, reduction)
  --max-tokens M   largest batch the layer will run (default 8192)
  --quant FORMAT   the model's expert weights: none (default), int8_channel, int4_group, mxfp4, mxfp4_packed,
                   fp8_block, fp8_channel, fp8_tensor (docs/quantization.md)
  --arch ARCH      target arch (repeatable); overrides the specs' own. Default for --model: sm_90a
  --cache-dir DIR  kernel cache directory
)";

std::vector<KernelSpec> specs_from_file(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(Phase::Validate, fmt::format("{} is not valid JSON: {}", path, e.what()));
  }
  if (j.is_object() && j.contains("kernels")) j = j["kernels"];
  if (j.is_object()) j = nlohmann::json::array({j});
  if (!j.is_array() || j.empty()) throw Error(Phase::Validate, fmt::format("{} holds no kernel specs", path));
  std::vector<KernelSpec> specs;
  for (const auto& item : j) specs.push_back(KernelSpec::from_json(item));
  return specs;
}
}  // namespace

int cmd_compile(const std::vector<std::string>& argv) {
  Args args = parse_args(argv, {"spec", "model", "arch", "cache-dir", "max-tokens", "quant"}, {"help"});
  if (args.has("help")) {
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  if (args.has("spec") == args.has("model")) throw UsageError("give exactly one of --spec or --model");
  if ((args.has("max-tokens") || args.has("quant")) && !args.has("model"))
    throw UsageError("--max-tokens and --quant go with --model");
  if (!args.positional.empty()) throw UsageError("unexpected argument '" + args.positional[0] + "'");
  std::vector<std::string> archs = args.all("arch");

  std::vector<KernelSpec> specs;
  if (args.has("spec")) {
    for (auto& s : specs_from_file(args.get("spec"))) {
      if (archs.empty()) {
        if (s.arch.empty()) throw UsageError("a spec has no arch: give --arch");
        specs.push_back(complete_spec(s));
      }
      for (const auto& arch : archs) {
        s.arch = arch;
        specs.push_back(complete_spec(s));
      }
    }
  } else {
    ModelMoeConfig model = ModelMoeConfig::from_file(args.get("model"));
    fmt::print("model {}\n", model.describe());
    if (archs.empty()) archs.push_back("sm_90a");
    const int max_tokens =
        args.has("max-tokens") ? static_cast<int>(parse_int(args.get("max-tokens"), "--max-tokens")) : 8192;
    if (max_tokens < 1) throw UsageError("--max-tokens must be at least 1");
    MoeSpec layer = model.moe_spec();
    if (args.has("quant")) {
      layer.quant = static_cast<MoeQuant>(parse_quant(args.get("quant")));
      layer.validate();
    }
    for (const auto& arch : archs)
      for (auto& s : moe_layer_kernel_specs(layer, max_tokens, arch)) specs.push_back(s);
  }

  Runtime rt(options_from(args));
  auto start = std::chrono::steady_clock::now();
  auto compiled = rt.compile_all(specs);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& k : compiled)
    fmt::print("{:<9} {}  {}  ({:.3f} s compile)\n", k->cache_hit ? "cached" : "compiled", k->key.substr(0, 16),
               k->spec.to_string(), k->compile_seconds);
  fmt::print("{} kernel sets ready in {:.2f} s; cache: {}\n", compiled.size(), seconds,
             rt.cache().on_disk() ? rt.cache().root().string() : "in memory only");
  return kExitOk;
}

}  // namespace moejit::cli
