// moejit demo: the README's main job. Compiles a top_k=6 MoE layer's kernels (DeepSeek-V2-Lite:
// E=64, top_k=6, K=2048, N=1408) for several archs and shows what it made; with a GPU it also runs
// the whole layer (routing + fused experts) and verifies it against the fp64 CPU reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "runtime/model_config.h"
#include "runtime/moe_check.h"
#include "tools/cli_util.h"

namespace moejit::cli {

namespace {
constexpr const char* kHelp = R"(usage: moejit demo [--model config.json] [--arch ARCH]... [--cache-dir DIR]

Compiles the kernels of one MoE layer (default: DeepSeek-V2-Lite, E=64, top_k=6, K=2048, N=1408,
bf16) for sm_80, sm_90a and sm_100a (or the given --arch list) and prints what was made. Where a GPU
is present it also runs the whole layer (router logits -> routing -> fused experts) on random inputs
for several token counts and checks the output against the fp64 CPU reference (exit 2 on failure).
)";


// "moe_gemm gemm1 silu_mul bm16 bn64 w1x4 s4": the parameters that tell kernels apart.
std::string short_description(const KernelSpec& s) {
  std::string text = s.family;
  for (const char* key : {"role", "activation", "scoring", "top_k", "padded"})
    if (s.params.count(key)) text += fmt::format(" {}", param_to_string(s.params.at(key)));
  if (s.family == "moe_gemm")
    text += fmt::format(" bm{} bn{} w{}x{} s{}", s.get_int("block_m"), s.get_int("block_n"), s.get_int("warps_m"),
                        s.get_int("warps_n"), s.get_int("stages"));
  return text;
}

bool run_on_gpu(Runtime& rt, const ModelMoeConfig& model) {
  auto& dev = rt.device();
  fmt::print("\nGPU: {} (sm_{}{}, {} SMs) -> compiling for {}\n", dev.info().name, dev.info().cc_major,
             dev.info().cc_minor, dev.info().sm_count, dev.info().arch());
  const MoeSpec spec = model.moe_spec();
  MoeLayer layer(rt, spec);
  const int max_tokens = 4096;
  layer.prepare(max_tokens);
  MoeProblem problem(rt.driver(), spec, max_tokens, layer.workspace_bytes(max_tokens), 2026);
  if (problem.expert_patterns() > 0)
    fmt::print("  ({} experts too large to keep each on the host for the reference: {} distinct weight sets, "
               "expert e has set e % {})\n",
               spec.local_experts(), problem.expert_patterns(), problem.expert_patterns());
  bool ok = true;
  for (int tokens : {1, 7, 333, 4096}) {
    problem.poison();  // NaN: every output the check reads must have been written
    layer.forward(nullptr, problem.args(tokens, false));  // router logits in: routing + experts
    problem.fetch_routing(layer, tokens);
    const auto sample = MoeProblem::sample_tokens(tokens, 64);
    const double err = problem.relative_error(problem.output(tokens), sample);
    const int flags = layer.routing_error_flags(problem.args(tokens, false));
    const bool pass = std::isfinite(err) && err <= 1e-2 && flags == 0;
    fmt::print("  MoE layer M={:<5} tiles {:<58} rel. error {:.2e} over {} tokens: {}\n", tokens,
               layer.tile_config(tokens).describe(), err, sample.size(),
               pass ? "PASS (vs the fp64 CPU reference)" : "FAIL");
    std::fflush(stdout);  // each result as it comes (a large layer's CPU reference takes minutes)
    ok = ok && pass;
  }
  return ok;
}
}  // namespace

int cmd_demo(const std::vector<std::string>& argv) {
  Args args = parse_args(argv, {"model", "arch", "cache-dir"}, {"help"});
  if (args.has("help")) {
    fmt::print("{}", kHelp);
    return kExitOk;
  }
  ModelMoeConfig model;
  if (args.has("model")) {
    model = ModelMoeConfig::from_file(args.get("model"));
  } else {
    model = ModelMoeConfig::from_json({{"model_type", "deepseek_v2 (Lite)"}, {"n_routed_experts", 64},
                                       {"num_experts_per_tok", 6}, {"hidden_size", 2048},
                                       {"moe_intermediate_size", 1408}});
  }
  std::vector<std::string> archs = args.all("arch");
  if (archs.empty()) archs = {"sm_80", "sm_90a", "sm_100a"};

  Runtime rt(options_from(args));
  fmt::print("model {}\nlayer {}\n\n", model.describe(), model.moe_spec().describe());
  std::vector<KernelSpec> specs;
  for (const auto& arch : archs)
    for (auto& s : kernel_specs_for(model, arch)) specs.push_back(s);
  auto compiled = rt.compile_all(specs);
  fmt::print("{:<9} {:<8} {:<64} {:>8} {:>9}  {}\n", "status", "arch", "kernel set", "cubin B", "compile s",
             "entries (registers)");
  for (const auto& k : compiled) {
    std::string entries;
    for (const auto& e : k->entries) entries += fmt::format("{}({}) ", e.name, e.resources.registers);
    fmt::print("{:<9} {:<8} {:<64} {:>8} {:>9.3f}  {}\n", k->cache_hit ? "cached" : "compiled", k->spec.arch,
               short_description(k->spec), k->entry->cubin.size(), k->compile_seconds, entries);
  }
  for (const auto& k : compiled) {
    if (k->spec.family != "routing_sort") continue;
    fmt::print("\ntop_k={} x tokens_per_cta={} = {} keys per CTA -> bitonic width PADDED={} (power of two)\n",
               model.top_k, k->spec.get_int("tokens_per_cta"), model.top_k * k->spec.get_int("tokens_per_cta"),
               k->spec.get_int("padded"));
    break;
  }
  fmt::print("cache: {}\n", rt.cache().on_disk() ? rt.cache().root().string() : "in memory only");

  std::string why;
  if (!rt.gpu_available(&why)) {
    fmt::print("\nno GPU here ({})\nCompiled ahead only; run this on a GPU machine to execute and verify.\n", why);
    return kExitOk;
  }
  bool ok = run_on_gpu(rt, model);
  fmt::print("{}\n", ok ? "demo: all GPU checks passed" : "demo: GPU CHECK FAILED");
  return ok ? kExitOk : kExitFailure;
}

}  // namespace moejit::cli
